"""The CDK skeleton: storage resources, the stack's outputs and config validation at synth.

Pure synthesis (jsii runs the CDK in a local Node process): no Docker, no network, no AWS.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk import Stack
from aws_cdk.assertions import Capture, Match, Template

import app as cdk_app
from stacks.storage import LEDGER_TTL_ATTRIBUTE, StorageConstruct, ledger_table_keys
from tests.support.cdk import cdk_context as support_cdk_context
from tests.support.cdk import logical_id, synth_stack
from tidemark.config import TidemarkConfig
from tidemark.exceptions import ConfigError
from tidemark.ledger.dynamodb import ledger_table_schema

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = REPO / "config" / "tidemark.yaml"
CDK_JSON = REPO / "cdk.json"

SCHEMA = ledger_table_schema("any")


@pytest.fixture(scope="module")
def storage_stack(example_config: TidemarkConfig) -> tuple[Stack, StorageConstruct]:
    stack = Stack()
    return stack, StorageConstruct(stack, "Storage", config=example_config)


@pytest.fixture(scope="module")
def template(storage_stack: tuple[Stack, StorageConstruct]) -> Template:
    return Template.from_stack(storage_stack[0])


def only_logical_id(template: Template, resource_type: str) -> str:
    resources = template.find_resources(resource_type)
    assert len(resources) == 1, f"expected one {resource_type}, found {sorted(resources)}"
    return next(iter(resources))


def by_name(items: list[dict[str, str]]) -> list[dict[str, str]]:
    return sorted(items, key=lambda item: item["AttributeName"])


@pytest.fixture
def cdk_context() -> dict[str, Any]:
    """The context the CDK CLI passes from cdk.json (same feature flags), bundling skipped."""
    return support_cdk_context()


@pytest.fixture
def broken_config(tmp_path: Path) -> Path:
    """The example configuration with one typo under ``streams[0].flush``."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    data["streams"][0]["flush"]["max_recods"] = 10
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


# --- ledger table -------------------------------------------------------------------------------


def test_table_keys_match_ledger_table_schema(template: Template) -> None:
    key_schema, definitions = Capture(), Capture()
    template.has_resource_properties(
        "AWS::DynamoDB::Table", {"KeySchema": key_schema, "AttributeDefinitions": definitions}
    )
    assert key_schema.as_array() == SCHEMA["KeySchema"]
    assert by_name(definitions.as_array()) == by_name(SCHEMA["AttributeDefinitions"])


def test_table_is_on_demand_with_pitr_and_ttl(template: Template) -> None:
    template.resource_count_is("AWS::DynamoDB::Table", 2)  # the ledger and the aggregates
    template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "BillingMode": "PAY_PER_REQUEST",
            "ProvisionedThroughput": Match.absent(),
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
        },
    )
    assert LEDGER_TTL_ATTRIBUTE == "expires_at"


def test_tables_are_retained(template: Template) -> None:
    tables = template.find_resources("AWS::DynamoDB::Table")
    assert len(tables) == 2
    assert all((t["DeletionPolicy"], t["UpdateReplacePolicy"]) == ("Retain", "Retain") for t in tables.values())


def test_aggregates_table_has_the_sinks_keys_and_pitr_without_ttl(
    storage_stack: tuple[Stack, StorageConstruct], template: Template
) -> None:
    _, storage = storage_stack
    aggregates = template.find_resources("AWS::DynamoDB::Table")[logical_id(storage.aggregates_table)]["Properties"]
    assert aggregates["KeySchema"] == SCHEMA["KeySchema"]
    assert aggregates["BillingMode"] == "PAY_PER_REQUEST"
    assert aggregates["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert "TimeToLiveSpecification" not in aggregates


# --- archive bucket -----------------------------------------------------------------------------


def test_bucket_is_encrypted_with_its_own_rotating_kms_key(template: Template) -> None:
    key_ref = Capture()
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {
                        "BucketKeyEnabled": True,
                        "ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key_ref},
                    }
                ]
            }
        },
    )
    key_id = only_logical_id(template, "AWS::KMS::Key")
    assert key_ref.as_object() == {"Fn::GetAtt": [key_id, "Arn"]}
    template.has_resource(
        "AWS::KMS::Key",
        {"Properties": Match.object_like({"EnableKeyRotation": True}), "DeletionPolicy": "Retain"},
    )


