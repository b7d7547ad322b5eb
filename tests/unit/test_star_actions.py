"""Issue 31, part 5: no wildcard that can hide behind cdk-nag's per-resource suppression.

The stack's own policies pass ``StarResourceCheck``; actions planted on ``Resource: "*"`` of the
archiver's role -- which cdk-nag reported as suppressed, the role's ``Resource::*`` suppression
covering any action -- fail the synth, one error each. ``star_findings`` is checked on documents
directly too."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Annotations, Match, Template

from stacks.star_actions import CONDITIONED_STAR_ACTIONS, STAR_ACTIONS, star_findings
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import cdk_context
from tidemark.config import TidemarkConfig

CHECK = Match.string_like_regexp("Tidemark star-resource check")


def star_errors(stack: TidemarkStack) -> list[Any]:
    return Annotations.from_stack(stack).find_error("*", CHECK)


def test_the_stack_grants_nothing_on_star_but_what_aws_requires(example_config: TidemarkConfig) -> None:
    stack = TidemarkStack(App(context=cdk_context()), "Tidemark", config=example_config, nag=False)
    assert star_errors(stack) == []


def test_actions_planted_on_star_fail_the_synth_one_error_each(example_config: TidemarkConfig) -> None:
    stack = TidemarkStack(App(context=cdk_context()), "Tidemark", config=example_config, nag=False)
    role = stack.archiver.functions["orders"].role
    role.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["secretsmanager:GetSecretValue", "dynamodb:DeleteTable", "s3:DeleteObject", "ec2:DescribeVpcs"],
            resources=["*"],
        )
    )
    role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:Get*"], resources=["*"]))
    role.add_to_principal_policy(iam.PolicyStatement(actions=["cloudwatch:PutMetricData"], resources=["*"]))
    with pytest.raises(Exception, match="ValidationFailed") as failed:
        Template.from_stack(stack)  # what `cdk synth` does: the check's errors stop it
    messages = [line for line in str(failed.value).splitlines() if "Tidemark star-resource check" in line]
    assert len(messages) == 5, messages
    for planted in ("secretsmanager:GetSecretValue", "dynamodb:DeleteTable", "s3:DeleteObject"):
        assert any(f"{planted} on Resource '*': not an action AWS authorizes only on '*'" in m for m in messages)
    assert any("\"s3:Get*\" on Resource '*': a wildcard action may grant anything" in m for m in messages)
    unconditioned = "cloudwatch:PutMetricData on Resource '*' without a cloudwatch:namespace condition"
    assert any(unconditioned in m for m in messages)


def test_findings_of_documents() -> None:
    scoped = {"Effect": "Allow", "Action": "dynamodb:DeleteTable", "Resource": "arn:aws:dynamodb:::table/t"}
    denied = {"Effect": "Deny", "Action": "*", "Resource": "*"}
    conditioned = {
        "Effect": "Allow",
        "Action": ["cloudwatch:PutMetricData"],
        "Resource": "*",
        "Condition": {"StringEquals": {"cloudwatch:namespace": "Tidemark"}},
    }
    assert star_findings({"Statement": [scoped, denied, conditioned]}) == []
    assert star_findings({"Statement": {"Effect": "Allow", "Action": "*", "Resource": ["*"]}}) == [
        "\"*\" on Resource '*': a wildcard action may grant anything"
    ]


def test_every_allowed_star_action_has_a_reason() -> None:
    assert all(reason.strip() for reason in STAR_ACTIONS.values())
    assert all(":" in key for key in CONDITIONED_STAR_ACTIONS.values())
    assert not set(STAR_ACTIONS) & set(CONDITIONED_STAR_ACTIONS)
