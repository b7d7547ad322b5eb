"""Durable state of Tidemark: the archive bucket, the DynamoDB ledger and the aggregates table.

All are retained when the stack is deleted: the bucket *is* the product, the ledger holds the
highest staged offset per partition, without which a redeploy would archive Kafka's retained
records a second time, and the aggregates are what downstream readers query.

The bucket defends the archive itself (``archive_protection_statements``): its policy refuses an
object creation under the archive's prefixes that does not carry ``If-None-Match: *`` (so nothing
there is ever overwritten, whoever holds a broader grant) and every delete there except by the
optional break-glass role; ``archive.protection`` adds versioning or Object Lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aws_cdk import Duration, FeatureFlags, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.archiver import ON_FAILURE_PREFIX
from tidemark.config import TidemarkConfig
from tidemark.ledger.dynamodb import ledger_table_schema, pk_sk_table_schema

#: Items carrying this (epoch seconds) attribute are deleted by DynamoDB some time after it
#: passes. Partition state items must never carry it: losing one loses the dedupe high-water mark.
LEDGER_TTL_ATTRIBUTE = "expires_at"
LOGS_BY_POLICY = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"

#: the bucket policy's statements that protect the archive (their Sids)
DENY_OVERWRITE_SID = "DenyObjectCreationWithoutIfNoneMatch"
DENY_DELETE_SID = "DenyDeletingArchivedObjects"
#: what S3 authorizes a delete of an object (or of one of its versions) as; DeleteObjects asks
#: s3:DeleteObject for each key. (Tagging deletes change no data and are left alone.)
DELETE_ACTIONS = ("s3:DeleteObject", "s3:DeleteObjectVersion")

_ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}
_BILLING_MODES = {
    "PAY_PER_REQUEST": dynamodb.BillingMode.PAY_PER_REQUEST,
    "PROVISIONED": dynamodb.BillingMode.PROVISIONED,
}


@dataclass(frozen=True)
class LedgerTableKeys:
    """The ledger table's keys and billing mode, as CDK types."""

    partition_key: dynamodb.Attribute
    sort_key: dynamodb.Attribute | None
    billing_mode: dynamodb.BillingMode


def ledger_table_keys(schema: Mapping[str, Any], *, ttl_attribute: str = LEDGER_TTL_ATTRIBUTE) -> LedgerTableKeys:
    """Translate ``CreateTable`` arguments (``ledger_table_schema``) into CDK key definitions.

    The ledger code, its tests (moto) and the deployed table must agree on the keys; deriving the
    CDK definition from the one schema the ledger code uses keeps them from drifting apart.
    Anything this function cannot translate faithfully raises ``ValueError`` at synth time.
    """
    try:
        types = {item["AttributeName"]: item["AttributeType"] for item in schema["AttributeDefinitions"]}
        roles: dict[str, list[str]] = {}
        for item in schema["KeySchema"]:
            roles.setdefault(item["KeyType"], []).append(item["AttributeName"])
        billing = schema["BillingMode"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"ledger table schema is malformed: missing or invalid {exc}") from None

    unknown_roles = set(roles) - {"HASH", "RANGE"}
    if unknown_roles or len(roles.get("HASH", [])) != 1 or len(roles.get("RANGE", [])) > 1:
        raise ValueError(f"ledger table schema must have one HASH key and at most one RANGE key, got {roles}")
    if billing not in _BILLING_MODES:
        raise ValueError(f"ledger table schema has unsupported BillingMode {billing!r}")

    def attribute(name: str) -> dynamodb.Attribute:
        if name == ttl_attribute:
            raise ValueError(f"ledger key attribute {name!r} cannot also be the TTL attribute")
        if name not in types:
            raise ValueError(f"ledger key attribute {name!r} has no AttributeDefinitions entry")
        if types[name] not in _ATTRIBUTE_TYPES:
            raise ValueError(f"ledger key attribute {name!r} has unsupported AttributeType {types[name]!r}")
        return dynamodb.Attribute(name=name, type=_ATTRIBUTE_TYPES[types[name]])

    ranges = roles.get("RANGE", [])
    return LedgerTableKeys(
        partition_key=attribute(roles["HASH"][0]),
        sort_key=attribute(ranges[0]) if ranges else None,
        billing_mode=_BILLING_MODES[billing],
    )


def overwrite_protected_prefixes(config: TidemarkConfig) -> list[str]:
    """The prefixes only Tidemark's own conditional uploads write: archived objects (``raw/``), dead
    letters (``errors/``) and manifests -- of every stream, also of one no longer configured."""
    return [config.archive.raw_prefix, config.archive.errors_prefix, config.sweeper.manifests_prefix]


