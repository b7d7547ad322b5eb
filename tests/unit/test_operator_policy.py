"""The operator policy (``stacks.operators.OperatorAccess``): one managed policy, named for the
stack, granting the operator commands exactly what they do -- every action named, every resource
scoped to the ledger, the streams' prefixes, the archive key and the stack -- and its output.

Synthesized in the whole stack (once) and, for its inputs, in a bare ``Stack``. That the commands
need every grant, and need nothing more, is ``tests/integration/test_iam_operators.py``'s.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from stacks.grants import LEDGER_ACTIONS
from stacks.operators import OperatorAccess, operator_policy_name
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import cdk_context, logical_id, synth_stack
from tidemark.config import TidemarkConfig
from tidemark.exceptions import ConfigError


@pytest.fixture(scope="module")
def synthesized(example_config: TidemarkConfig) -> tuple[TidemarkStack, Template]:
    return synth_stack(example_config, nag=False)


def policy_of(template: Template) -> tuple[str, dict[str, Any]]:
    ((policy_id, policy),) = template.find_resources("AWS::IAM::ManagedPolicy").items()
    return policy_id, policy["Properties"]


def by_sid(properties: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {statement["Sid"]: statement for statement in properties["PolicyDocument"]["Statement"]}


def objects(bucket: str, *prefixes: str) -> list[dict[str, Any]]:
    return [{"Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, f"/{prefix}/*"]]} for prefix in prefixes]


def test_the_policy_grants_what_the_operator_commands_do(synthesized: tuple[TidemarkStack, Template]) -> None:
    stack, template = synthesized
    bucket, table = logical_id(stack.storage.bucket), logical_id(stack.storage.ledger_table)
    key = logical_id(stack.storage.encryption_key)
    _, properties = policy_of(template)
    streams = sorted(f"{prefix}/orders" for prefix in ("raw", "errors"))
    assert by_sid(properties) == {
        "ReadStackOutputs": {
            "Sid": "ReadStackOutputs",
            "Effect": "Allow",
            "Action": "cloudformation:DescribeStacks",
            "Resource": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":cloudformation:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Ref": "AWS::AccountId"},
                        ":stack/Tidemark/*",
                    ],
                ]
            },
        },
        "ReadLedger": {
            "Sid": "ReadLedger",
            "Effect": "Allow",
            "Action": ["dynamodb:GetItem", "dynamodb:Query"],
            "Resource": {"Fn::GetAtt": [table, "Arn"]},
            # the configured streams' items only (stacks.grants): states, objects, marks, registry
            "Condition": {
                "ForAllValues:StringLike": {
                    "dynamodb:LeadingKeys": ["PART#orders#*", "HOUR#orders#*", "HOURS#orders", "STREAM#orders"]
                }
            },
        },
        "WriteLedger": {
            "Sid": "WriteLedger",
            "Effect": "Allow",
            "Action": ["dynamodb:PutItem", "dynamodb:UpdateItem"],
            "Resource": {"Fn::GetAtt": [table, "Arn"]},
            # never the registry (the sweeper's) nor the aggregation runs (the job's)
            "Condition": {
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["PART#orders#*", "HOUR#orders#*", "HOURS#orders"]}
            },
        },
        "ListStreamObjects": {
            "Sid": "ListStreamObjects",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": {"Fn::GetAtt": [bucket, "Arn"]},
            "Condition": {
                "StringLike": {"s3:prefix": ["raw/orders/", "raw/orders/*", "errors/orders/", "errors/orders/*"]}
            },
        },
        "ReadStreamObjects": {
            "Sid": "ReadStreamObjects",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": objects(bucket, *streams),
        },
        "WriteStreamObjects": {
            "Sid": "WriteStreamObjects",
            "Effect": "Allow",
            "Action": ["s3:AbortMultipartUpload", "s3:PutObject"],
            "Resource": objects(bucket, *streams),
        },
        "ArchiveKey": {
            "Sid": "ArchiveKey",
            "Effect": "Allow",
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Resource": {"Fn::GetAtt": [key, "Arn"]},
        },
    }


def test_no_wildcard_action_no_star_resource_and_nothing_deletes(synthesized: tuple[TidemarkStack, Template]) -> None:
    _, properties = policy_of(synthesized[1])
    statements = properties["PolicyDocument"]["Statement"]
    actions = [
        action for s in statements for action in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    ]
    assert [action for action in actions if "*" in action or "Delete" in action] == []
    assert all(s["Effect"] == "Allow" and s["Resource"] != "*" and "*" not in s["Resource"] for s in statements)
    # the ledger's actions are the ones its code uses (the functions hold the same, LEDGER_ACTIONS)
    assert {action for action in actions if action.startswith("dynamodb:")} == set(LEDGER_ACTIONS)


def test_the_policy_is_named_for_the_stack_and_attached_to_nothing(synthesized: tuple[TidemarkStack, Template]) -> None:
    policy_id, properties = policy_of(synthesized[1])
    assert properties["ManagedPolicyName"] == {"Fn::Join": ["", ["TidemarkOperator-", {"Ref": "AWS::Region"}]]}
    assert not {"Roles", "Users", "Groups"} & set(properties)  # the operators' own role attaches it
    for role in synthesized[1].find_resources("AWS::IAM::Role").values():
        assert {"Ref": policy_id} not in role["Properties"].get("ManagedPolicyArns", [])


def test_the_output_names_the_policy(synthesized: tuple[TidemarkStack, Template]) -> None:
    policy_id, _ = policy_of(synthesized[1])
    synthesized[1].has_output(
        "OperatorPolicyArn",
        {
            "Value": {"Ref": policy_id},
            "Description": Match.string_like_regexp(r"attach it to your operators' role.*own cluster credentials"),
        },
    )


def bare(
    streams: Any = ("orders", "payments"),
    *,
    raw_prefix: str = "archive",
    errors_prefix: str = "dead",
    policy_name: str | None = None,
    region: str = "eu-west-1",
    stack: Stack | None = None,
) -> tuple[OperatorAccess, Template]:
    """The policy in a bare stack (``stack``: one of the caller's, e.g. env-agnostic)."""
    stack = stack or Stack(App(), "Archive", env=Environment(account="123456789012", region=region))
    access = OperatorAccess(
        stack,
        "Operators",
        bucket=s3.Bucket(stack, "ArchiveBucket"),
        ledger_table=dynamodb.Table(
            stack, "Ledger", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING)
        ),
        key=kms.Key(stack, "Key"),
        streams=streams,
        raw_prefix=raw_prefix,
        errors_prefix=errors_prefix,
        policy_name=policy_name,
    )
    return access, Template.from_stack(stack)


