"""Least-privilege grants on the archive bucket and the tables, with no wildcard actions.

CDK's ``bucket.grant_put``/``grant_read`` use wildcard actions (``s3:Abort*``, ``s3:GetObject*``,
``s3:List*``, ``kms:ReEncrypt*``, ``kms:GenerateDataKey*``). These helpers name each action and
scope object access to key prefixes (``raw/orders/*``), so a function of one stream cannot touch
another stream's objects, and nothing here can delete an archived object.

The tables are scoped the same way, by item: every grant on the ledger or the aggregates table
carries a ``dynamodb:LeadingKeys`` condition (``ForAllValues:StringLike``) naming the partition
keys the role may reach -- its streams' key families (:class:`Keys`), read (GetItem, Query) and
written (PutItem, UpdateItem, BatchWriteItem) apart. So an archiver reaches its own stream's
items only, and the Spark job can neither raise a partition's staged offset (which would make
the archiver drop new records as duplicates) nor forge a committed object. No grant holds
``dynamodb:Scan`` (nor any other action without a leading key): ``ForAllValues`` is true of a
request with no leading keys at all, so a Scan would pass every such condition.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from tidemark.exceptions import ConfigError
from tidemark.ledger.dynamodb import hour_pk, marks_pk, registry_pk, state_pk
from tidemark.names import STREAM, matches

#: the ledger's reads: an item by key, a query of one partition key (never a Scan)
LEDGER_READ_ACTIONS = ("dynamodb:GetItem", "dynamodb:Query")
#: the ledger's writes: conditional writes and transactions (which IAM authorises per item, as
#: PutItem and UpdateItem: the ledger's transactions hold no ConditionCheck) -- no DeleteItem, no
#: batch writes
LEDGER_WRITE_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem")
#: the ledger's item operations, reads and writes. tests/integration/test_iam_production.py fails
#: on an action here that no ledger code path uses.
LEDGER_ACTIONS = (*LEDGER_READ_ACTIONS, *LEDGER_WRITE_ACTIONS)
#: the condition operator and key of every table grant
LEADING_KEYS_OPERATOR = "ForAllValues:StringLike"
LEADING_KEYS = "dynamodb:LeadingKeys"
#: DynamoDB actions that name no item, so a ``ForAllValues`` condition on leading keys is true of
#: them whatever they read: never granted on a table (the stack tests assert it)
KEYLESS_ACTIONS = (
    "dynamodb:Scan",
    "dynamodb:PartiQLSelect",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
    "dynamodb:ExportTableToPointInTime",
    "dynamodb:RestoreTableToPointInTime",
)


class Keys(Enum):
    """A stream's key families: the partition keys (``pk``) of its items, as IAM patterns.

    The patterns come from the ledger's own key functions (``tidemark.ledger.dynamodb``) with
    ``*`` for the variable part; a stream name holds neither ``#`` nor a glob character
    (``tidemark.names.STREAM_NAME``), so one stream's pattern never matches another's keys."""

    #: a partition's state and what sits next to it (sort keys STATE, MARKS#, EPOCH#, RECOVERY, ABANDONED#)
    PARTITIONS = "partitions"
    #: committed objects, one item collection per hour (``HOUR#<stream>#<hour>``)
    OBJECTS = "objects"
    #: the stream's hour marks (``HOURS#<stream>``), bumped by every commit
    HOUR_MARKS = "hour_marks"
    #: the partitions the sweeper has seen (``STREAM#<stream>``)
    REGISTRY = "registry"
    #: what each aggregation run read and wrote (``RUNS#<stream>``)
    RUNS = "runs"
    #: the aggregates table's items (``AGG#<stream>#<aggregation>#<hour>``, ``jobs/aggregation/sink.py``)
    AGGREGATES = "aggregates"

    def pattern(self, stream: str) -> str:
        if not matches(STREAM, stream):  # never widen a pattern with a name the config refuses
            raise ConfigError(f"{stream!r} is not a stream name: no key pattern is made of it")
        if self is Keys.PARTITIONS:
            return state_pk(stream, "*")
        if self is Keys.OBJECTS:
            return hour_pk(stream, "*")
        if self is Keys.HOUR_MARKS:
            return marks_pk(stream)
        if self is Keys.REGISTRY:
            return registry_pk(stream)
        if self is Keys.RUNS:
            return f"RUNS#{stream}"  # DynamoDBLedger._put_run
        return f"AGG#{stream}#*"  # jobs.aggregation.sink.aggregate_pk


def leading_keys(streams: Iterable[str], families: Iterable[Keys]) -> list[str]:
    """The patterns of ``families`` for each of ``streams``, in a stable order."""
    wanted = set(families)
    return [family.pattern(stream) for stream in streams for family in Keys if family in wanted]


def table_statement(
    table: dynamodb.ITable,
    actions: Sequence[str],
    streams: Sequence[str],
    families: Iterable[Keys],
    *,
    sid: str | None = None,
) -> iam.PolicyStatement:
    """``actions`` on ``table``'s items whose partition key is of ``families`` of ``streams``."""
    if not streams:
        raise ValueError("a table grant needs at least one stream")
    keyless = set(actions) & set(KEYLESS_ACTIONS)
    if keyless or any("*" in action for action in actions):
        raise ValueError(f"{sorted(actions)}: a LeadingKeys condition does not hold a request without keys")
    patterns = leading_keys(streams, families)
    if not patterns:
        raise ValueError("a table grant needs at least one key family")
    if table.encryption_key is not None:
        raise ValueError("a table encrypted with a customer managed key needs key grants too: not made here")
    return iam.PolicyStatement(
        sid=sid,
        actions=list(actions),
        resources=[table.table_arn],
        conditions={LEADING_KEYS_OPERATOR: {LEADING_KEYS: patterns}},
    )