def delete_protected_prefixes(config: TidemarkConfig) -> list[str]:
    """Those, and the Kafka mappings' on-failure destination (``aws/lambda/``): Lambda writes the
    batches it gave up on there (without ``If-None-Match``, so no overwrite rule), and they are the
    only record of what the archive lacks."""
    return [*overwrite_protected_prefixes(config), ON_FAILURE_PREFIX]


def archive_protection_statements(config: TidemarkConfig, objects: Callable[[str], str]) -> list[iam.PolicyStatement]:
    """The bucket policy statements that make S3 enforce what the code promises (``objects``: the
    ARN of a key pattern in the bucket, ``bucket.arn_for_objects``).

    1. **Never overwrite.** Deny ``s3:PutObject`` under the archive's prefixes when the request is
       an object creation (``s3:ObjectCreationOperation``: PutObject, CompleteMultipartUpload,
       CopyObject) without an ``If-None-Match`` header -- AWS's documented way to enforce
       conditional writes, "Enforce conditional writes on Amazon S3 buckets",
       https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes-enforce.html.
       CreateMultipartUpload, UploadPart and UploadPartCopy take no conditional header and are
       no object creation (the key is false for them), so multipart uploads still work: their
       CompleteMultipartUpload carries the header. Every upload of ours carries it
       (``tidemark.objects.writer`` for objects and dead letters, ``tidemark.sweeper.completeness``
       for manifests; ``tests/integration/test_bucket_policy_writes.py`` records each request and
       evaluates these statements against it). **CopyObject into these prefixes is impossible**:
       without the header this statement denies it (403), and S3 answers a CopyObject with it
       ``501 Not Implemented`` (same page). Nothing in Tidemark copies objects; copying out of
       the archive still works, and new keys are written with PutObject and If-None-Match. A
       header with another value (``If-Match``, which would replace an object) is no
       ``If-None-Match``: denied too.
    2. **Never delete.** Deny ``s3:DeleteObject`` and ``s3:DeleteObjectVersion`` (which
       DeleteObjects asks per key) under those prefixes and ``aws/lambda/`` to every principal but
       ``archive.break_glass_role_arn`` (``aws:PrincipalArn``: the role, whichever session), if
       one is named. Nothing in Tidemark deletes an object. Lifecycle rules are not requests: the
       transitions and the abort of incomplete multipart uploads are unaffected.

    An explicit deny in a bucket policy binds the account's own principals (the root user
    included) whatever their IAM policies allow; what it cannot stop is someone allowed
    ``s3:PutBucketPolicy`` removing it -- Object Lock (``archive.protection``) is what survives that.
    """
    overwrite = iam.PolicyStatement(
        sid=DENY_OVERWRITE_SID,
        effect=iam.Effect.DENY,
        principals=[iam.StarPrincipal()],
        actions=["s3:PutObject"],
        resources=[objects(f"{prefix}/*") for prefix in overwrite_protected_prefixes(config)],
        conditions={
            "Null": {"s3:if-none-match": "true"},
            "Bool": {"s3:ObjectCreationOperation": "true"},
        },
    )
    role = config.archive.break_glass_role_arn
    delete = iam.PolicyStatement(
        sid=DENY_DELETE_SID,
        effect=iam.Effect.DENY,
        principals=[iam.StarPrincipal()],
        actions=list(DELETE_ACTIONS),
        resources=[objects(f"{prefix}/*") for prefix in delete_protected_prefixes(config)],
        conditions={"ArnNotEquals": {"aws:PrincipalArn": role}} if role else None,
    )
    return [overwrite, delete]


def object_lock_retention(config: TidemarkConfig) -> s3.ObjectLockRetention | None:
    """The bucket's default Object Lock retention (``archive.protection: object_lock``), else None."""
    lock = config.archive.object_lock
    if config.archive.protection != "object_lock" or lock is None:
        return None
    days = Duration.days(lock.retention_days)
    if lock.mode == "COMPLIANCE":
        return s3.ObjectLockRetention.compliance(days)
    return s3.ObjectLockRetention.governance(days)


