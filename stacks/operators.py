"""What the operator commands need in AWS, as one managed policy to attach to the operators' role.

``tidemark status``, ``audit``, ``rearchive``, ``recover``, ``replay`` and ``epoch`` run on an
operator's machine with the operator's own credentials. ``OperatorAccess`` is the least privilege
they need against this deployment, with every action named and every resource scoped:

* ``cloudformation:DescribeStacks`` on this stack: ``--stack-name`` reads the bucket and ledger
  table from the stack's outputs (``ArchiveBucketName``, ``LedgerTableName``).
* Reading the ledger (``dynamodb:GetItem``, ``dynamodb:Query``): every command, the streams'
  partitions (states, marks, epochs, recoveries), committed objects, hour marks and partition
  registry (``OPERATOR_READS``).
* Writing the ledger (``dynamodb:PutItem``, ``dynamodb:UpdateItem``): ``epoch start`` (the new
  epoch's state and its audit record, one transaction), ``rearchive``'s commit (the object's
  record and the state without the quarantine entry, one transaction) and ``recover``'s claim
  (the partition's recovery item) and finish (the recovery item, each object's record and its
  hour's mark, one transaction): the streams' partitions, objects and hour marks
  (``OPERATOR_WRITES``). DynamoDB authorizes a transaction item by item, as these actions.
  ``replay`` writes nothing: it resumes from what the target topic holds. No Scan, no
  DeleteItem, no batch writes. Both carry a ``dynamodb:LeadingKeys`` condition
  (``stacks.grants``): the policy reaches the configured streams' items only, and neither the
  aggregation job's runs nor the partition registry are written with it.
* Listing the streams' objects (``s3:ListBucket`` on the bucket, conditioned on the streams'
  ``raw/`` and ``errors/`` prefixes): ``audit`` compares the listing with the ledger.
* Reading the streams' objects (``s3:GetObject``): ``audit`` and ``replay`` read them (dead
  letters too), ``recover`` the ones that do not fill their offset range (which positions they
  hold); ``rearchive`` and ``recover`` head their own object when S3 answers a conditional upload
  412 (a rerun after a crash), which S3 authorizes as ``s3:GetObject``.
* Writing the streams' objects (``s3:PutObject``, ``s3:AbortMultipartUpload``): ``rearchive``
  uploads a quarantined flush -- raw records or dead letters -- under the key it would have had,
  ``recover`` the records the event source mapping never delivered under the keys its claim
  fixed, conditionally (``If-None-Match: *``), in parts above the multipart threshold (each part
  is ``s3:PutObject``; a failed part aborts the upload). Nothing here can delete an object.
* The archive key (``kms:Decrypt``, ``kms:GenerateDataKey``): objects are SSE-KMS; reading one
  decrypts its data key, writing one makes a data key, and a multipart upload decrypts it again.

Kafka is not reached through IAM here: ``status``, ``audit``, ``rearchive``, ``recover`` and
``replay`` read (and ``replay`` writes) the cluster with the operator's own client credentials,
given with ``--bootstrap-servers`` and ``--kafka-config`` (SASL/SCRAM, TLS, ...), which the
cluster's own ACLs govern. ``tests/integration/test_iam_operators.py`` runs every command under
exactly this policy and fails on a grant the commands need and lack, or hold and never use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from aws_cdk import Annotations, Stack, Token
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.grants import Keys, table_statement
from tidemark.exceptions import ConfigError
from tidemark.names import S3_PREFIX, STREAM_NAME

#: the ledger reads every operator command makes (state items, hour marks, committed objects, epochs)
LEDGER_READ_ACTIONS = ("dynamodb:GetItem", "dynamodb:Query")
#: the ledger writes of ``epoch start``, ``rearchive`` and ``recover`` (conditional writes and transactions)
LEDGER_WRITE_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem")
#: the ledger items the commands read, of every configured stream
OPERATOR_READS = (Keys.PARTITIONS, Keys.OBJECTS, Keys.HOUR_MARKS, Keys.REGISTRY)
#: and write: states and epoch records, recoveries (partitions), committed objects, hour marks
OPERATOR_WRITES = (Keys.PARTITIONS, Keys.OBJECTS, Keys.HOUR_MARKS)
#: what ``rearchive``'s and ``recover``'s conditional uploads need beyond reading (``s3:GetObject``:
#: the 412 path)
OBJECT_WRITE_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload")
#: IAM's managed policy names ("CreatePolicy", PolicyName)
POLICY_NAME = r"^[\w+=,.@-]{1,128}$"
#: the longest region name and more: a name made with a region token must still fit
REGION_ROOM = 20
#: IAM's limit on a managed policy's size, in characters without white space (IAM and AWS STS quotas)
MANAGED_POLICY_CHARS = 6144
#: what an unresolved value (mostly the bucket's ARN, once per stream and prefix) is taken to add
#: to the policy's size when it is estimated at synth: a CloudFormation-named bucket's ARN is
#: about this long (``arn:aws:s3:::`` and a stack-derived name with a random suffix)
TOKEN_CHARS = 64


def operator_policy_name(stack_name: str, region: str) -> str:
    """``<stack>Operator-<region>`` (``TidemarkOperator-eu-west-1``): named for the stack, and --
    managed policy names being global to the account -- for its region, so a stack deployed in
    two regions keeps two."""
    return f"{stack_name}Operator-{region}"


class OperatorAccess(Construct):
    """``policy``: an ``iam.ManagedPolicy`` granting the operator commands what they do against
    this deployment (see the module docstring), nothing else; ``statements`` by their ``Sid``.

    ``streams`` are the configuration's stream names (object grants are scoped to each one's
    ``raw_prefix``/``errors_prefix`` folder); ``policy_name`` defaults to
    :func:`operator_policy_name`. Bad input raises ``ConfigError`` naming what is wrong, at synth."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        ledger_table: dynamodb.ITable,
        key: kms.IKey,
        streams: Sequence[str],
        raw_prefix: str,
        errors_prefix: str,
        policy_name: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        name = policy_name if policy_name is not None else operator_policy_name(stack.stack_name, stack.region)
        _validate(streams=streams, raw_prefix=raw_prefix, errors_prefix=errors_prefix, policy_name=name)
        objects = [
            bucket.arn_for_objects(f"{prefix}/{stream}/*")
            for stream in streams
            for prefix in (raw_prefix, errors_prefix)
        ]
        listed = [
            f"{prefix}/{stream}{tail}"
            for stream in streams
            for prefix in (raw_prefix, errors_prefix)
            for tail in ("/", "/*")
        ]
        self.statements: dict[str, iam.PolicyStatement] = {
            "ReadStackOutputs": iam.PolicyStatement(
                sid="ReadStackOutputs",
                actions=["cloudformation:DescribeStacks"],
                resources=[
                    stack.format_arn(service="cloudformation", resource="stack", resource_name=f"{stack.stack_name}/*")
                ],
            ),
            "ReadLedger": table_statement(ledger_table, LEDGER_READ_ACTIONS, streams, OPERATOR_READS, sid="ReadLedger"),
            "WriteLedger": table_statement(
                ledger_table, LEDGER_WRITE_ACTIONS, streams, OPERATOR_WRITES, sid="WriteLedger"
            ),
            "ListStreamObjects": iam.PolicyStatement(
                sid="ListStreamObjects",
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": listed}},
            ),
            "ReadStreamObjects": iam.PolicyStatement(
                sid="ReadStreamObjects", actions=["s3:GetObject"], resources=objects
            ),
            "WriteStreamObjects": iam.PolicyStatement(
                sid="WriteStreamObjects", actions=list(OBJECT_WRITE_ACTIONS), resources=objects
            ),
            "ArchiveKey": iam.PolicyStatement(
                sid="ArchiveKey", actions=["kms:Decrypt", "kms:GenerateDataKey"], resources=[key.key_arn]
            ),
        }
        self.policy = iam.ManagedPolicy(
            self,
            "Policy",
            managed_policy_name=name,
            description="Tidemark's operator commands (status, audit, rearchive, recover, replay, epoch) against this "
            "archive; Kafka access is the operator's own cluster credentials",
            statements=list(self.statements.values()),
        )
        size = estimated_size(stack, list(self.statements.values()))
        if size > MANAGED_POLICY_CHARS:
            # Every stream adds its object ARNs, listing prefixes and ledger key patterns.
            Annotations.of(self).add_warning_v2(
                "tidemark:operator-policy-size",
                f"operators: the operator policy is about {size} characters for {len(streams)} streams, above "
                f"IAM's {MANAGED_POLICY_CHARS} for a managed policy: CloudFormation will refuse it. Split the "
                "streams over two stacks, or shorten their names",
            )


