"""cdk-nag's AwsSolutions pack over the whole stack: no unsuppressed finding, every suppression
reasoned, and the checks still bite when something new is wrong."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Annotations, Match, Template

from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import cdk_context, with_changes
from tidemark.config import TidemarkConfig

NAG_FINDING = Match.string_like_regexp(r"^(AwsSolutions-|CdkNagValidationFailure).*")


def findings(stack: TidemarkStack) -> list[str]:
    annotations = Annotations.from_stack(stack)
    messages = annotations.find_error("*", NAG_FINDING) + annotations.find_warning("*", NAG_FINDING)
    return [f"{message.id}: {str(message.entry.data)[:160]}" for message in messages]


def nagged(config: TidemarkConfig) -> TidemarkStack:
    stack = TidemarkStack(App(context=cdk_context()), "Tidemark", config=config)
    Template.from_stack(stack)  # synthesize: the aspects run here
    return stack


def dev_cluster_config(config: TidemarkConfig) -> TidemarkConfig:
    stream = json.loads(config.model_dump_json())["streams"][0]
    stream["source"] = {"kind": "msk", "topic": "orders"}
    return with_changes(config, dev_cluster={"enabled": True}, streams=[stream])


@pytest.mark.parametrize("variant", ["example", "dev_cluster"])
def test_no_unsuppressed_findings(example_config: TidemarkConfig, variant: str) -> None:
    config = example_config if variant == "example" else dev_cluster_config(example_config)
    assert findings(nagged(config)) == []


def suppressions(template: Template) -> list[dict[str, Any]]:
    found = []
    for resource in template.to_json()["Resources"].values():
        found.extend(resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []))
    return found


def test_every_suppression_names_a_rule_and_gives_a_reason(example_config: TidemarkConfig) -> None:
    stack = nagged(example_config)
    found = suppressions(Template.from_stack(stack))
    assert {item["id"] for item in found} == {
        "AwsSolutions-IAM5",
        "AwsSolutions-L1",
        "AwsSolutions-S1",
        "CdkNagValidationFailure",
    }
    for item in found:
        assert len(item["reason"]) >= 40, item
    # wildcard suppressions name the exact findings they cover, never the whole rule
    assert all(item.get("applies_to") for item in found if item["id"] == "AwsSolutions-IAM5")


def test_a_new_wildcard_grant_fails_synth(example_config: TidemarkConfig) -> None:
    """With cdk.json's validation flags, an unsuppressed finding stops synth itself, as in `cdk synth`."""
    stack = TidemarkStack(App(context=cdk_context()), "Tidemark", config=example_config)
    stack.archiver.functions["orders"].add_to_role_policy(
        iam.PolicyStatement(actions=["s3:*"], resources=[stack.storage.bucket.bucket_arn])
    )
    with pytest.raises(RuntimeError, match=r"AwsSolutions-IAM5\[Action::s3:\*\]"):
        Template.from_stack(stack)
