"""The Tidemark stack: one per deployment, built from the one stream configuration.

Network ─┬─ Staging (EFS) ───────────┬─ Archiver (function + MSK or Kinesis mapping per stream)
         └─ Source (MSK, Kinesis)  ─┘   Sweeper (state machine + schedule)
Storage (bucket, ledger, aggregates) ── Pipeline (EMR Serverless + schedule) ── Observability
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from stacks.archiver import ArchiverConstruct
from stacks.catalog import ArchiveCatalog
from stacks.functions import Placement
from stacks.grants import ArchiveAccess
from stacks.layer import CoreLayer, FormatsLayer, needs_format_layer
from stacks.nag import apply_nag
from stacks.network import NetworkConstruct
from stacks.observability import ObservabilityConstruct, dashboard_name, dashboard_url
from stacks.pipeline import PipelineConstruct
from stacks.source import SourceConstruct
from stacks.staging import STAGING_MOUNT, StagingConstruct
from stacks.storage import StorageConstruct
from stacks.sweeper import SweeperConstruct
from tidemark.config import TidemarkConfig
from tidemark.config.loader import ENV_JSON
from tidemark.exceptions import ConfigError
from tidemark.runtime import ENV_BUCKET, ENV_LEDGER_TABLE, ENV_STAGING_ROOT

ROOT = Path(__file__).resolve().parents[1]
ENV_AGGREGATES_TABLE = "TIDEMARK_AGGREGATES_TABLE"  # jobs/aggregate.py reads it
#: Lambda allows 4 KB of environment variables per function; leave room for Powertools' own
MAX_CONFIG_ENV_BYTES = 3 * 1024

DESCRIPTION = "Tidemark: exactly-once archive of Kafka/MSK topics into event-hour S3 objects"


class TidemarkStack(Stack):
    """Everything one ``cdk deploy`` stands up. ``root`` is the repository (asset directories)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: TidemarkConfig,
        root: Path = ROOT,
        layer_cache: Path | None = None,
        nag: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("description", DESCRIPTION)
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        runtime_config = config.runtime_json()
        if len(runtime_config.encode()) > MAX_CONFIG_ENV_BYTES:
            raise ConfigError(
                f"streams: the configuration the functions get is {len(runtime_config.encode())} bytes, "
                f"above {MAX_CONFIG_ENV_BYTES} (Lambda's 4 KB environment limit); split the streams over two stacks"
            )

        self.network = NetworkConstruct(
            self,
            "Network",
            settings=config.network,
            msk_pollers=any(stream.source.kind == "msk" for stream in config.streams),
            kinesis=any(stream.source.kind == "kinesis" for stream in config.streams),
        )
        self.storage = StorageConstruct(self, "Storage", config=config)
        self.catalog = (
            ArchiveCatalog(
                self,
                "Catalog",
                streams=config.streams,
                bucket_name=self.storage.bucket.bucket_name,
                raw_prefix=config.archive.raw_prefix,
                database=config.catalog.database,
                years=(config.catalog.first_year, config.catalog.last_year),
            )
            if config.catalog.enabled
            else None
        )
        self.staging = StagingConstruct(self, "Staging", vpc=self.network.vpc, subnets=self.network.subnets)
        self.source = SourceConstruct(
            self, "Source", config=config, vpc=self.network.vpc, subnet_ids=self.network.subnet_ids
        )
        layer_cache = layer_cache or root / ".cache" / "layer"
        self.core_layer = CoreLayer(self, "CoreLayer", root=root, cache_dir=layer_cache).layer
        # Parquet, Avro and CSV's libraries: only when a stream uses them (and only on the
        # functions that render its objects).
        self.formats_layer = (
            FormatsLayer(self, "FormatsLayer", root=root, cache_dir=layer_cache).layer
            if any(needs_format_layer(stream) for stream in config.streams)
            else None
        )
        self.access = ArchiveAccess(self.storage.bucket, self.storage.encryption_key)
        self.placement = Placement(
            vpc=self.network.vpc,
            subnets=self.network.subnets,
            security_group=self.network.function_security_group,
            filesystem=self.staging.mount,
        )
        self.function_environment = {
            ENV_BUCKET: self.storage.bucket.bucket_name,
            ENV_LEDGER_TABLE: self.storage.ledger_table.table_name,
            ENV_STAGING_ROOT: STAGING_MOUNT,
            ENV_JSON: runtime_config,
        }
        self.archiver = ArchiverConstruct(
            self,
            "Archiver",
            config=config,
            code_dir=root / "functions" / "archiver",
            layer=self.core_layer,
            formats_layer=self.formats_layer,
            source=self.source,
            access=self.access,
            ledger_table=self.storage.ledger_table,
            environment=self.function_environment,
            placement=self.placement,
        )
        self.sweeper = SweeperConstruct(
            self,
            "Sweeper",
            config=config,
            code_dir=root / "functions" / "sweeper",
            layer=self.core_layer,
            formats_layer=self.formats_layer,
            access=self.access,
            ledger_table=self.storage.ledger_table,
            environment=self.function_environment,
            placement=self.placement,
        )
        # Readers before writers: on an upgrade CloudFormation updates the sweeper (which also
        # flushes what the archiver staged) before the archiver, so nothing the new archiver
        # stages -- a new segment format, a new codec -- meets a sweeper too old to read it.
        for function in self.archiver.functions.values():
            function.node.add_dependency(self.sweeper.functions.sweep_partition)
        self.pipeline = PipelineConstruct(
            self,
            "Pipeline",
            config=config,
            root=root,
            access=self.access,
            ledger_table=self.storage.ledger_table,
            aggregates_table=self.storage.aggregates_table,
            environment={
                ENV_BUCKET: self.storage.bucket.bucket_name,
                ENV_LEDGER_TABLE: self.storage.ledger_table.table_name,
                ENV_AGGREGATES_TABLE: self.storage.aggregates_table.table_name,
            },
            runtime_config=runtime_config,
        )
        self.observability = ObservabilityConstruct(
            self,
            "Observability",
            config=config,
            archivers=self.archiver.functions,
            sweeper=self.sweeper.state_machine,
            sweeper_functions=list(self.sweeper.functions),
            file_system=self.staging.file_system,
            pipeline=self.pipeline.state_machine if self.pipeline.enabled else None,
            emr_application_id=self.pipeline.application.attr_application_id if self.pipeline.enabled else None,
            kinesis=self.source.kinesis,
        )
        self._outputs()
        if nag:
            apply_nag(self)

    def _outputs(self) -> None:
        outputs = {
            "ArchiveBucketName": (self.storage.bucket.bucket_name, "S3 bucket holding the archive (raw/ and errors/)"),
            "LedgerTableName": (self.storage.ledger_table.table_name, "DynamoDB table holding the exactly-once ledger"),
            "AggregatesTableName": (self.storage.aggregates_table.table_name, "DynamoDB table of hourly aggregates"),
            "SweeperStateMachineArn": (self.sweeper.state_machine.state_machine_arn, "the sweeper workflow"),
            "AlarmTopicArn": (self.observability.topic.topic_arn, "SNS topic the alarms notify"),
        }
        for stream, fn in self.archiver.functions.items():
            outputs[f"ArchiverFunction{stream.title().replace('-', '').replace('_', '')}"] = (
                fn.function_name,
                f"archiver function of stream {stream} (sam local invoke / tidemark invoke)",
            )
        for stream in self.observability.dashboards:
            outputs[f"DashboardUrl{stream.title().replace('-', '').replace('_', '')}"] = (
                dashboard_url(self.region, dashboard_name(self.stack_name, self.region, stream)),
                f"CloudWatch dashboard of stream {stream} (alarm status at the top)",
            )
        if self.pipeline.enabled:
            outputs["EmrApplicationId"] = (self.pipeline.application.attr_application_id, "EMR Serverless application")
        if self.catalog is not None:
            outputs["CatalogDatabaseName"] = (self.catalog.database_name, "Glue database of the archive (Athena)")
        for name, (value, description) in outputs.items():
            CfnOutput(self, name, value=value, description=description)
