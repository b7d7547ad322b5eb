"""``TidemarkArchive``: the whole of Tidemark as one construct, for this repository's stack and for
any other CDK app that installs the package (adopting Tidemark should not mean forking it).

Network ─┬─ Staging (EFS) ──────────────────┬─ Archiver (function + Kafka or Kinesis mapping per stream)
         └─ Source (MSK, Kafka, Kinesis)  ─┘   Sweeper (state machine + schedule)
Storage (bucket, ledger, aggregates) ── Pipeline (EMR Serverless + schedule) ── Observability

Assets (function code, the core layer, the Spark job) are found by ``stacks.paths.ProjectSources``:
in the checkout when ``stacks`` is part of one, in ``site-packages`` otherwise.

Why a builder (``ArchiveBuilder``) shared by the construct and ``TidemarkStack`` rather than the
stack holding a ``TidemarkArchive``: CDK derives logical IDs and some properties from construct
paths. Under any child id, even ``Default`` (left out of logical IDs), the paths gain a level and the
properties CDK derives from them change: a security group's default ``GroupDescription`` (which
*replaces* the group) and the VPC's ``Name`` tags. The stack therefore builds the very same parts
directly in its own scope, so its template is byte for byte what it was, while another app's
``TidemarkArchive`` builds them below itself. Both run the same code, validation and outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aws_cdk import Aspects, CfnOutput, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.archiver import ArchiverConstruct
from stacks.catalog import ArchiveCatalog
from stacks.functions import Placement
from stacks.grants import ArchiveAccess
from stacks.layer import CoreLayer, FormatsLayer, needs_format_layer
from stacks.nag import apply_nag
from stacks.network import NetworkConstruct
from stacks.observability import ObservabilityConstruct, dashboard_name, dashboard_url
from stacks.operators import OperatorAccess
from stacks.paths import ProjectSources
from stacks.pipeline import PipelineConstruct
from stacks.source import SourceConstruct
from stacks.staging import STAGING_MOUNT, StagingConstruct
from stacks.star_actions import StarResourceCheck
from stacks.storage import StorageConstruct
from stacks.sweeper import SweeperConstruct
from tidemark.config import TidemarkConfig
from tidemark.config.loader import ENV_JSON
from tidemark.exceptions import ConfigError
from tidemark.runtime import ENV_BUCKET, ENV_LEDGER_TABLE, ENV_STAGING_ROOT

ENV_AGGREGATES_TABLE = "TIDEMARK_AGGREGATES_TABLE"  # jobs/aggregate.py reads it
#: Lambda allows 4 KB of environment variables per function; leave room for Powertools' own
MAX_CONFIG_ENV_BYTES = 3 * 1024


def _title(stream: str) -> str:
    return stream.title().replace("-", "").replace("_", "")


class ArchiveBuilder:
    """Builds everything one Tidemark deployment stands up into a scope, and names the parts.

    Mixed into ``TidemarkArchive`` (the parts below the construct) and ``TidemarkStack`` (the parts
    directly in the stack, where they always were); not a construct itself.
    """

    def _build_archive(
        self,
        scope: Construct,
        *,
        config: TidemarkConfig,
        root: Path | ProjectSources | None,
        layer_cache: Path | None,
        outputs: bool,
        pin_output_ids: bool,
    ) -> None:
        """``pin_output_ids``: give the outputs their names as logical IDs even when ``scope`` is
        not the stack (``tidemark audit --stack-name`` reads ``ArchiveBucketName``, ...)."""
        if not isinstance(config, TidemarkConfig):
            raise TypeError(
                "config must be a TidemarkConfig (tidemark.config.load_config(path) or parse_config(dict)), "
                f"got {type(config).__name__}"
            )
        stack = Stack.of(scope)
        self.config = config
        runtime_config = config.runtime_json()
        if len(runtime_config.encode()) > MAX_CONFIG_ENV_BYTES:
            raise ConfigError(
                f"streams: the configuration the functions get is {len(runtime_config.encode())} bytes, "
                f"above {MAX_CONFIG_ENV_BYTES} (Lambda's 4 KB environment limit); split the streams over two stacks"
            )
        self.sources = ProjectSources.locate(root)
        self._build_parts(scope, config, runtime_config, layer_cache or self.sources.cache_dir)
        Aspects.of(scope).add(StarResourceCheck())  # no action on "*" that stacks/star_actions.py does not list
        self.outputs: dict[str, CfnOutput] = self._outputs(scope, stack, pin_output_ids) if outputs else {}

    def _build_parts(self, scope: Construct, config: TidemarkConfig, runtime_config: str, layer_cache: Path) -> None:
        self.network = NetworkConstruct(
            scope,
            "Network",
            settings=config.network,
            msk_pollers=any(stream.source.kind == "msk" for stream in config.streams),
            kinesis=any(stream.source.kind == "kinesis" for stream in config.streams),
        )
        self.storage = StorageConstruct(scope, "Storage", config=config)
        self.catalog = (
            ArchiveCatalog(
                scope,
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
        self.staging = StagingConstruct(
            scope, "Staging", vpc=self.network.vpc, subnets=self.network.subnets, settings=config.staging
        )
        self.source = SourceConstruct(
            scope, "Source", config=config, vpc=self.network.vpc, subnet_ids=self.network.subnet_ids
        )
        self.core_layer = CoreLayer(scope, "CoreLayer", root=self.sources, cache_dir=layer_cache).layer
        # Parquet, Avro and CSV's libraries: only when a stream uses them (and only on the
        # functions that render its objects).
        self.formats_layer = (
            FormatsLayer(scope, "FormatsLayer", root=self.sources, cache_dir=layer_cache).layer
            if any(needs_format_layer(stream) for stream in config.streams)
            else None
        )
        self.access = ArchiveAccess(self.storage.bucket, self.storage.encryption_key)
        self.operators = OperatorAccess(
            scope,
            "Operators",
            bucket=self.storage.bucket,
            ledger_table=self.storage.ledger_table,
            key=self.storage.encryption_key,
            streams=[stream.name for stream in config.streams],
            raw_prefix=config.archive.raw_prefix,
            errors_prefix=config.archive.errors_prefix,
        )
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
            scope,
            "Archiver",
            config=config,
            code_dir=self.sources.functions / "archiver",
            layer=self.core_layer,
            formats_layer=self.formats_layer,
            source=self.source,
            access=self.access,
            ledger_table=self.storage.ledger_table,
            environment=self.function_environment,
            placement=self.placement,
            staging=self.staging,
        )
        self.sweeper = SweeperConstruct(
            scope,
            "Sweeper",
            config=config,
            code_dir=self.sources.functions / "sweeper",
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
            scope,
            "Pipeline",
            config=config,
            root=self.sources,
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
            scope,
            "Observability",
            config=config,
            archivers=self.archiver.functions,
            sweeper=self.sweeper.state_machine,
            sweeper_functions=list(self.sweeper.functions),
            file_system=self.staging.file_system,
            pipeline=self.pipeline.state_machine if self.pipeline.enabled else None,
            emr_application_id=self.pipeline.application.attr_application_id if self.pipeline.enabled else None,
            aggregation_logs={stream: self.pipeline.log_location(stream) for stream in self.pipeline.streams}
            if self.pipeline.enabled
            else None,
            kinesis=self.source.kinesis,
            mappings=self.archiver.mappings,
        )

    # What another app wires to: the same objects as the attributes above, by what they are.

    @property
    def bucket(self) -> s3.IBucket:
        """The archive bucket (``raw/``, ``errors/``, manifests)."""
        return self.storage.bucket

    @property
    def ledger_table(self) -> dynamodb.ITable:
        """The exactly-once ledger."""
        return self.storage.ledger_table

    @property
    def aggregates_table(self) -> dynamodb.ITable:
        """The hourly aggregates the Spark job writes."""
        return self.storage.aggregates_table

    @property
    def functions(self) -> Mapping[str, lambda_.Function]:
        """The archiver function of each stream, by stream name."""
        return self.archiver.functions

    @property
    def mappings(self) -> Mapping[str, lambda_.EventSourceMapping]:
        """The event source mapping (MSK, Kafka or Kinesis) of each stream, by stream name."""
        return self.archiver.mappings

    @property
    def sweeper_state_machine(self) -> sfn.StateMachine:
        return self.sweeper.state_machine

    @property
    def pipeline_state_machine(self) -> sfn.StateMachine | None:
        """The aggregation workflow; None when no stream has aggregations."""
        return self.pipeline.state_machine if self.pipeline.enabled else None

    @property
    def state_machines(self) -> list[sfn.StateMachine]:
        """The sweeper's workflow, and the pipeline's when it is built."""
        pipeline = self.pipeline_state_machine
        return [self.sweeper.state_machine] if pipeline is None else [self.sweeper.state_machine, pipeline]

    @property
    def dashboards(self) -> Mapping[str, cw.Dashboard]:
        """The CloudWatch dashboard of each stream, by stream name."""
        return self.observability.dashboards

    def _outputs(self, scope: Construct, stack: Stack, pin_ids: bool) -> dict[str, CfnOutput]:
        """The stack outputs, keyed as they always were (in the stack's scope their ids are their
        names; below a construct ``pin_ids`` overrides the path-derived logical ID with the name),
        since the CLI and the docs read them by these names."""
        outputs = {
            "ArchiveBucketName": (self.storage.bucket.bucket_name, "S3 bucket holding the archive (raw/ and errors/)"),
            "LedgerTableName": (self.storage.ledger_table.table_name, "DynamoDB table holding the exactly-once ledger"),
            "AggregatesTableName": (self.storage.aggregates_table.table_name, "DynamoDB table of hourly aggregates"),
            "SweeperStateMachineArn": (self.sweeper.state_machine.state_machine_arn, "the sweeper workflow"),
            "AlarmTopicArn": (self.observability.topic.topic_arn, "SNS topic the alarms notify"),
            "OperatorPolicyArn": (
                self.operators.policy.managed_policy_arn,
                "IAM managed policy of the operator commands (status, audit, rearchive, recover, replay, epoch): "
                "attach it to your operators' role; Kafka access is their own cluster credentials (--kafka-config)",
            ),
        }
        for stream, fn in self.archiver.functions.items():
            outputs[f"ArchiverFunction{_title(stream)}"] = (
                fn.function_name,
                f"archiver function of stream {stream} (sam local invoke / tidemark invoke)",
            )
        for stream in self.observability.dashboards:
            outputs[f"DashboardUrl{_title(stream)}"] = (
                dashboard_url(stack.region, dashboard_name(stack.stack_name, stack.region, stream)),
                f"CloudWatch dashboard of stream {stream} (alarm status at the top)",
            )
        if self.pipeline.enabled:
            outputs["EmrApplicationId"] = (self.pipeline.application.attr_application_id, "EMR Serverless application")
        if self.catalog is not None:
            outputs["CatalogDatabaseName"] = (self.catalog.database_name, "Glue database of the archive (Athena)")
        made = {}
        for name, (value, description) in outputs.items():
            made[name] = CfnOutput(scope, name, value=value, description=description)
            if pin_ids:
                made[name].override_logical_id(name)
        return made


class TidemarkArchive(ArchiveBuilder, Construct):
    """Everything one Tidemark deployment stands up, built from one ``TidemarkConfig``, as a
    construct another CDK app adds to a stack of its own (the package installed, no fork).

    ``root`` is where the assets are (a checkout directory or ``ProjectSources``; by default the
    checkout ``stacks`` belongs to, else the installed package); ``layer_cache`` caches the layers'
    pip installs (default: ``.cache/layer`` of the checkout, or ``~/.cache/tidemark/layer``).
    ``nag`` runs cdk-nag's AwsSolutions checks on the construct's subtree. ``outputs`` adds the
    stack outputs (``ArchiveBucketName``, ``LedgerTableName``, ...) under those exact keys, which
    ``tidemark audit --stack-name`` reads, whatever this construct's id.

    The parts are attributes (``network``, ``storage``, ``archiver``, ``sweeper``, ``pipeline``,
    ``observability``, ...) and, by what they are, properties: ``bucket``, ``ledger_table``,
    ``functions``, ``mappings``, ``state_machines``, ``dashboards``.

    One per stack: the dashboards and the dev cluster are named after the stack, and the outputs'
    keys are fixed.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: TidemarkConfig,
        root: Path | ProjectSources | None = None,
        layer_cache: Path | None = None,
        nag: bool = True,
        outputs: bool = True,
    ) -> None:
        stack = _stack_of(scope)
        others = [c.node.path for c in stack.node.find_all() if isinstance(c, ArchiveBuilder)]
        if others:
            raise ValueError(
                f"TidemarkArchive: stack {stack.node.path!r} already holds a Tidemark archive ({others[0]!r}); "
                "build one per stack (dashboards, the dev cluster and the outputs are named after the stack)"
            )
        super().__init__(scope, construct_id)
        self._build_archive(
            self, config=config, root=root, layer_cache=layer_cache, outputs=outputs, pin_output_ids=True
        )
        if nag:
            apply_nag(self)


def _stack_of(scope: Construct) -> Stack:
    """The stack ``scope`` is in, or a ValueError saying where the construct belongs."""
    for candidate in reversed(scope.node.scopes):
        if Stack.is_stack(candidate):
            return candidate  # type: ignore[return-value]
    raise ValueError(
        "TidemarkArchive must be built inside a Stack (e.g. TidemarkArchive(stack, 'Archive', config=...))"
    )