def test_bucket_blocks_all_public_access(template: Template) -> None:
    template.resource_properties_count_is(
        "AWS::S3::Bucket",
        {
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            }
        },
        2,  # the archive bucket and its access-log bucket
    )


def test_bucket_policy_denies_insecure_transport(
    storage_stack: tuple[Stack, StorageConstruct], template: Template
) -> None:
    bucket_id = logical_id(storage_stack[1].bucket)
    template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": bucket_id},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Principal": {"AWS": "*"},
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            },
        },
    )


def test_bucket_aborts_incomplete_multipart_uploads_after_one_day(template: Template) -> None:
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "LifecycleConfiguration": {
                "Rules": Match.array_with(
                    [
                        Match.object_like(
                            {"Status": "Enabled", "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}
                        )
                    ]
                )
            }
        },
    )


def test_bucket_is_unversioned_and_retained(storage_stack: tuple[Stack, StorageConstruct], template: Template) -> None:
    bucket = template.find_resources("AWS::S3::Bucket")[logical_id(storage_stack[1].bucket)]
    assert "VersioningConfiguration" not in bucket["Properties"]
    assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_bucket_logs_access_to_its_own_log_bucket(
    storage_stack: tuple[Stack, StorageConstruct], template: Template
) -> None:
    buckets = template.find_resources("AWS::S3::Bucket")
    archive = buckets[logical_id(storage_stack[1].bucket)]["Properties"]
    (logs_id,) = set(buckets) - {logical_id(storage_stack[1].bucket)}
    assert archive["LoggingConfiguration"] == {
        "DestinationBucketName": {"Ref": logs_id},
        "LogFilePrefix": "archive-bucket/",
    }


def test_transitions_from_config_apply_to_raw_and_errors_only(
    storage_stack: tuple[Stack, StorageConstruct], template: Template
) -> None:
    rules = template.find_resources("AWS::S3::Bucket")[logical_id(storage_stack[1].bucket)]["Properties"][
        "LifecycleConfiguration"
    ]["Rules"]
    transitions = {rule["Prefix"]: rule["Transitions"] for rule in rules if "Transitions" in rule}
    expected = [
        {"StorageClass": "STANDARD_IA", "TransitionInDays": 30},
        {"StorageClass": "GLACIER_IR", "TransitionInDays": 90},
    ]
    assert transitions == {"raw/": expected, "errors/": expected}


# --- construct API ------------------------------------------------------------------------------


def test_properties_expose_the_synthesized_resources(
    storage_stack: tuple[Stack, StorageConstruct], template: Template, example_config: TidemarkConfig
) -> None:
    stack, storage = storage_stack
    tables = template.find_resources("AWS::DynamoDB::Table")
    ledger_id = next(lid for lid, t in tables.items() if "TimeToLiveSpecification" in t["Properties"])
    assert stack.resolve(storage.ledger_table.table_name) == {"Ref": ledger_id}
    assert stack.resolve(storage.bucket.bucket_name)["Ref"] in template.find_resources("AWS::S3::Bucket")
    assert storage.config is example_config


def test_rejects_an_unvalidated_config() -> None:
    raw = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    with pytest.raises(TypeError, match="validated TidemarkConfig"):
        StorageConstruct(Stack(), "Storage", config=raw)


