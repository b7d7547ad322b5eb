"""Issue 31, part 1: the archive bucket refuses overwrites and deletes, on the synthesized template.

The bucket policy's two statements (``stacks.storage.archive_protection_statements``) with their
exact actions, resources and conditions; the break-glass role's exemption; the protection variants
(``archive.protection``: none, versioning, Object Lock) and the config checks that keep a deploy
from replacing the bucket; cdk-nag on the variants. moto cannot evaluate bucket policies: what the
statements do to each request the code sends is proven by our own evaluator in
``tests/integration/test_bucket_policy_writes.py``.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Annotations, Match, Template

from stacks.archiver import ON_FAILURE_PREFIX
from stacks.storage import DENY_DELETE_SID, DENY_OVERWRITE_SID, StorageConstruct
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import REPO, cdk_context, logical_id, with_changes
from tidemark.config import TidemarkConfig, parse_config
from tidemark.exceptions import ConfigError

BREAK_GLASS = "arn:aws:iam::123456789012:role/ops/tidemark-break-glass"
NAG_FINDING = Match.string_like_regexp(r"^(AwsSolutions-|CdkNagValidationFailure).*")
#: the CDK CLI's resource specification (what ``cdk diff`` reads to say "requires replacement")
CDK_SPEC = REPO / "node_modules" / "aws-cdk" / "db.json.gz"


def archive_changes(config: TidemarkConfig, **settings: Any) -> TidemarkConfig:
    archive = json.loads(config.archive.model_dump_json())
    archive.update(settings)
    return with_changes(config, archive=archive)


def storage(config: TidemarkConfig) -> tuple[StorageConstruct, dict[str, Any]]:
    stack = Stack()
    construct = StorageConstruct(stack, "Storage", config=config)
    return construct, Template.from_stack(stack).to_json()


def render(value: Any, bucket_id: str) -> Any:
    """The template's ``Fn::Join`` of the bucket's ARN and a key pattern, as ``<bucket>/<pattern>``."""
    if isinstance(value, list):
        return [render(item, bucket_id) for item in value]
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(str(render(part, bucket_id)) for part in parts)
    if value == {"Fn::GetAtt": [bucket_id, "Arn"]}:
        return "<bucket>"
    return value


def statements(construct: StorageConstruct, template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The archive bucket policy's statements by Sid, their resources rendered."""
    bucket_id = logical_id(construct.bucket)
    (policy,) = [
        body["Properties"]["PolicyDocument"]["Statement"]
        for body in template["Resources"].values()
        if body["Type"] == "AWS::S3::BucketPolicy" and body["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    return {
        statement.get("Sid", "tls"): {**statement, "Resource": render(statement["Resource"], bucket_id)}
        for statement in policy
    }


def bucket(construct: StorageConstruct, template: dict[str, Any]) -> dict[str, Any]:
    resource: dict[str, Any] = template["Resources"][logical_id(construct.bucket)]
    return resource


# -- the policy ---------------------------------------------------------------------------------


def test_object_creation_without_if_none_match_is_denied_on_every_archive_prefix(
    example_config: TidemarkConfig,
) -> None:
    """AWS's documented enforcement of conditional writes: Null s3:if-none-match on an object
    creation (s3:ObjectCreationOperation true: PutObject, CompleteMultipartUpload, CopyObject),
    so CreateMultipartUpload and UploadPart -- which take no conditional header -- still pass."""
    construct, template = storage(example_config)
    assert statements(construct, template)[DENY_OVERWRITE_SID] == {
        "Sid": DENY_OVERWRITE_SID,
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:PutObject",
        "Resource": ["<bucket>/raw/*", "<bucket>/errors/*", "<bucket>/manifests/*"],
        "Condition": {"Null": {"s3:if-none-match": "true"}, "Bool": {"s3:ObjectCreationOperation": "true"}},
    }


def test_deletes_are_denied_to_everyone_without_a_break_glass_role(example_config: TidemarkConfig) -> None:
    construct, template = storage(example_config)
    assert statements(construct, template)[DENY_DELETE_SID] == {
        "Sid": DENY_DELETE_SID,
        "Effect": "Deny",
        "Principal": "*",
        "Action": ["s3:DeleteObject", "s3:DeleteObjectVersion"],
        "Resource": [
            "<bucket>/raw/*",
            "<bucket>/errors/*",
            "<bucket>/manifests/*",
            f"<bucket>/{ON_FAILURE_PREFIX}/*",
        ],
    }


def test_the_break_glass_role_alone_is_exempt_from_the_delete_deny_not_from_the_overwrite_deny(
    example_config: TidemarkConfig,
) -> None:
    construct, template = storage(archive_changes(example_config, break_glass_role_arn=BREAK_GLASS))
    found = statements(construct, template)
    assert found[DENY_DELETE_SID]["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": BREAK_GLASS}}
    assert BREAK_GLASS not in json.dumps(found[DENY_OVERWRITE_SID])
    # the TLS-only statement is still there, unchanged
    assert found["tls"]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert set(found) == {"tls", DENY_OVERWRITE_SID, DENY_DELETE_SID}


