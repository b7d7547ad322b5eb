"""The AWS side of the embedded stack: moto in server mode (or any endpoint), with the archive
bucket and ledger table created the way the CDK stack defines them, and a staging directory
standing in for the EFS mount."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tidemark.embedded.moto_server import moto_server
from tidemark.embedded.ports import LOOPBACK, claim_port
from tidemark.exceptions import TidemarkError
from tidemark.ledger.dynamodb import ledger_table_schema
from tidemark.runtime import ENV_BUCKET, ENV_LEDGER_TABLE, ENV_SPOOL_DIR, ENV_STAGING_ROOT

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

REGION = "us-east-1"
# moto accepts any credentials; fixed fake ones make sure a local run never signs with real keys.
FAKE_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "aws_session_token": "testing"}


class LocalAwsError(TidemarkError):
    """The local AWS endpoint is unreachable or refused to set up the archive."""


@dataclass(frozen=True)
class LocalAws:
    endpoint: str
    bucket: str
    table: str
    staging_root: Path
    spool_dir: Path

    def settings(self) -> dict[str, Any]:
        retries = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=60)
        return {"endpoint_url": self.endpoint, "region_name": REGION, "config": retries, **FAKE_CREDENTIALS}

    def s3(self) -> S3Client:
        return boto3.client("s3", **self.settings())

    def dynamodb(self) -> DynamoDBClient:
        return boto3.client("dynamodb", **self.settings())

    def environment(self) -> dict[str, str]:
        """What a function running against this stack sees (the Lambda environment)."""
        return {
            ENV_BUCKET: self.bucket,
            ENV_LEDGER_TABLE: self.table,
            ENV_STAGING_ROOT: str(self.staging_root),
            ENV_SPOOL_DIR: str(self.spool_dir),
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": FAKE_CREDENTIALS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": FAKE_CREDENTIALS["aws_secret_access_key"],
            "AWS_SESSION_TOKEN": FAKE_CREDENTIALS["aws_session_token"],
            "POWERTOOLS_TRACE_DISABLED": "1",  # no X-Ray daemon here
        }

    def provision(self) -> LocalAws:
        """Create the bucket and the ledger table (same key schema as the stack) if missing."""
        s3, dynamodb = self.s3(), self.dynamodb()
        try:
            with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
                s3.create_bucket(Bucket=self.bucket)
            s3.put_public_access_block(
                Bucket=self.bucket,
                PublicAccessBlockConfiguration={
                    "BlockPublicAcls": True,
                    "IgnorePublicAcls": True,
                    "BlockPublicPolicy": True,
                    "RestrictPublicBuckets": True,
                },
            )
            with contextlib.suppress(dynamodb.exceptions.ResourceInUseException):
                dynamodb.create_table(**ledger_table_schema(self.table))
            dynamodb.get_waiter("table_exists").wait(TableName=self.table, WaiterConfig={"Delay": 1})
        except (BotoCoreError, ClientError) as exc:
            raise LocalAwsError(f"cannot set up the archive at {self.endpoint}: {exc}") from None
        self.staging_root.mkdir(parents=True, exist_ok=True)
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        return self


@contextlib.contextmanager
def local_aws(
    workdir: Path,
    *,
    bucket: str,
    table: str,
    endpoint_url: str | None = None,
    port: int = 0,
) -> Iterator[LocalAws]:
    """moto on loopback (stopped on exit) unless ``endpoint_url`` names a running endpoint."""
    with contextlib.ExitStack() as stack:
        if endpoint_url is None:
            endpoint_url = stack.enter_context(moto_server(LOOPBACK, claim_port(port, option="--moto-port")))
        aws = LocalAws(endpoint_url, bucket, table, workdir / "staging", workdir / "spool")
        yield aws.provision()
