"""The archiver: one Lambda function per stream, fed by an MSK, Kafka, Kinesis or Amazon MQ event
source mapping.

    MSK topic ──ESM (batch size, window, starting position, group)──▶ archiver(stream) ──▶ EFS, ledger, S3
    Kinesis stream (or its EFO consumer) ──ESM (batch size, window, starting position)──▶ archiver(stream)
    RabbitMQ queue on Amazon MQ ──ESM (batch size, window, credentials, virtual host)──▶ archiver(stream)

A function per stream keeps each stream's grants to its own topic, group (or Kinesis stream) and
key prefixes, and lets streams be sized and throttled apart. The mapping commits a batch's
offsets (checkpoints a shard's sequence number) only after the function returned (invariant 6);
a failing batch is retried until it succeeds.

A Kafka mapping (MSK or self-managed) has no on-failure destination unless its retries are
bounded (``kafka_retry_attempts``): AWS caps the retries of a mapping with a destination at 10
when they are left unbounded ("When you configure both infinite retries and an on-failure
destination, Lambda automatically applies a maximum of 10 retry attempts",
https://docs.aws.amazon.com/lambda/latest/dg/kafka-on-failure-destination.html), and a batch it
gives up on is not archived: an S3 or DynamoDB outage of a few minutes, a ledger that is full,
a position reset waiting for its operator would each leave records for an operator to recover
before the topic's retention expires, or lose them. So a stream's batch is retried until it
succeeds, unless the stream bounds its retries (``archiver.retry_attempts``): then the
destination is the bucket's ``aws/lambda/`` prefix, the ``AbandonedRecords`` alarm counts what
reaches it or is dropped, and ``tidemark recover`` archives those records from the topic where
the archiver would have. A stream on the mapping's schema registry integration keeps unbounded
retries too: a bound there would also abandon a batch refused for a position reset (waiting for
its operator) or a storage outage, and after an abandoned reset batch the next ones would be
archived into the old epoch. So the records the integration cannot decode are dropped by the
mapping ("If no DLQ is configured, Lambda drops the message", Using schema registries with Kafka
event sources), counted, and alarmed (``AbandonedRecords``: ``DroppedEventCount`` and
``SchemaRegistryErrorCount``). They stay in the topic: ``tidemark audit`` names their offsets as
gaps, and ``tidemark recover`` archives them from Kafka -- exactly once, as dead letters with
their produced bytes -- within the topic's retention. ``encoding.wire_format: confluent``
decodes in the archiver instead, where an undecodable record is a dead letter with its reason as
it arrives.

Each stream's function reaches only its stream's state: its ledger items (``PART#<stream>#*``,
``HOUR#<stream>#*``, ``HOURS#<stream>``: a ``dynamodb:LeadingKeys`` condition on every ledger
grant, ``stacks.grants``) and its staging directory (its own EFS access point, rooted at
``/tidemark/<stream>`` and mounted at ``/mnt/<stream>``, ``stacks.staging``).

Every function runs on the core layer; the function of a stream whose objects need Parquet, Avro
or CSV (``needs_format_layer``) also on the formats layer, and only that one: the formats
layer is large (Lambda's 250 MB unzipped limit) and its imports lengthen a cold start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC
from pathlib import Path

import jsii
from aws_cdk import Annotations, Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks.functions import Placement, TidemarkFunction, spool_mb
from stacks.grants import ArchiveAccess, Keys, grant_ledger, stream_prefixes
from stacks.layer import needs_format_layer
from stacks.source import SourceConstruct, consumer_group_id, kafka_mapping_id
from stacks.staging import STREAM_MOUNT_PARENT, StagingConstruct
from tidemark.config import StreamConfig, TidemarkConfig
from tidemark.exceptions import ConfigError
from tidemark.runtime import ENV_STAGING_MOUNT, ENV_STAGING_ROOT

#: where the mapping writes a batch it gave up on (Lambda names the keys below it)
ON_FAILURE_PREFIX = "aws/lambda"
#: the ledger items an archiver reads of its stream: its partitions' states and marks (and, with
#: them, epochs and recoveries), and a committed object (a resumed flush checks its own commit)
ARCHIVER_READS = (Keys.PARTITIONS, Keys.OBJECTS)
#: and writes: accepts and seals (its partitions), the commit transaction (the object's item,
#: the hour's mark, the state). Not the partition registry (``STREAM#``): the sweeper keeps it.
ARCHIVER_WRITES = (Keys.PARTITIONS, Keys.OBJECTS, Keys.HOUR_MARKS)


def kafka_retry_attempts(stream: StreamConfig) -> int | None:
    """The Kafka mapping's ``MaximumRetryAttempts``, or ``None`` for unbounded retries and no
    on-failure destination (see the module docstring)."""
    return stream.archiver.retry_attempts


def abandons_records(stream: StreamConfig) -> bool:
    """Can the stream's Kafka mapping leave records out of the archive by itself (bounded
    retries, or undecodable records of its schema registry integration)? Then they alarm."""
    return stream.source.kind in ("msk", "kafka") and (
        kafka_retry_attempts(stream) is not None or stream.source.schema_registry is not None
    )


@jsii.implements(lambda_.IEventSourceDlq)
class PrefixScopedS3OnFailure:
    """The archive bucket as the mapping's on-failure destination: object writes under
    ``aws/lambda/*`` only (CDK's ``S3OnFailureDestination`` grants read and write, deletes included,
    on the whole bucket)."""

    def __init__(self, access: ArchiveAccess) -> None:
        self.access = access

    def bind(
        self, _target: lambda_.IEventSourceMapping, target_handler: lambda_.IFunction
    ) -> lambda_.DlqDestinationConfig:
        # Lambda writes there, not our code: no conditional write to compare.
        self.access.put(target_handler, [ON_FAILURE_PREFIX], conditional=False)
        # Lambda checks the destination bucket with ListBucket before it writes; a prefix
        # condition could deny that check, so this one grant is bucket-wide (names, not data).
        target_handler.add_to_role_policy(
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.access.bucket.bucket_arn])
        )
        return lambda_.DlqDestinationConfig(destination=self.access.bucket.bucket_arn)


class ArchiverConstruct(Construct):
    """The archiver function and event source mapping of every stream (``functions[name]``).

    ``layer`` is the core layer; ``formats_layer`` the formats layer, required when a stream
    needs it (``needs_format_layer``). ``staging`` gives each stream's function its own access
    point (``placement``'s file system is the sweeper's, and not mounted here)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: TidemarkConfig,
        code_dir: Path,
        layer: lambda_.ILayerVersion,
        source: SourceConstruct,
        access: ArchiveAccess,
        ledger_table: dynamodb.ITable,
        environment: Mapping[str, str],
        placement: Placement,
        staging: StagingConstruct,
        formats_layer: lambda_.ILayerVersion | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if not (code_dir / "handler.py").is_file():
            raise ConfigError(f"archiver code directory {code_dir} has no handler.py")
        code = lambda_.Code.from_asset(str(code_dir), exclude=["**/__pycache__"])
        self.functions: dict[str, lambda_.Function] = {}
        self.mappings: dict[str, lambda_.EventSourceMapping] = {}
        for index, stream in enumerate(config.streams):
            if stream.source.batching_window.total_seconds() % 1:
                raise ConfigError(
                    f"streams[{index}].source.batching_window: the event source mapping takes whole seconds, "
                    f"got {stream.source.batching_window}"
                )
            layers = [layer]
            if needs_format_layer(stream):
                if formats_layer is None:
                    raise ConfigError(
                        f"streams[{index}].format: {stream.format.type} ({stream.format.compression}) needs the"
                        " formats layer, and the archiver was given none"
                    )
                layers.append(formats_layer)
            if stream.source.kind == "kinesis" and stream.archiver.provisioned_pollers is not None:
                raise ConfigError(
                    f"streams[{index}].archiver.provisioned_pollers: provisioned mode is for Kafka event source "
                    "mappings; a Kinesis mapping scales with the stream's shards"
                )
            if stream.source.kind == "rabbitmq" and stream.archiver.provisioned_pollers is not None:
                raise ConfigError(
                    f"streams[{index}].archiver.provisioned_pollers: provisioned mode is for Kafka event source "
                    "mappings; a RabbitMQ mapping runs one invocation at a time"
                )
            if stream.source.kind != "rabbitmq" and stream.source.starting_position == "LATEST":
                Annotations.of(self).add_warning_v2(
                    f"tidemark:latest-starting-position-{stream.name}",
                    f"streams[{index}].source.starting_position: LATEST can miss records while the event source "
                    'mapping is created or updated ("specify either TRIM_HORIZON or AT_TIMESTAMP", Apache Kafka '
                    "polling and stream starting positions in Lambda): records produced meanwhile are not archived",
                )
            if stream.source.schema_registry is not None and stream.archiver.retry_attempts is None:
                Annotations.of(self).add_warning_v2(
                    f"tidemark:registry-drops-{stream.name}",
                    f"streams[{index}].source.schema_registry: the event source mapping drops the records the "
                    "registry cannot decode (no on-failure destination: unbounded retries keep refused batches "
                    "whole); they alarm as AbandonedRecords, `tidemark audit` names them as gaps, and "
                    "`tidemark recover` archives them from Kafka as dead letters while the topic retains them. To "
                    "dead-letter them as they arrive instead, decode in the archiver (encoding.wire_format: "
                    "confluent)",
                )
            # Its stream's access point at /mnt/<stream>, under the staging root /mnt: the code's
            # <root>/<stream>/p<partition> is /tidemark/<stream>/p<partition> on the file system,
            # where the sweeper (root access point) and earlier versions find it too.
            own = dataclasses.replace(placement, filesystem=staging.stream_mount(stream.name))
            mount = {ENV_STAGING_ROOT: STREAM_MOUNT_PARENT, ENV_STAGING_MOUNT: f"{STREAM_MOUNT_PARENT}/{stream.name}"}
            fn = self._function(stream, code, layers, {**environment, **mount}, own)
            grant_ledger(ledger_table, fn, [stream.name], reads=ARCHIVER_READS, writes=ARCHIVER_WRITES)
            access.put(fn, stream_prefixes(config.archive.raw_prefix, config.archive.errors_prefix, stream.name))
            for statement in source.read_statements(stream):
                fn.add_to_role_policy(statement)
            if stream.source.kind == "kinesis":
                self.mappings[stream.name] = self._kinesis_mapping(stream, fn, source, access)
            elif stream.source.kind == "rabbitmq":
                self.mappings[stream.name] = source.rabbitmq[stream.name].add_mapping(
                    self,
                    f"Mapping-{stream.name}",
                    target=fn,
                    batch_size=stream.source.batch_size,
                    batching_window=Duration.seconds(int(stream.source.batching_window.total_seconds())),
                )
            else:
                self.mappings[stream.name] = self._mapping(stream, fn, source, access)
            self.functions[stream.name] = fn

    def _function(
        self,
        stream: StreamConfig,
        code: lambda_.Code,
        layers: list[lambda_.ILayerVersion],
        environment: Mapping[str, str],
        placement: Placement,
    ) -> lambda_.Function:
        settings = stream.archiver
        return TidemarkFunction(
            self,
            f"Archiver-{stream.name}",
            handler="handler.lambda_handler",
            code=code,
            layers=layers,
            environment={**environment, "POWERTOOLS_SERVICE_NAME": "tidemark-archiver"},
            placement=placement,
            timeout=Duration.seconds(int(settings.timeout.total_seconds())),
            memory_mb=settings.memory_mb,
            reserved_concurrency=settings.reserved_concurrency,
            ephemeral_mb=spool_mb(int(stream.flush.max_bytes)),
            description=(
                f"archives Kinesis stream {stream.source.topic} into stream {stream.name}"
                if stream.source.kind == "kinesis"
                else f"archives RabbitMQ queue {stream.source.match_name} into stream {stream.name}"
                if stream.source.kind == "rabbitmq"
                else f"archives topic {stream.source.topic} into stream {stream.name}"
            ),
        ).function

    def _mapping(
        self, stream: StreamConfig, fn: lambda_.Function, source: SourceConstruct, access: ArchiveAccess
    ) -> lambda_.EventSourceMapping:
        settings, src = stream.archiver, stream.source
        pollers = settings.provisioned_pollers
        retry_attempts = kafka_retry_attempts(stream)
        return lambda_.EventSourceMapping(
            self,
            kafka_mapping_id(stream),  # a new identity is a new mapping (not an update CFN ignores)
            target=fn,
            event_source_arn=source.event_source_arn(stream),  # MSK; self-managed Kafka: the brokers
            kafka_bootstrap_servers=src.bootstrap_servers if src.kind == "kafka" else None,
            source_access_configurations=source.access_configurations(stream) or None,
            schema_registry_config=source.schema_registry(stream),
            kafka_topic=src.topic,
            kafka_consumer_group_id=consumer_group_id(stream),
            batch_size=src.batch_size,
            max_batching_window=Duration.seconds(int(src.batching_window.total_seconds())),
            starting_position=lambda_.StartingPosition[src.starting_position],
            on_failure=PrefixScopedS3OnFailure(access) if retry_attempts is not None else None,
            support_s3_on_failure_destination=retry_attempts is not None,
            retry_attempts=retry_attempts,
            provisioned_poller_config=(
                lambda_.ProvisionedPollerConfig(minimum_pollers=pollers.minimum, maximum_pollers=pollers.maximum)
                if pollers
                else None
            ),
            # A Kafka mapping's metrics (MetricsConfig) come with provisioned mode only ("Observability
            # features (LogLevel and MetricsConfig) are only available when using provisioned mode",
            # aws-cdk-lib's aws-lambda-event-sources README); the function's OffsetLag needs none.
            metrics_config=(
                lambda_.MetricsConfig(
                    metrics=[
                        lambda_.MetricType.EVENT_COUNT,
                        lambda_.MetricType.ERROR_COUNT,
                        lambda_.MetricType.KAFKA_METRICS,
                    ]
                )
                if pollers
                else None
            ),
        )

    def _kinesis_mapping(
        self, stream: StreamConfig, fn: lambda_.Function, source: SourceConstruct, access: ArchiveAccess
    ) -> lambda_.EventSourceMapping:
        """The stream's Kinesis mapping, on the data stream or (``consumer: efo``) its consumer.

        A plain ``EventSourceMapping`` rather than ``KinesisEventSource``: that one grants the
        stream's ``grantRead`` (ListStreams, SubscribeToShard and DescribeStreamConsumer on the
        stream, which are not stream actions); ``source.read_statements`` names exactly what the
        mapping calls, and the mapping stays reachable as ``mappings[name]``.
        """
        src = stream.source
        timestamp = src.starting_position_timestamp
        if timestamp is not None and timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=UTC)  # a naive time is read as UTC
        return lambda_.EventSourceMapping(
            self,
            f"Mapping-{stream.name}",
            target=fn,
            event_source_arn=source.event_source_arn(stream),
            batch_size=src.batch_size,
            max_batching_window=Duration.seconds(int(src.batching_window.total_seconds())),
            starting_position=lambda_.StartingPosition[src.starting_position],
            starting_position_timestamp=timestamp.timestamp() if timestamp is not None else None,
            # One batch per shard at a time (the config refuses more): a shard's sequence numbers
            # reach the archiver in order, and the ledger drops a redelivery by its position.
            parallelization_factor=1,
            # Exactly-once, as for MSK: the archiver fails a whole batch (no batch item failures)
            # and the mapping retries that whole batch until it succeeds, never giving up on it
            # (-1; the record age is left unbounded too, -1 by default). Nor is it split: bisecting
            # serves to isolate a poison record to discard, but the archiver dead-letters bad
            # records itself and fails a batch on S3, DynamoDB or EFS trouble or a position
            # reset, none of which halves cure. Only a batch whose records expire from the stream (its retention)
            # while it fails is dropped, and the mapping then records it in the on-failure
            # destination, as it does for MSK.
            retry_attempts=-1,
            bisect_batch_on_error=False,
            report_batch_item_failures=False,
            tumbling_window=None,
            on_failure=PrefixScopedS3OnFailure(access),
            support_s3_on_failure_destination=True,
            # ErrorCount and KafkaMetrics are Kafka mappings' only
            metrics_config=lambda_.MetricsConfig(metrics=[lambda_.MetricType.EVENT_COUNT]),
        )
