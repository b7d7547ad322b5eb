"""Least-privilege grants on the archive bucket and the tables, with no wildcard actions.

CDK's ``bucket.grant_put``/``grant_read`` use wildcard actions (``s3:Abort*``, ``s3:GetObject*``,
``s3:List*``, ``kms:ReEncrypt*``, ``kms:GenerateDataKey*``). These helpers name each action and
scope object access to key prefixes (``raw/orders/*``), so a function of one stream cannot touch
another stream's objects, and nothing here can delete an archived object.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

#: the ledger's item operations: conditional writes and transactions (which IAM authorises per
#: item, as PutItem and UpdateItem: the ledger's transactions hold no ConditionCheck) and queries
#: -- no Scan, no DeleteItem, no batch writes. tests/integration/test_iam_production.py fails on
#: an action here that no ledger code path uses.
LEDGER_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:Query",
)


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


def grant_ledger(table: dynamodb.ITable, grantee: iam.IGrantable) -> None:
    table.grant(grantee, *LEDGER_ACTIONS)


def stream_prefixes(raw_prefix: str, errors_prefix: str, stream: str) -> list[str]:
    """Where one stream's archiver writes: its raw objects and its dead letters."""
    return [f"{raw_prefix}/{stream}", f"{errors_prefix}/{stream}"]