def test_ledger_table_keys_translates_the_schema() -> None:
    keys = ledger_table_keys(SCHEMA)
    assert (keys.partition_key.name, keys.partition_key.type.name) == ("pk", "STRING")
    assert keys.sort_key is not None
    assert (keys.sort_key.name, keys.sort_key.type.name) == ("sk", "STRING")
    assert keys.billing_mode.name == "PAY_PER_REQUEST"

    hash_only = {**SCHEMA, "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}]}
    assert ledger_table_keys(hash_only).sort_key is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"KeySchema": [{"AttributeName": "sk", "KeyType": "RANGE"}]}, "one HASH key"),
        (
            {"KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "HASH"}]},
            "one HASH key",
        ),
        ({"AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}]}, "'sk' has no AttributeDefin"),
        ({"AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "SS"}]}, "unsupported AttributeType"),
        ({"BillingMode": "ON_DEMAND"}, "unsupported BillingMode"),
        ({"KeySchema": None}, "malformed"),
    ],
)
def test_ledger_table_keys_rejects_what_it_cannot_translate(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ledger_table_keys({**SCHEMA, **change})


def test_ledger_table_keys_rejects_a_key_that_is_the_ttl_attribute() -> None:
    with pytest.raises(ValueError, match="cannot also be the TTL attribute"):
        ledger_table_keys(SCHEMA, ttl_attribute="sk")


# --- stack and app ------------------------------------------------------------------------------


def test_stack_outputs_name_the_bucket_and_the_tables(example_config: TidemarkConfig) -> None:
    stack, template = synth_stack(example_config, nag=False)
    template.has_output("ArchiveBucketName", {"Value": {"Ref": logical_id(stack.storage.bucket)}})
    template.has_output("LedgerTableName", {"Value": {"Ref": logical_id(stack.storage.ledger_table)}})
    template.has_output("AggregatesTableName", {"Value": {"Ref": logical_id(stack.storage.aggregates_table)}})


def test_cdk_json_runs_app_py_on_the_example_config(cdk_context: dict[str, Any]) -> None:
    document = json.loads(CDK_JSON.read_text(encoding="utf-8"))
    assert document["app"] == ".venv/bin/python app.py"
    assert (REPO / cdk_context["config"]).resolve() == EXAMPLE_CONFIG
    assert cdk_context["stack_name"] == "Tidemark"


def test_app_synthesizes_the_example_config(
    cdk_context: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # relative config paths resolve against the app, not the cwd
    assembly = cdk_app.build_app(context=cdk_context, outdir=str(tmp_path / "cdk.out")).synth()
    assert [stack.stack_name for stack in assembly.stacks] == ["Tidemark"]
    outputs = assembly.get_stack_by_name("Tidemark").template["Outputs"]
    assert {"ArchiveBucketName", "LedgerTableName"} <= set(outputs)


def test_app_takes_the_stack_name_from_context(cdk_context: dict[str, Any], tmp_path: Path) -> None:
    app = cdk_app.build_app(context={**cdk_context, "stack_name": "TidemarkDev"}, outdir=str(tmp_path))
    assert [stack.stack_name for stack in app.synth().stacks] == ["TidemarkDev"]


def test_broken_config_fails_synth_naming_the_field(cdk_context: dict[str, Any], broken_config: Path) -> None:
    with pytest.raises(ConfigError, match=r"streams\[0\]\.flush\.max_recods: unknown field"):
        cdk_app.build_app(context={**cdk_context, "config": str(broken_config)})


def test_explicit_config_path_wins_over_context(cdk_context: dict[str, Any], broken_config: Path) -> None:
    with pytest.raises(ConfigError, match=r"streams\[0\]\.flush"):
        cdk_app.build_app(broken_config, context=cdk_context)


def test_main_exits_with_the_config_error(cdk_context: dict[str, Any], broken_config: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        cdk_app.main(context={**cdk_context, "config": str(broken_config)})
    assert isinstance(exited.value.code, str)
    assert "streams[0].flush.max_recods: unknown field" in exited.value.code
