"""The Tidemark stack: one per deployment, built from the one stream configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks.storage import StorageConstruct
from stacks.sweeper import SweeperConstruct
from tidemark.config import TidemarkConfig
from tidemark.config.loader import ENV_JSON
from tidemark.runtime import ENV_BUCKET, ENV_LEDGER_TABLE, ENV_STAGING_ROOT

ROOT = Path(__file__).resolve().parents[1]
STAGING_MOUNT = "/mnt/staging"  # where the EFS access point is mounted in every function

DESCRIPTION = "Tidemark: exactly-once archive of Kafka/MSK topics into event-hour S3 objects"


class TidemarkStack(Stack):
    """Storage and the sweeper so far; the archiver functions, networking, EFS, the Spark pipeline
    and observability join it with the infrastructure work."""

    def __init__(self, scope: Construct, construct_id: str, *, config: TidemarkConfig, **kwargs: Any) -> None:
        kwargs.setdefault("description", DESCRIPTION)
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.storage = StorageConstruct(self, "Storage", config=config)
        # The core package as a layer. Packaging its dependencies for the Lambda platform (pip,
        # no Docker) comes with the infrastructure work; until then the layer holds the package only.
        self.core_layer = lambda_.LayerVersion(
            self,
            "CoreLayer",
            code=lambda_.Code.from_asset(str(ROOT / "layers" / "core"), exclude=["**/__pycache__", "*.egg-info"]),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_11],
            description="tidemark core package",
        )
        self.function_environment = {
            ENV_BUCKET: self.storage.bucket.bucket_name,
            ENV_LEDGER_TABLE: self.storage.ledger_table.table_name,
            ENV_STAGING_ROOT: STAGING_MOUNT,
            ENV_JSON: config.model_dump_json(),
        }
        self.sweeper = SweeperConstruct(
            self,
            "Sweeper",
            config=config,
            code_dir=ROOT / "functions" / "sweeper",
            layer=self.core_layer,
            bucket=self.storage.bucket,
            ledger_table=self.storage.ledger_table,
            environment=self.function_environment,
        )

        CfnOutput(
            self,
            "ArchiveBucketName",
            value=self.storage.bucket.bucket_name,
            description="S3 bucket holding the archive (raw/ and errors/ prefixes)",
        )
        CfnOutput(
            self,
            "LedgerTableName",
            value=self.storage.ledger_table.table_name,
            description="DynamoDB table holding the exactly-once ledger",
        )