def test_the_statements_follow_the_configured_prefixes(example_config: TidemarkConfig) -> None:
    sweeper = {**json.loads(example_config.sweeper.model_dump_json()), "manifests_prefix": "done"}
    config = with_changes(
        archive_changes(example_config, raw_prefix="archive-raw", errors_prefix="archive-dead"), sweeper=sweeper
    )
    construct, template = storage(config)
    found = statements(construct, template)
    expected = ["<bucket>/archive-raw/*", "<bucket>/archive-dead/*", "<bucket>/done/*"]
    assert found[DENY_OVERWRITE_SID]["Resource"] == expected
    assert found[DENY_DELETE_SID]["Resource"] == [*expected, f"<bucket>/{ON_FAILURE_PREFIX}/*"]


# -- protection: none | versioning | object_lock -------------------------------------------------


def object_lock(config: TidemarkConfig, **lock: Any) -> TidemarkConfig:
    settings = {"mode": "COMPLIANCE", "retention": "400d", "created_with_bucket": True, **lock}
    return archive_changes(config, protection="object_lock", object_lock=settings)


def test_by_default_the_bucket_is_neither_versioned_nor_locked(example_config: TidemarkConfig) -> None:
    construct, template = storage(example_config)
    properties = bucket(construct, template)["Properties"]
    assert not {"VersioningConfiguration", "ObjectLockEnabled", "ObjectLockConfiguration"} & set(properties)


def test_versioning_keeps_every_version(example_config: TidemarkConfig) -> None:
    construct, template = storage(archive_changes(example_config, protection="versioning"))
    resource = bucket(construct, template)
    assert resource["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    assert not {"ObjectLockEnabled", "ObjectLockConfiguration"} & set(resource["Properties"])
    assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == ("Retain", "Retain")


@pytest.mark.parametrize("mode", ["COMPLIANCE", "GOVERNANCE"])
def test_object_lock_locks_every_version_for_its_retention(example_config: TidemarkConfig, mode: str) -> None:
    construct, template = storage(object_lock(example_config, mode=mode, retention="400d"))
    resource = bucket(construct, template)
    properties = resource["Properties"]
    assert properties["ObjectLockEnabled"] is True
    assert properties["ObjectLockConfiguration"] == {
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": mode, "Days": 400}},
    }
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}  # Object Lock needs it
    assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == ("Retain", "Retain")
    # the policy is the same whatever the protection
    assert set(statements(construct, template)) == {"tls", DENY_OVERWRITE_SID, DENY_DELETE_SID}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"protection": "object_lock"}, "needs object_lock"),
        (
            {"protection": "object_lock", "object_lock": {"retention": "30d"}},
            "CloudFormation replaces a bucket whose ObjectLockEnabled changes",
        ),
        (
            {"protection": "versioning", "object_lock": {"retention": "30d", "created_with_bucket": True}},
            "Object Lock cannot be turned off",
        ),
        (
            {"protection": "none", "object_lock": {"retention": "30d", "created_with_bucket": True}},
            "Object Lock cannot be turned off",
        ),
        (
            {"protection": "object_lock", "object_lock": {"retention": "36h", "created_with_bucket": True}},
            "whole days",
        ),
        (
            {"protection": "object_lock", "object_lock": {"retention": "36501d", "created_with_bucket": True}},
            "whole days",
        ),
        (
            {
                "protection": "object_lock",
                "object_lock": {"retention": "30d", "mode": "LEGAL", "created_with_bucket": True},
            },
            "mode",
        ),
        ({"protection": "frozen"}, "protection"),
        ({"break_glass_role_arn": "arn:aws:iam::123456789012:user/alice"}, "break_glass_role_arn"),
        ({"break_glass_role_arn": "arn:aws:iam::123456789012:role/*"}, "break_glass_role_arn"),
        ({"break_glass_role_arn": "arn:aws:iam::123456789012:role/ops/*/glass"}, "break_glass_role_arn"),
        ({"break_glass_role_arn": "tidemark-break-glass"}, "break_glass_role_arn"),
    ],
)
def test_protection_settings_are_checked_naming_the_field(
    example_config: TidemarkConfig, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        archive_changes(example_config, **settings)
    assert "archive" in str(raised.value)


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::123456789012:role/tidemark-break-glass",
        BREAK_GLASS,
        "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_0123abcd",
        "arn:aws-us-gov:iam::123456789012:role/glass",
    ],
)
def test_a_role_arn_with_or_without_a_path_is_a_break_glass_role(example_config: TidemarkConfig, arn: str) -> None:
    assert archive_changes(example_config, break_glass_role_arn=arn).archive.break_glass_role_arn == arn