def test_object_grants_name_every_streams_folders_and_no_other() -> None:
    _, template = bare()
    _, properties = policy_of(template)
    statements = by_sid(properties)
    (bucket,) = template.find_resources("AWS::S3::Bucket")
    folders = sorted(f"{prefix}/{stream}" for stream in ("orders", "payments") for prefix in ("archive", "dead"))
    for sid in ("ReadStreamObjects", "WriteStreamObjects"):
        assert sorted(statements[sid]["Resource"], key=str) == sorted(objects(bucket, *folders), key=str)
    listed = statements["ListStreamObjects"]["Condition"]["StringLike"]["s3:prefix"]
    assert sorted(listed) == sorted(f"{folder}{tail}" for folder in folders for tail in ("/", "/*"))
    assert properties["ManagedPolicyName"] == "ArchiveOperator-eu-west-1"
    assert operator_policy_name("Tidemark", "us-east-1") == "TidemarkOperator-us-east-1"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"streams": []}, "at least one stream"),
        ({"streams": "orders"}, "at least one stream"),
        ({"streams": ["Orders"]}, "'Orders' is not a stream name"),
        ({"streams": ["orders", "orders"]}, "repeat"),
        ({"raw_prefix": "raw/"}, r"archive.raw_prefix: 'raw/'"),
        ({"errors_prefix": ""}, "archive.errors_prefix"),
        ({"raw_prefix": "dead"}, "must differ"),
        ({"policy_name": "operators policy"}, "not an IAM policy name"),
        ({"policy_name": "x" * 129}, "not an IAM policy name"),
    ],
)
def test_bad_input_fails_at_synth_naming_it(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        bare(**kwargs)


def test_a_region_token_leaves_room_for_the_region() -> None:
    stack = Stack(App(), "S" * 100)  # env-agnostic: the region is a token
    with pytest.raises(ConfigError, match="not an IAM policy name"):
        bare(["orders"], raw_prefix="raw", errors_prefix="errors", stack=stack)


def test_a_wildcard_on_the_operator_policy_fails_nag(example_config: TidemarkConfig) -> None:
    """The policy's cdk-nag suppressions name its exact findings (prefixed objects, its stack)."""
    stack = TidemarkStack(App(context=cdk_context()), "Tidemark", config=example_config)
    stack.operators.policy.add_statements(
        iam.PolicyStatement(actions=["s3:GetObject"], resources=[stack.storage.bucket.arn_for_objects("*")])
    )
    with pytest.raises(
        RuntimeError, match=r"AwsSolutions-IAM5\[Resource::<StorageArchiveBucket[A-Za-z0-9]*\.Arn>/\*\]"
    ):
        Template.from_stack(stack)
