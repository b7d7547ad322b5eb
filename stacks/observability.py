"""Observability: a CloudWatch dashboard per stream, alarms, and the SNS topic they notify.

Tidemark's own metrics are in the ``Tidemark`` namespace, dimensioned by ``service`` and, where
they belong to one stream, ``stream``: Powertools EMF metrics of the functions
(``tidemark-archiver`` / ``tidemark-sweeper``), and the aggregation job's
(``tidemark-aggregation``), which its driver puts with ``PutMetricData`` after each run
(``jobs/aggregation/metrics.py``). The rest are AWS's: Lambda (errors, throttles, duration, the
MSK mapping's ``OffsetLag``, the Kinesis mapping's ``IteratorAge``), Kinesis read throttles, Amazon MQ's
RabbitMQ queue metrics (``MessageCount``: an Amazon MQ mapping publishes no lag of its own, the
broker publishes the queue's depth), EFS ``StorageBytes``, Step Functions executions and EMR
Serverless job counts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_efs as efs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.archiver import ON_FAILURE_PREFIX, abandons_records, kafka_retry_attempts
from stacks.source import KinesisSource, RabbitMQSource
from tidemark.config import StreamConfig, TidemarkConfig

NAMESPACE = "Tidemark"
ARCHIVER = "tidemark-archiver"
SWEEPER = "tidemark-sweeper"
#: The aggregation job's service and metrics. They must match ``jobs/aggregation/metrics.py``
#: (``SERVICE``, ``HOURS_FAILED``, ``HOURS_AGGREGATED``), which stacks does not import (it may
#: import the CDK and the core package); ``tests/unit/test_stack_alarms.py`` checks they do.
AGGREGATION = "tidemark-aggregation"
HOURS_FAILED = "AggregationHoursFailed"
HOURS_AGGREGATED = "AggregationHoursAggregated"
PERIOD = Duration.minutes(5)


def tidemark_metric(name: str, service: str, *, stream: str | None = None, statistic: str = "Sum") -> cw.Metric:
    dimensions = {"service": service}
    if stream is not None:
        dimensions["stream"] = stream
    return cw.Metric(
        namespace=NAMESPACE, metric_name=name, dimensions_map=dimensions, statistic=statistic, period=PERIOD
    )


def archiver_and_sweeper(name: str, stream: str, *, label: str | None = None) -> cw.MathExpression:
    """``name``'s sum over both services for one stream. Both emit it on every invocation, but an
    idle partition has no archiver invocations and the sweeper may not run every period: a
    missing series counts as 0 rather than blanking the sum. The ids derive from ``name``: one
    graph shows several of these sums, and ids must be unique in a graph."""
    key = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()  # FlushErrors -> flush_errors
    archiver, sweeper = f"{key}_archiver", f"{key}_sweeper"
    return cw.MathExpression(
        expression=f"FILL({archiver}, 0) + FILL({sweeper}, 0)",
        using_metrics={
            archiver: tidemark_metric(name, ARCHIVER, stream=stream),
            sweeper: tidemark_metric(name, SWEEPER, stream=stream),
        },
        period=PERIOD,
        label=label,
    )


def failed_or_timed_out(machine: sfn.IStateMachine) -> cw.MathExpression:
    return cw.MathExpression(
        expression="failed + timedout",
        using_metrics={
            "failed": machine.metric_failed(period=PERIOD),
            "timedout": machine.metric_timed_out(period=PERIOD),
        },
        period=PERIOD,
    )


#: the EFS throughput alarm: above this share of PermittedThroughput, for this many periods
EFS_THROUGHPUT_ALARM_PERCENT = 80.0
EFS_THROUGHPUT_ALARM_PERIODS = 3

#: CloudWatch evaluates an alarm over at most seven days (period x evaluation periods)
MAX_ALARM_MINUTES = 7 * 24 * 60


def dashboard_name(stack_name: str, region: str, stream: str) -> str:
    """``<stack>-<region>-<stream>``: one dashboard per stream, named so a stack's are found
    together; dashboards are global to the account, so a stack deployed in two regions keeps two."""
    return f"{stack_name}-{region}-{stream}"


def dashboard_url(region: str, name: str) -> str:
    return f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#dashboards:name={name}"


class ObservabilityConstruct(Construct):
    """``topic`` (alarm notifications), ``dashboards[stream]`` and ``alarms[stream]``.

    ``kinesis`` holds the source of every Kinesis stream (``SourceConstruct.kinesis``): its
    dashboard graphs the stream's read throttles. A RabbitMQ stream's queue comes from the
    configuration (``RabbitMQSource.of``): its lag and freshness alarms and its dashboard read the
    broker's metrics of the queue.

    ``aggregation_logs`` names, for each stream the pipeline aggregates, where its job runs log
    (``PipelineConstruct.log_location``): each such stream gets an ``AggregationHoursFailed``
    alarm, whose description says where to read why, and its dashboard graphs the job's hours."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: TidemarkConfig,
        archivers: Mapping[str, lambda_.IFunction],
        sweeper: sfn.IStateMachine,
        sweeper_functions: Sequence[lambda_.IFunction],
        file_system: efs.IFileSystem,
        pipeline: sfn.IStateMachine | None = None,
        emr_application_id: str | None = None,
        aggregation_logs: Mapping[str, str] | None = None,
        kinesis: Mapping[str, KinesisSource] | None = None,
        mappings: Mapping[str, lambda_.IEventSourceMapping] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._mappings = dict(mappings or {})
        missing = [s.name for s in config.streams if abandons_records(s) and s.name not in self._mappings]
        if missing:
            raise ValueError(
                f"observability needs the event source mapping of every stream with bounded retries; missing {missing}"
            )
        missing = [stream.name for stream in config.streams if stream.name not in archivers]
        if missing:
            raise ValueError(f"observability needs the archiver function of every stream; missing {missing}")
        self._kinesis = dict(kinesis or {})
        missing = [s.name for s in config.streams if s.source.kind == "kinesis" and s.name not in self._kinesis]
        if missing:
            raise ValueError(f"observability needs the Kinesis source of every Kinesis stream; missing {missing}")
        self._rabbitmq = {s.name: RabbitMQSource.of(s) for s in config.streams if s.source.kind == "rabbitmq"}
        key = kms.Key(self, "TopicKey", enable_key_rotation=True, description="Encrypts Tidemark alarm notifications")
        self.topic = sns.Topic(self, "AlarmTopic", master_key=key, enforce_ssl=True, display_name="Tidemark alarms")
        # Alarms of this account publish to the topic. The TLS-only topic policy replaces SNS's
        # default one, so CloudWatch is allowed explicitly, and needs the key to encrypt.
        alarms_here = {
            "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
            "ArnLike": {"aws:SourceArn": f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:*"},
        }
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                actions=["sns:Publish"],
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                resources=[self.topic.topic_arn],
                conditions=alarms_here,
            )
        )
        key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                resources=["*"],  # in a key policy, "*" means this key
                conditions=alarms_here,
            )
        )
        for address in config.alarms.emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(address))
        self._action = cw_actions.SnsAction(self.topic)
        self._config = config
        self._sweeper = sweeper
        self._sweeper_functions = list(sweeper_functions)
        self._pipeline = pipeline
        self._emr_application_id = emr_application_id
        self._aggregation_logs = dict(aggregation_logs or {}) if pipeline is not None else {}
        self._file_system = file_system
        self.dashboards: dict[str, cw.Dashboard] = {}
        self.alarms: dict[str, list[cw.Alarm]] = {}
        self.shared_alarms = self._shared_alarms()
        for stream in config.streams:
            self.alarms[stream.name] = self._stream_alarms(stream, archivers[stream.name])
            self.dashboards[stream.name] = self._dashboard(stream, archivers[stream.name])

    # -- alarms ----------------------------------------------------------------------------

    def _alarm(self, construct_id: str, metric: cw.IMetric, description: str, *, periods: int = 1) -> cw.Alarm:
        alarm = cw.Alarm(
            self,
            construct_id,
            alarm_name=self._alarm_name(construct_id),
            metric=metric,
            threshold=0,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(self._action)
        return alarm

    def _lag_alarm(self, stream: StreamConfig, fn: lambda_.IFunction) -> cw.Alarm:
        """Above the threshold *and* still growing, for ``alarms.evaluation_periods`` periods: a
        backlog that is draining is not an incident. MSK: the mapping's ``OffsetLag`` (records)
        over ``alarms.offset_lag``; Kinesis: its ``IteratorAge`` (the age of the last record of a
        batch when the function got it, milliseconds) over ``alarms.iterator_age``; RabbitMQ: the
        queue's depth (``MessageCount``, ready plus unacknowledged messages: what the queue holds
        that is not archived yet, as an offset lag counts records) over ``alarms.offset_lag``.
        All the maximum over the period; a period without data (an idle mapping emits none) does
        not breach."""
        settings, name = self._config.alarms, stream.name
        queue = self._rabbitmq.get(name)
        if queue is not None:
            depth_growing = cw.MathExpression(
                expression=f"IF(depth > {settings.offset_lag} AND DIFF(depth) > 0, 1, 0)",
                using_metrics={"depth": queue.queue_metric("MessageCount", statistic="Maximum", period=PERIOD)},
                period=PERIOD,
                label="queue depth above threshold and growing",
            )
            return self._alarm(
                f"LagGrowing-{name}",
                depth_growing,
                f"{name}: RabbitMQ queue {queue.queue} (virtual host {queue.virtual_host}) holds more than "
                f"{settings.offset_lag} messages (alarms.offset_lag) and grew for "
                f"{settings.evaluation_periods} periods",
                periods=settings.evaluation_periods,
            )
        if stream.source.kind == "kinesis":
            threshold_ms = int(settings.iterator_age.total_seconds() * 1000)
            age_growing = cw.MathExpression(
                expression=f"IF(age > {threshold_ms} AND DIFF(age) > 0, 1, 0)",
                using_metrics={"age": fn.metric("IteratorAge", statistic="Maximum", period=PERIOD)},
                period=PERIOD,
                label="iterator age above threshold and growing",
            )
            return self._alarm(
                f"LagGrowing-{name}",
                age_growing,
                f"{name}: the Kinesis mapping's iterator age is above {threshold_ms} ms "
                f"({settings.iterator_age}) and grew for "
                f"{settings.evaluation_periods} periods",
                periods=settings.evaluation_periods,
            )
        lag = fn.metric("OffsetLag", statistic="Maximum", period=PERIOD)
        lag_growing = cw.MathExpression(
            expression=f"IF(lag > {settings.offset_lag} AND DIFF(lag) > 0, 1, 0)",
            using_metrics={"lag": lag},
            period=PERIOD,
            label="offset lag above threshold and growing",
        )
        return self._alarm(
            f"LagGrowing-{name}",
            lag_growing,
            f"{name}: the MSK mapping's offset lag is above {settings.offset_lag} and grew for "
            f"{settings.evaluation_periods} periods",
            periods=settings.evaluation_periods,
        )

    def _alarm_name(self, construct_id: str) -> str:
        """``<stack>-<alarm>``: the name the README's runbook lists it under, after the stack's."""
        return f"{Stack.of(self).stack_name}-{construct_id}"

    def _freshness_alarm(self, stream: StreamConfig, fn: lambda_.IFunction) -> cw.Alarm:
        """No object committed for the stream (archiver or sweeper) over a window in which a
        healthy stream with records waiting always commits -- ``flush.max_age`` plus two sweeper
        intervals -- while records waited all through it (the *minimum* over the window: a
        sparse stream whose mapping catches up between records does not breach). MSK:
        ``OffsetLag`` above 0; a stopped or deleted mapping emits no ``OffsetLag`` at all, and
        that silence breaches too. Kinesis: ``IteratorAge`` above ``max_age`` (records waiting
        longer than any buffer may); an idle stream emits no ``IteratorAge``, so there silence
        does not breach. RabbitMQ: messages in the queue (``MessageCount`` above 0); the broker
        publishes the queue's metrics whether or not the mapping consumes, so silence (broker or
        queue gone) does not breach."""
        name = stream.name
        window = stream.flush.max_age + 2 * self._config.sweeper.interval
        # CloudWatch evaluates at most seven days: a longer max_age is watched over the last seven.
        period = Duration.minutes(min(math.ceil(window.total_seconds() / 60), MAX_ALARM_MINUTES))
        committed = {
            "committed_archiver": tidemark_metric("ObjectsCommitted", ARCHIVER, stream=name),
            "committed_sweeper": tidemark_metric("SweeperObjectsCommitted", SWEEPER, stream=name),
        }
        none_committed = "FILL(committed_archiver, 0) + FILL(committed_sweeper, 0) == 0"
        queue = self._rabbitmq.get(name)
        if queue is not None:
            waiting = "depth > 0"
            source = {"depth": queue.queue_metric("MessageCount", statistic="Minimum", period=PERIOD)}
            missing = cw.TreatMissingData.NOT_BREACHING
            what = f"messages wait in RabbitMQ queue {queue.queue} (virtual host {queue.virtual_host})"
        elif stream.source.kind == "kinesis":
            waiting = f"age > {stream.flush.max_age_ms}"
            source = {"age": fn.metric("IteratorAge", statistic="Minimum")}
            missing = cw.TreatMissingData.NOT_BREACHING
            what = f"records older than max_age ({stream.flush.max_age}) wait in the Kinesis stream"
        else:
            waiting = "lag > 0"
            source = {"lag": fn.metric("OffsetLag", statistic="Minimum")}
            missing = cw.TreatMissingData.BREACHING
            what = "the MSK mapping reports an offset lag, or reports nothing (stopped or deleted)"
        alarm = cw.Alarm(
            self,
            f"Freshness-{name}",
            alarm_name=self._alarm_name(f"Freshness-{name}"),
            metric=cw.MathExpression(
                expression=f"IF({waiting} AND {none_committed}, 1, 0)",
                using_metrics={**source, **committed},
                period=period,
                label="records waiting, none committed",
            ),
            threshold=0,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=missing,
            alarm_description=f"{name}: no object committed for {period.to_minutes()} minutes while {what}. "
            "Run `tidemark status` (lag, open and sealed buffers, stale partitions); check the mapping's "
            "state and the archiver's and sweeper's errors",
        )
        alarm.add_alarm_action(self._action)
        return alarm

    def _abandoned_alarm(self, stream: StreamConfig) -> cw.Alarm:
        """Records a Kafka mapping did not deliver (``tidemark recover`` archives them from the
        topic while it retains them): written to its on-failure destination
        after ``MaximumRetryAttempts`` (``OnFailureDestinationDeliveredEventCount``), dropped --
        when that write failed, or, without a destination, what its schema registry integration
        could not decode (``DroppedEventCount``: "For the DroppedEventCount metric, Lambda emits a
        number equal to the number of events that failed delivery") -- and, for a registry stream,
        the integration's errors (``SchemaRegistryErrorCount``). Types of metrics for Lambda
        functions, event source mapping metrics, by ``EventSourceMappingUUID``."""
        name, mapping = stream.name, self._mappings[stream.name]

        def esm_metric(metric: str) -> cw.Metric:
            return cw.Metric(
                namespace="AWS/Lambda",
                metric_name=metric,
                dimensions_map={"EventSourceMappingUUID": mapping.event_source_mapping_id},
                statistic="Sum",
                period=PERIOD,
            )

        metrics = {"delivered": "OnFailureDestinationDeliveredEventCount", "dropped": "DroppedEventCount"}
        if stream.source.schema_registry is not None:
            metrics["registry"] = "SchemaRegistryErrorCount"
        abandoned = cw.MathExpression(
            expression=" + ".join(f"FILL({key}, 0)" for key in metrics),
            using_metrics={key: esm_metric(metric) for key, metric in metrics.items()},
            label="records left out of the archive",
            period=PERIOD,
        )
        where = (
            f"the on-failure destination (s3://<bucket>/{ON_FAILURE_PREFIX}/) names each batch's topic, partition "
            "and offsets"
            if kafka_retry_attempts(stream) is not None
            else "the mapping dropped them (no destination: a bound on retries would abandon refused batches too)"
        )
        return self._alarm(
            f"AbandonedRecords-{name}",
            abandoned,
            f"{name}: the event source mapping did not deliver records -- given up on after "
            "archiver.retry_attempts, or not decodable by its schema registry -- so no object holds them yet. "
            f"{where}. `tidemark audit` names their offsets as gaps; `tidemark recover` archives them from Kafka, "
            "exactly once (a registry stream's as dead letters), while the topic still retains them: run it before "
            "the topic's retention expires, then `tidemark audit` again",
        )

    def _stream_alarms(self, stream: StreamConfig, fn: lambda_.IFunction) -> list[cw.Alarm]:
        settings = self._config.alarms
        name = stream.name
        kinesis = stream.source.kind == "kinesis"
        rabbitmq = stream.source.kind == "rabbitmq"
        replay = (
            "Replay the quarantined sequence numbers from the Kinesis stream before its retention expires; the "
            "shard ledger item's quarantined entry and the CRITICAL log line name the shard and sequence range"
            if kinesis
            else "A queue cannot be replayed: its messages were acknowledged when their batch succeeded. Publish "
            "them again from their producers; the partition ledger item's quarantined entry and the CRITICAL log "
            "line name the position range"
            if rabbitmq
            else "Replay the quarantined offsets from Kafka before the topic's retention expires; the partition "
            "ledger item's quarantined entry and the CRITICAL log line name the partition and offset range"
        )
        reset = (
            f"{name}: a shard's sequence numbers went backwards or its source changed (stream recreated, stream "
            "changed)"
            if kinesis
            else f"{name}: the queue's source changed (another broker, virtual host or queue)"
            if rabbitmq
            else f"{name}: a partition's offsets went backwards or its source changed (topic recreated, topic "
            "changed, cluster migrated)"
        )
        return [
            self._lag_alarm(stream, fn),
            self._freshness_alarm(stream, fn),
            self._alarm(
                f"ArchiverErrors-{name}",
                fn.metric_errors(period=PERIOD),
                f"{name}: archiver invocations failed (the batch is retried; offsets do not advance"
                + (
                    "; after archiver.retry_attempts it is abandoned: see AbandonedRecords)"
                    if kafka_retry_attempts(stream) is not None
                    else ")"
                ),
                periods=settings.evaluation_periods,
            ),
            self._alarm(
                f"DeadLetters-{name}",
                tidemark_metric("DeadLettered", ARCHIVER, stream=name),
                f"{name}: records were dead-lettered (see errors/{name}/ in the bucket)",
            ),
            self._alarm(
                f"Quarantines-{name}",
                archiver_and_sweeper("FlushesQuarantined", name, label="flushes quarantined"),
                f"{name}: a flush was quarantined (a damaged staging segment): its records are not in the archive. "
                + replay,
            ),
            self._alarm(
                f"FlushErrors-{name}",
                archiver_and_sweeper("FlushErrors", name, label="flush errors"),
                f"{name}: flushes failed for {settings.evaluation_periods} periods in a row (a single S3 error is "
                "retried by the next invocation; sustained errors mean S3 or ledger trouble, and staged data is "
                "piling up on EFS). Check the archiver's and sweeper's ERROR logs and EFS StorageBytes",
                periods=settings.evaluation_periods,
            ),
            self._alarm(
                f"PositionResets-{name}",
                tidemark_metric("PositionResets", ARCHIVER, stream=name),
                reset + ": the archiver refuses the batch until an operator starts a new epoch "
                "with `tidemark epoch start` (see README 'Epochs')",
            ),
            *([self._abandoned_alarm(stream)] if abandons_records(stream) else []),
            *([self._hours_failed_alarm(name)] if name in self._aggregation_logs else []),
        ]

    def _hours_failed_alarm(self, name: str) -> cw.Alarm:
        """Any hour an aggregation run of the stream could not aggregate (``AggregationHoursFailed``,
        which the job's driver puts after every run, zeros too): the run itself succeeded, so the
        ``AggregationFailures`` alarm (failed or timed-out executions) does not fire."""
        return self._alarm(
            f"AggregationHoursFailed-{name}",
            tidemark_metric(HOURS_FAILED, AGGREGATION, stream=name),
            f"{name}: an aggregation run left hours dirty that it could not aggregate (an object it could not "
            "read, or values an aggregation cannot take). Each such hour has an ERROR log line ('aggregation hour "
            f"failed') naming the hour and the reason, in {self._aggregation_logs[name]}; the run's record in the "
            f"ledger (RUNS#{name}) lists them under failed. The hours stay dirty and every run retries them, so "
            "this repeats until the cause is fixed (README 'The aggregation job (PySpark)': known limits). "
            "`tidemark status` does not show runs or dirty hours",
        )

    def _shared_alarms(self) -> list[cw.Alarm]:
        alarms = [
            self._alarm(
                "ReconciliationFindings",
                tidemark_metric("ReconciliationFindings", SWEEPER),
                "the ledger and the bucket disagree (see the Reconcile step's ERROR log lines)",
            ),
            self._alarm(
                "SweeperFailures",
                failed_or_timed_out(self._sweeper),
                "a sweeper execution failed or timed out -- PartitionSweepFailed: a partition's sweep failed after "
                "its retries (run `tidemark status`; the SweepPartition function's ERROR logs name the partition)",
            ),
            self._alarm(
                "SweeperErrors",
                self._sweeper_errors(),
                "a sweeper function raised (Lambda Errors of any step, also those its retries absorbed): see the "
                "function's ERROR logs; `tidemark status` shows what is waiting",
            ),
        ]
        alarms.append(self._efs_throughput_alarm())
        if self._pipeline is not None:
            alarms.append(
                self._alarm(
                    "AggregationFailures",
                    failed_or_timed_out(self._pipeline),
                    "an aggregation job run failed or timed out (its hours stay dirty and are retried)",
                )
            )
        return alarms

    def _efs_metric(self, name: str, statistic: str, label: str) -> cw.Metric:
        return cw.Metric(
            namespace="AWS/EFS",
            metric_name=name,
            dimensions_map={"FileSystemId": self._file_system.file_system_id},
            statistic=statistic,
            period=PERIOD,
            label=label,
        )

    def efs_throughput_used(self) -> cw.MathExpression:
        """EFS throughput used, in bytes/s: ``MeteredIOBytes`` (what the throughput limit counts)
        summed over the period, per second."""
        return cw.MathExpression(
            expression="metered / PERIOD(metered)",
            using_metrics={"metered": self._efs_metric("MeteredIOBytes", "Sum", "metered I/O bytes")},
            label="throughput used (bytes/s)",
            period=PERIOD,
        )

    def efs_throughput_permitted(self) -> cw.Metric:
        """What the file system may use (bytes/s): provisioned, or Elastic's limit."""
        return self._efs_metric("PermittedThroughput", "Average", "permitted throughput (bytes/s)")

    def _efs_throughput_alarm(self) -> cw.Alarm:
        """Throughput used above ``EFS_THROUGHPUT_ALARM_PERCENT`` of ``PermittedThroughput`` for
        ``EFS_THROUGHPUT_ALARM_PERIODS`` periods: with ``staging.throughput: provisioned`` the
        file system is about to throttle the archiver (raise ``provisioned_mibps`` or go Elastic)."""
        percent = cw.MathExpression(
            expression="100 * (metered / PERIOD(metered)) / permitted",
            using_metrics={
                "metered": self._efs_metric("MeteredIOBytes", "Sum", "metered I/O bytes"),
                "permitted": self._efs_metric("PermittedThroughput", "Average", "permitted throughput"),
            },
            label="EFS throughput used (% of permitted)",
            period=PERIOD,
        )
        construct_id = "EfsThroughput"
        alarm = cw.Alarm(
            self,
            construct_id,
            alarm_name=self._alarm_name(construct_id),
            metric=percent,
            threshold=EFS_THROUGHPUT_ALARM_PERCENT,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=EFS_THROUGHPUT_ALARM_PERIODS,
            datapoints_to_alarm=EFS_THROUGHPUT_ALARM_PERIODS,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            alarm_description=(
                f"the staging file system used over {EFS_THROUGHPUT_ALARM_PERCENT:g}% of its permitted throughput "
                f"for {EFS_THROUGHPUT_ALARM_PERIODS} periods: it will throttle the archiver -- raise "
                "staging.provisioned_mibps or set staging.throughput: elastic (`tidemark cost` sizes it)"
            ),
        )
        alarm.add_alarm_action(self._action)
        return alarm

    def _sweeper_errors(self) -> cw.MathExpression:
        """Lambda ``Errors`` of every sweeper function, summed (each filled with 0)."""
        using = {f"e{index}": fn.metric_errors(period=PERIOD) for index, fn in enumerate(self._sweeper_functions)}
        return cw.MathExpression(
            expression=" + ".join(f"FILL({name}, 0)" for name in using),
            using_metrics=using,
            label="sweeper function errors",
            period=PERIOD,
        )

    # -- dashboard -------------------------------------------------------------------------

    def _dashboard(self, stream: StreamConfig, fn: lambda_.IFunction) -> cw.Dashboard:
        name = stream.name

        def graph(title: str, metrics: list[cw.IMetric], **kwargs: object) -> cw.GraphWidget:
            return cw.GraphWidget(title=title, left=metrics, width=8, height=6, **kwargs)  # type: ignore[arg-type]

        def archiver(metric: str, label: str, statistic: str = "Sum") -> cw.Metric:
            return tidemark_metric(metric, ARCHIVER, stream=name, statistic=statistic).with_(label=label)

        def sweeper(metric: str, label: str) -> cw.Metric:
            return tidemark_metric(metric, SWEEPER, stream=name).with_(label=label)

        dashboard = cw.Dashboard(
            self,
            f"Dashboard-{name}",
            dashboard_name=dashboard_name(Stack.of(self).stack_name, Stack.of(self).region, name),
            default_interval=Duration.hours(6),
        )
        dashboard.add_widgets(
            cw.AlarmStatusWidget(
                title="Alarms (runbook: README 'Runbook')",
                alarms=[*self.alarms[name], *self.shared_alarms],
                width=24,
                height=4,
            )
        )
        dashboard.add_widgets(
            graph("Records in", [archiver("RecordsIn", "records in")]),
            graph("Duplicates dropped", [archiver("DuplicatesDropped", "duplicates dropped")]),
            graph("Dead-lettered", [archiver("DeadLettered", "dead-lettered")]),
        )
        dashboard.add_widgets(
            graph("Bytes staged", [archiver("BytesStaged", "bytes staged")]),
            graph(
                "Objects committed",
                [archiver("ObjectsCommitted", "by the archiver"), sweeper("SweeperObjectsCommitted", "by the sweeper")],
            ),
            graph(
                "Flush latency",
                [
                    archiver("FlushLatency", "p50", statistic="p50"),
                    archiver("FlushLatency", "p99", statistic="p99"),
                ],
            ),
        )
        kinesis, queue = self._kinesis.get(name), self._rabbitmq.get(name)
        if kinesis is not None:
            lag = graph(
                "ESM iterator age",
                [fn.metric("IteratorAge", statistic="Maximum", period=PERIOD, label="max iterator age (ms)")],
            )
        elif queue is not None:
            # An Amazon MQ mapping publishes no lag: the broker's depth of the queue stands in for it.
            lag = graph(
                "Queue depth",
                [
                    queue.queue_metric("MessageCount", statistic="Maximum", period=PERIOD, label="messages (max)"),
                    queue.queue_metric("MessageReadyCount", statistic="Maximum", period=PERIOD, label="ready"),
                    queue.queue_metric(
                        "MessageUnacknowledgedCount",
                        statistic="Maximum",
                        period=PERIOD,
                        label="unacknowledged (delivered, batch not done)",
                    ),
                ],
            )
        else:
            lag = graph("ESM offset lag", [fn.metric("OffsetLag", statistic="Maximum", period=PERIOD, label="max lag")])
        dashboard.add_widgets(
            lag,
            graph(
                "Archiver errors and throttles",
                [
                    fn.metric_errors(period=PERIOD, label="errors"),
                    fn.metric_throttles(period=PERIOD, label="throttles"),
                ],
            ),
            graph(
                "Archiver duration",
                [
                    fn.metric_duration(period=PERIOD, statistic="p50", label="p50"),
                    fn.metric_duration(period=PERIOD, statistic="p99", label="p99"),
                ],
            ),
        )
        dashboard.add_widgets(
            graph(
                "Sweeper recoveries",
                [
                    sweeper("SweeperFlushesResumed", "sealed flushes resumed"),
                    sweeper("SweeperGarbageDeleted", "orphan segments deleted"),
                ],
            ),
            graph(
                "Reconciliation findings",
                [tidemark_metric("ReconciliationFindings", SWEEPER).with_(label="findings (all streams)")],
            ),
            graph(
                "EFS storage bytes",
                [
                    cw.Metric(
                        namespace="AWS/EFS",
                        metric_name="StorageBytes",
                        dimensions_map={"FileSystemId": self._file_system.file_system_id, "StorageClass": "Total"},
                        statistic="Average",
                        period=Duration.minutes(15),
                        label="staged bytes",
                    )
                ],
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="EFS throughput: used vs permitted (bytes/s)",
                left=[self.efs_throughput_used(), self.efs_throughput_permitted()],
                width=24,
                height=6,
            )
        )
        last_row = [
            graph(
                "Quarantines, flush errors and position resets",
                [
                    archiver_and_sweeper("FlushesQuarantined", name, label="flushes quarantined"),
                    archiver_and_sweeper("FlushErrors", name, label="flush errors"),
                    archiver("PositionResets", "position resets"),
                ],
            ),
            graph(
                "Ledger conflicts and hours waiting",
                [
                    archiver("LedgerConflicts", "ledger conflicts (concurrent writers)"),
                    tidemark_metric("HoursWaiting", SWEEPER, statistic="Maximum").with_(
                        label="event hours waiting to complete (all streams)"
                    ),
                ],
            ),
            graph("Spark job outcomes", self._job_metrics(name)),
        ]
        if kinesis is not None:
            # The archiver's own throttles are graphed with its errors above.
            last_row.append(graph("Kinesis read throttles", [kinesis.read_throttles(PERIOD)]))
        if queue is not None:
            # The queue must be the mapping's alone: another consumer takes messages the archive
            # then never sees.
            last_row.append(
                graph(
                    "Queue consumers",
                    [queue.queue_metric("ConsumerCount", statistic="Maximum", period=PERIOD, label="consumers (max)")],
                )
            )
        dashboard.add_widgets(*last_row)
        return dashboard

    def _job_metrics(self, stream: str) -> list[cw.IMetric]:
        if self._pipeline is None:
            return [self._sweeper.metric_succeeded(period=PERIOD, label="sweeper runs (no aggregations configured)")]
        metrics: list[cw.IMetric] = [
            self._pipeline.metric_succeeded(period=PERIOD, label="scheduled runs succeeded"),
            self._pipeline.metric_failed(period=PERIOD, label="scheduled runs failed"),
        ]
        if stream in self._aggregation_logs:
            metrics += [
                tidemark_metric(HOURS_AGGREGATED, AGGREGATION, stream=stream).with_(label="hours aggregated"),
                tidemark_metric(HOURS_FAILED, AGGREGATION, stream=stream).with_(label="hours failed (left dirty)"),
            ]
        if self._emr_application_id is not None:
            for metric, label in (("SuccessJobs", "job runs succeeded"), ("FailedJobs", "job runs failed")):
                metrics.append(
                    cw.Metric(
                        namespace="AWS/EMRServerless",
                        metric_name=metric,
                        dimensions_map={"ApplicationId": self._emr_application_id},
                        statistic="Sum",
                        period=PERIOD,
                        label=label,
                    )
                )
        return metrics
