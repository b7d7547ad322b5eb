"""Durable state of Tidemark: the archive bucket, the DynamoDB ledger and the aggregates table.

All are retained when the stack is deleted: the bucket *is* the product, the ledger holds the
highest staged offset per partition, without which a redeploy would archive Kafka's retained
records a second time, and the aggregates are what downstream readers query.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aws_cdk import Duration, FeatureFlags, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from tidemark.config import TidemarkConfig
from tidemark.ledger.dynamodb import ledger_table_schema, pk_sk_table_schema

#: Items carrying this (epoch seconds) attribute are deleted by DynamoDB some time after it
#: passes. Partition state items must never carry it: losing one loses the dedupe high-water mark.
LEDGER_TTL_ATTRIBUTE = "expires_at"
LOGS_BY_POLICY = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"

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
            # Versioning stays off on purpose: object keys are a pure function of (stream, hour,
            # partition, offsets, format), so a re-upload after a crash overwrites an identical
            # object. Versioning would only keep byte-identical duplicates and bill for them.
            versioned=False,
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
        self._ledger_table = self._table("LedgerTable", keys, ttl_attribute=LEDGER_TTL_ATTRIBUTE)
        # Same key shape as the ledger (``pk_sk_table_schema``, which the job's sink uses too).
        aggregate_keys = ledger_table_keys(pk_sk_table_schema("unused-cdk-generates-the-name"))
        self._aggregates_table = self._table("AggregatesTable", aggregate_keys, ttl_attribute=None)

    def _table(self, construct_id: str, keys: LedgerTableKeys, *, ttl_attribute: str | None) -> dynamodb.Table:
        """A retained table with point-in-time recovery."""
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
