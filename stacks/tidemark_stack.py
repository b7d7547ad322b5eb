"""The Tidemark stack: one per deployment, built from the one stream configuration."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from stacks.storage import StorageConstruct
from tidemark.config import TidemarkConfig

DESCRIPTION = "Tidemark: exactly-once archive of Kafka/MSK topics into event-hour S3 objects"


class TidemarkStack(Stack):
    """Storage for now; the archiver, sweeper, pipeline and observability constructs join it later."""

    def __init__(self, scope: Construct, construct_id: str, *, config: TidemarkConfig, **kwargs: Any) -> None:
        kwargs.setdefault("description", DESCRIPTION)
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.storage = StorageConstruct(self, "Storage", config=config)

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
