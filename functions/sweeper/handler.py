"""Sweeper Lambdas: the steps of the sweeper state machine, thin adapters over ``tidemark.sweeper``.

    ListPartitions -> Map(SweepPartition) -> Reconcile -> CompleteHours

One code asset, four handlers (``handler.list_partitions`` ...). Each step is idempotent and
safe to run next to live archiver invocations: everything that changes the ledger goes through
the same conditional writes as the archiver. A step that raises fails the execution's state,
and Step Functions retries it.

Each step has a time budget (``tidemark.sweeper.budget``): the state machine passes the
execution's start (``execution_started``, ``$$.Execution.StartTime``), and a step starts no new
unit of work past its share of the interval from it, nor past its own remaining time less a
margin; what it leaves is counted (``deferred``, and a ``...Deferred`` metric) and done by the
next execution. So one slow partition no longer keeps Reconcile and CompleteHours from running.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from tidemark.runtime import Runtime
from tidemark.sources import partition_of_text
from tidemark.sweeper.budget import COMPLETE_SHARE, RECONCILE_SHARE, SWEEP_SHARE, deadline_ms, started_ms
from tidemark.sweeper.completeness import CompletenessTracker
from tidemark.sweeper.discovery import discover_all
from tidemark.sweeper.reconcile import Reconciler
from tidemark.sweeper.sweep import sweep_partition as sweep

logger = Logger(service="tidemark-sweeper")
metrics = Metrics(namespace="Tidemark", service="tidemark-sweeper")
tracer = Tracer(service="tidemark-sweeper")
copy_config_to_registered_loggers(source_logger=logger, include={"tidemark"})

RUNTIME = Runtime.from_env()  # a wrong config or a missing setting fails the cold start


def deadline(event: dict[str, Any], context: LambdaContext, share: float) -> int:
    """When this step stops starting new work: ``share`` of the interval after the execution
    started, and never later than this invocation's own timeout allows."""
    return deadline_ms(
        RUNTIME.clock.now_ms(),
        context.get_remaining_time_in_millis(),
        execution_started_ms=started_ms(event),
        interval_ms=RUNTIME.config.sweeper.interval_ms,
        share=share,
    )


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def list_partitions(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Every (stream, partition) with staging or ever seen: the Map state's items."""
    refs = discover_all(RUNTIME)
    logger.info("partitions to sweep", extra={"count": len(refs)})
    return {"partitions": [ref.to_dict() for ref in refs]}


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def sweep_partition(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # A Kafka partition arrives as a number, a Kinesis shard id as a string.
    stream, partition = str(event["stream"]), partition_of_text(str(event["partition"]))
    outcome = sweep(RUNTIME, stream, partition, deadline_ms=deadline(event, context, SWEEP_SHARE))
    metrics.add_dimension(name="stream", value=stream)
    for reason, count in outcome.flushed.items():
        metrics.add_metric(name=f"SweeperFlushes_{reason}", unit=MetricUnit.Count, value=count)
    metrics.add_metric(name="SweeperObjectsCommitted", unit=MetricUnit.Count, value=sum(outcome.flushed.values()))
    metrics.add_metric(name="SweeperFlushesResumed", unit=MetricUnit.Count, value=outcome.resumed)
    metrics.add_metric(name="SweeperGarbageDeleted", unit=MetricUnit.Count, value=outcome.garbage_deleted)
    metrics.add_metric(name="SweeperFlushesDeferred", unit=MetricUnit.Count, value=outcome.deferred)
    metrics.add_metric(name="FlushErrors", unit=MetricUnit.Count, value=outcome.flush_errors)
    # Same name as the archiver's: the Quarantines alarm sums both services.
    metrics.add_metric(name="FlushesQuarantined", unit=MetricUnit.Count, value=outcome.quarantined)
    logger.info("partition swept", extra=outcome.summary())
    return outcome.summary()


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def reconcile(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = Reconciler(RUNTIME).run(RUNTIME.clock.now_ms(), deadline(event, context, RECONCILE_SHARE))
    counts = report.counts()
    for kind in ("missing_object", "size_mismatch", "checksum_mismatch", "unknown_object"):
        metrics.add_metric(name=f"ReconciliationFindings_{kind}", unit=MetricUnit.Count, value=counts.get(kind, 0))
    metrics.add_metric(name="ReconciliationFindings", unit=MetricUnit.Count, value=sum(counts.values()))
    metrics.add_metric(name="ReconciliationHoursDeferred", unit=MetricUnit.Count, value=report.hours_deferred)
    logger.info(
        "reconciled",
        extra={"hours": report.hours_checked, "deferred": report.hours_deferred, "findings": dict(counts)},
    )
    return report.summary()


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def complete_hours(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = CompletenessTracker(RUNTIME).run(RUNTIME.clock.now_ms(), deadline(event, context, COMPLETE_SHARE))
    metrics.add_metric(name="HoursCompleted", unit=MetricUnit.Count, value=len(report.completed))
    metrics.add_metric(name="HoursReopened", unit=MetricUnit.Count, value=len(report.reopened))
    metrics.add_metric(name="HoursWaiting", unit=MetricUnit.Count, value=len(report.waiting))
    metrics.add_metric(name="HoursDeferred", unit=MetricUnit.Count, value=report.deferred)
    return report.summary()