def estimated_size(stack: Stack, statements: Sequence[iam.PolicyStatement]) -> int:
    """The policy document's size as IAM counts it (no white space), each value CloudFormation
    resolves at deploy time taken as ``TOKEN_CHARS`` characters."""

    def concrete(value: Any) -> Any:
        if isinstance(value, list):
            return [concrete(item) for item in value]
        if isinstance(value, dict):
            if len(value) == 1 and next(iter(value)) == "Fn::Join":
                separator, parts = value["Fn::Join"]
                return separator.join(str(concrete(part)) for part in parts)
            if len(value) == 1 and (next(iter(value)) == "Ref" or next(iter(value)).startswith("Fn::")):
                return "x" * TOKEN_CHARS
            return {key: concrete(item) for key, item in value.items()}
        return value

    document = {"Version": "2012-10-17", "Statement": [stack.resolve(s.to_statement_json()) for s in statements]}
    return len(json.dumps(concrete(document), separators=(",", ":")).replace(" ", ""))


def _validate(*, streams: Sequence[str], raw_prefix: str, errors_prefix: str, policy_name: str) -> None:
    if isinstance(streams, str) or not streams:
        raise ConfigError("operators: the policy needs at least one stream name (a sequence of names)")
    for stream in streams:
        if not isinstance(stream, str) or not re.match(STREAM_NAME, stream):
            raise ConfigError(f"operators: {stream!r} is not a stream name")
    if len(set(streams)) != len(streams):
        raise ConfigError(f"operators: stream names repeat: {list(streams)}")
    for field, prefix in (("archive.raw_prefix", raw_prefix), ("archive.errors_prefix", errors_prefix)):
        if not isinstance(prefix, str) or not re.match(S3_PREFIX, prefix):
            raise ConfigError(f"{field}: {prefix!r} is not an archive prefix")
    if raw_prefix == errors_prefix:
        raise ConfigError("operators: archive.raw_prefix and archive.errors_prefix must differ")
    if Token.is_unresolved(policy_name):
        # a region (or stack name) token: check what is concrete of it, with room for the region
        concrete = re.sub(r"\$\{Token\[[^\]]*\]\}", "", policy_name)
        if len(concrete) + REGION_ROOM > 128 or not re.match(r"^[\w+=,.@-]*$", concrete):
            raise ConfigError(
                f"operators: policy name {policy_name!r} is not an IAM policy name (1-128 of [\\w+=,.@-])"
            )
    elif not re.match(POLICY_NAME, policy_name):
        raise ConfigError(f"operators: policy name {policy_name!r} is not an IAM policy name (1-128 of [\\w+=,.@-])")