class StorageConstruct(Construct):
    """The archive bucket (KMS, private, TLS only), the ledger table (on-demand, PITR, TTL) and the
    aggregates table the Spark job writes (on-demand, PITR)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: TidemarkConfig) -> None:
        # Only a loaded, validated config may reach the infrastructure: a raw dict or a path here
        # would skip the checks that make a bad config fail synth with the field's name.
        if not isinstance(config, TidemarkConfig):
            raise TypeError(
                "StorageConstruct needs a validated TidemarkConfig (tidemark.config.load_config), "
                f"got {type(config).__name__}"
            )
        super().__init__(scope, construct_id)
        self._config = config

        # The table name is CDK-generated; the schema is only read for its keys and billing mode.
        keys = ledger_table_keys(ledger_table_schema("unused-cdk-generates-the-name"))

        self._key = kms.Key(
            self,
            "ArchiveKey",
            description="Encrypts the Tidemark archive bucket",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        # Server access logs of the archive bucket: who read or wrote what, for audits.
        self._access_logs = s3.Bucket(
            self,
            "AccessLogsBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,  # S3 server access logging cannot write with KMS
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            # With cdk.json's serverAccessLogsUseBucketPolicy flag, log delivery is granted by bucket
            # policy and ACLs stay disabled; without it CDK needs the ACL (and object-writer ownership).
            object_ownership=(
                s3.ObjectOwnership.BUCKET_OWNER_ENFORCED
                if FeatureFlags.of(self).is_enabled(LOGS_BY_POLICY)
                else s3.ObjectOwnership.OBJECT_WRITER
            ),
            enforce_ssl=True,
            lifecycle_rules=[s3.LifecycleRule(id="expire-access-logs", enabled=True, expiration=Duration.days(365))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        self._bucket = s3.Bucket(
            self,
            "ArchiveBucket",
            server_access_logs_bucket=self._access_logs,
            server_access_logs_prefix="archive-bucket/",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self._key,
            # One data key per bucket instead of a KMS call per object: far fewer KMS requests.
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            # Off by default: uploads never replace an object (If-None-Match, enforced by the bucket
            # policy below), so versions would only matter against someone who removes that
            # policy. ``archive.protection`` turns on versioning (a deleted or replaced object
            # stays as a noncurrent version; a delete leaves a delete marker, after which an
            # If-None-Match upload of the key succeeds as a new version) or Object Lock (which
            # needs versioning; its default retention applies to every version written).
            # CloudFormation replaces a bucket whose ObjectLockEnabled changes: the config only
            # takes object_lock with created_with_bucket (``ObjectLockSettings``).
            versioned=config.archive.protection != "none",
            object_lock_enabled=True if config.archive.protection == "object_lock" else None,
            object_lock_default_retention=object_lock_retention(config),
            lifecycle_rules=[
                # Uploads interrupted by a crash are resumed or restarted by the sweeper within
                # minutes; parts older than a day are orphans that would be billed forever.
                s3.LifecycleRule(
                    id="abort-incomplete-multipart-uploads",
                    enabled=True,
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
                *self._transition_rules(config),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        for statement in archive_protection_statements(config, self._bucket.arn_for_objects):
            self._bucket.add_to_resource_policy(statement)
        self._ledger_table = self._table("LedgerTable", keys, ttl_attribute=LEDGER_TTL_ATTRIBUTE)
        # Same key shape as the ledger (``pk_sk_table_schema``, which the job's sink uses too).
        aggregate_keys = ledger_table_keys(pk_sk_table_schema("unused-cdk-generates-the-name"))
        self._aggregates_table = self._table("AggregatesTable", aggregate_keys, ttl_attribute=None)

    def _table(self, construct_id: str, keys: LedgerTableKeys, *, ttl_attribute: str | None) -> dynamodb.Table:
        """A retained table with point-in-time recovery that refuses deletion (``DeleteTable``
        fails until deletion protection is turned off on purpose): an empty ledger would archive
        retained records again."""
        return dynamodb.Table(
            self,
            construct_id,
            partition_key=keys.partition_key,
            sort_key=keys.sort_key,
            billing_mode=keys.billing_mode,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True,
            ),
            time_to_live_attribute=ttl_attribute,
            removal_policy=RemovalPolicy.RETAIN,
            deletion_protection=True,
        )

    @staticmethod
    def _transition_rules(config: TidemarkConfig) -> list[s3.LifecycleRule]:
        """``archive.transitions`` for the archived objects (raw/ and errors/); manifests stay put."""
        transitions = [
            s3.Transition(storage_class=s3.StorageClass(item.storage_class), transition_after=Duration.days(item.days))
            for item in config.archive.transitions
        ]
        if not transitions:
            return []
        return [
            s3.LifecycleRule(id=f"transition-{prefix}", enabled=True, prefix=f"{prefix}/", transitions=transitions)
            for prefix in (config.archive.raw_prefix, config.archive.errors_prefix)
        ]

    @property
    def config(self) -> TidemarkConfig:
        """The configuration the storage was built for (later constructs scope grants by its prefixes)."""
        return self._config

    @property
    def bucket(self) -> s3.Bucket:
        return self._bucket

    @property
    def encryption_key(self) -> kms.Key:
        return self._key

    @property
    def ledger_table(self) -> dynamodb.Table:
        return self._ledger_table

    @property
    def aggregates_table(self) -> dynamodb.Table:
        return self._aggregates_table