def test_the_functions_do_not_get_the_buckets_protection_settings(example_config: TidemarkConfig) -> None:
    config = object_lock(archive_changes(example_config, break_glass_role_arn=BREAK_GLASS))
    runtime = json.loads(config.runtime_json())
    assert not {"protection", "object_lock", "break_glass_role_arn"} & set(runtime.get("archive", {}))
    again = parse_config(runtime)
    assert (again.archive.protection, again.archive.object_lock, again.archive.break_glass_role_arn) == (
        "none",
        None,
        None,
    )


def test_cloudformation_replaces_a_bucket_whose_object_lock_changes_but_not_its_versioning(
    example_config: TidemarkConfig,
) -> None:
    """Why ``object_lock`` takes ``created_with_bucket`` and cannot be left: the CDK CLI's
    resource specification (what ``cdk diff`` reads) marks ``ObjectLockEnabled`` as causing
    replacement -- and a change set reported ``requiresRecreation: Always`` for it on an existing
    bucket (aws-cloudformation/cloudformation-coverage-roadmap#1929, open) -- while versioning is
    an update in place. Turning versioning on or off for a deployed stack is safe; Object Lock
    only with the bucket's creation."""
    assert CDK_SPEC.exists(), "the CDK CLI's resource specification is missing: run `make install` (npm ci)"
    spec = json.loads(gzip.decompress(CDK_SPEC.read_bytes()))
    entities = spec["schema"]["resource"]["entities"]
    (bucket_spec,) = [
        entity
        for entity in (entities.values() if isinstance(entities, dict) else entities)
        if entity.get("cloudFormationType") == "AWS::S3::Bucket"
    ]
    replacing = {name for name, prop in bucket_spec["properties"].items() if prop.get("causesReplacement") == "yes"}

    def changed(before: TidemarkConfig, after: TidemarkConfig) -> set[str]:
        (old_construct, old), (new_construct, new) = storage(before), storage(after)
        old_props = bucket(old_construct, old)["Properties"]
        new_props = bucket(new_construct, new)["Properties"]
        return {name for name in old_props.keys() | new_props.keys() if old_props.get(name) != new_props.get(name)}

    versioned = archive_changes(example_config, protection="versioning")
    locked = object_lock(example_config)
    assert changed(example_config, versioned) == {"VersioningConfiguration"}
    assert not changed(example_config, versioned) & replacing
    assert changed(example_config, locked) & replacing == {"ObjectLockEnabled"}
    assert changed(versioned, locked) & replacing == {"ObjectLockEnabled"}


# -- the whole stack ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["versioning", "object_lock"])
def test_the_stack_carries_the_policy_and_cdk_nag_reports_nothing(example_config: TidemarkConfig, variant: str) -> None:
    config = archive_changes(example_config, break_glass_role_arn=BREAK_GLASS, protection="versioning")
    if variant == "object_lock":
        config = object_lock(archive_changes(example_config, break_glass_role_arn=BREAK_GLASS))
    stack = TidemarkStack(App(context=cdk_context()), "Tidemark", config=config)
    template = Template.from_stack(stack)  # synthesize: the nag aspects run here
    annotations = Annotations.from_stack(stack)
    found = annotations.find_error("*", NAG_FINDING) + annotations.find_warning("*", NAG_FINDING)
    assert [f"{message.id}: {str(message.entry.data)[:160]}" for message in found] == []
    policies = [
        body
        for body in template.to_json()["Resources"].values()
        if body["Type"] == "AWS::S3::BucketPolicy"
        and body["Properties"]["Bucket"] == {"Ref": logical_id(stack.storage.bucket)}
    ]
    (policy,) = policies
    sids = [statement.get("Sid") for statement in policy["Properties"]["PolicyDocument"]["Statement"]]
    assert {DENY_OVERWRITE_SID, DENY_DELETE_SID} <= set(sids)


def test_an_unvalidated_object_lock_never_reaches_the_construct() -> None:
    """The config is the only way in (``StorageConstruct`` takes a validated ``TidemarkConfig``)."""
    with pytest.raises(TypeError, match="validated TidemarkConfig"):
        StorageConstruct(Stack(), "Storage", config={"archive": {"protection": "object_lock"}})  # type: ignore[arg-type]