def grant_ledger(
    table: dynamodb.ITable,
    grantee: iam.IGrantable,
    streams: Sequence[str],
    *,
    reads: Iterable[Keys],
    writes: Iterable[Keys] = (),
    read_actions: Sequence[str] = LEDGER_READ_ACTIONS,
    write_actions: Sequence[str] = LEDGER_WRITE_ACTIONS,
) -> None:
    """Reads (``read_actions``) of the items of ``reads`` and writes (``write_actions``) of those
    of ``writes``, for ``streams`` only: one statement each, with its LeadingKeys condition.

    Each construct names what its roles read and write (``ARCHIVER_READS``, ``SWEEPER_KEYS``, ...);
    the integration tests (``tests/integration/test_iam_*.py``) run each role's code paths under
    those conditions (``tests.support.iam``, which evaluates them as AWS would) and fail on a
    family a role needs and lacks, or holds and never uses."""
    principal = grantee.grant_principal
    reads, writes = list(reads), list(writes)
    if reads:
        principal.add_to_principal_policy(table_statement(table, read_actions, streams, reads))
    if writes:
        principal.add_to_principal_policy(table_statement(table, write_actions, streams, writes))


class ArchiveAccess:
    """Grants on the archive bucket and its KMS key, by key prefix."""

    def __init__(self, bucket: s3.IBucket, key: kms.IKey) -> None:
        self.bucket = bucket
        self.key = key

    def _objects(self, prefixes: Sequence[str]) -> list[str]:
        if not prefixes:
            raise ValueError("a grant on the archive needs at least one key prefix")
        return [self.bucket.arn_for_objects(f"{prefix.strip('/')}/*") for prefix in prefixes]

    def put(self, grantee: iam.IGrantable, prefixes: Sequence[str], *, conditional: bool = True) -> None:
        """Write objects under ``prefixes``.

        ``conditional``: the archive's own uploads (``tidemark.objects.writer``), through boto3's
        transfer manager: multipart above a threshold (every part is authorized as
        ``s3:PutObject``), aborted when a part fails (``s3:AbortMultipartUpload``), and
        conditional (``If-None-Match: *``). When S3 answers 412 the writer heads the existing
        object to tell a resumed flush's own object from another one: HeadObject is authorized as
        ``s3:GetObject``, so these prefixes are readable too; without it a flush resumed after its
        upload landed fails with AccessDenied on every retry. Otherwise one plain ``PutObject``
        (manifests; the mapping's on-failure destination)."""
        principal = grantee.grant_principal
        actions = ["s3:PutObject", "s3:AbortMultipartUpload", "s3:GetObject"] if conditional else ["s3:PutObject"]
        principal.add_to_principal_policy(iam.PolicyStatement(actions=actions, resources=self._objects(prefixes)))
        # SSE-KMS: a data key per object; Decrypt as well because multipart uploads need it.
        principal.add_to_principal_policy(
            iam.PolicyStatement(actions=["kms:GenerateDataKey", "kms:Decrypt"], resources=[self.key.key_arn])
        )

    def read(self, grantee: iam.IGrantable, prefixes: Sequence[str], *, list_objects: bool = False) -> None:
        """Get (and head) objects under ``prefixes``; ``list_objects`` also lists those prefixes."""
        principal = grantee.grant_principal
        principal.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=self._objects(prefixes))
        )
        principal.add_to_principal_policy(iam.PolicyStatement(actions=["kms:Decrypt"], resources=[self.key.key_arn]))
        if list_objects:
            principal.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[self.bucket.bucket_arn],
                    conditions={
                        "StringLike": {
                            "s3:prefix": [f"{prefix.strip('/')}/*" for prefix in prefixes]
                            + [f"{prefix.strip('/')}/" for prefix in prefixes]
                        }
                    },
                )
            )


def stream_prefixes(raw_prefix: str, errors_prefix: str, stream: str) -> list[str]:
    """Where one stream's archiver writes: its raw objects and its dead letters."""
    return [f"{raw_prefix}/{stream}", f"{errors_prefix}/{stream}"]
