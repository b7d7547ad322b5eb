"""Archiver Lambda: an MSK, self-managed Kafka or Kinesis event source mapping delivers batches here.

Thin adapter: parse and archive through the core, emit metrics, shape the response. Raising
fails the invocation, the ESM retries the whole batch, and the ledger drops what was already
staged; returning lets the ESM commit the batch's offsets (invariant 6).
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from tidemark.archiver import Archiver, PositionResetsError
from tidemark.runtime import Runtime
from tidemark.writer.outcome import BatchOutcome

logger = Logger(service="tidemark-archiver")
metrics = Metrics(namespace="Tidemark", service="tidemark-archiver")
tracer = Tracer(service="tidemark-archiver")
copy_config_to_registered_loggers(source_logger=logger, include={"tidemark"})

# Built at cold start: a wrong config or a missing setting fails the init, naming the field.
ARCHIVER = Archiver(Runtime.from_env())
# What the cold start built lives as long as the container: moved out of the cyclic garbage
# collector's way, its full collections scan only what invocations allocate.
gc.freeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """A batch allocates a few objects per record, nearly all freed by reference counting as soon
    as their segment is written; the cyclic collector would scan them a dozen times per batch.
    It is paused for the batch and collects as usual right after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def emit_metrics(stream: str, outcome: BatchOutcome) -> None:
    """One EMF document per stream, dimensioned by stream (flushes counted per rotation reason
    as ``Flushes_<reason>``, as the sweeper's ``SweeperFlushes_<reason>``)."""
    metrics.add_dimension(name="stream", value=stream)
    metrics.add_metric(name="RecordsIn", unit=MetricUnit.Count, value=outcome.records_in)
    metrics.add_metric(name="DuplicatesDropped", unit=MetricUnit.Count, value=outcome.duplicates)
    metrics.add_metric(name="BytesStaged", unit=MetricUnit.Bytes, value=outcome.bytes_staged)
    metrics.add_metric(name="DeadLettered", unit=MetricUnit.Count, value=sum(outcome.dead_lettered.values()))
    metrics.add_metric(name="ObjectsCommitted", unit=MetricUnit.Count, value=len(outcome.flushes))
    metrics.add_metric(name="FlushErrors", unit=MetricUnit.Count, value=outcome.flush_errors)
    metrics.add_metric(name="FlushesQuarantined", unit=MetricUnit.Count, value=outcome.quarantined)
    metrics.add_metric(name="LedgerConflicts", unit=MetricUnit.Count, value=outcome.conflicts)
    metrics.add_metric(name="LedgerChunks", unit=MetricUnit.Count, value=outcome.chunks)
    metrics.add_metric(name="ObjectsAdopted", unit=MetricUnit.Count, value=outcome.adopted_objects)
    for flush in outcome.flushes:
        metrics.add_metric(name="FlushLatency", unit=MetricUnit.Milliseconds, value=flush.latency_ms)
    for reason, count in sorted(Counter(flush.reason for flush in outcome.flushes).items()):
        metrics.add_metric(name=f"Flushes_{reason}", unit=MetricUnit.Count, value=count)
    if outcome.dead_lettered:
        metrics.add_metadata(key="dead_letter_reasons", value=dict(outcome.dead_lettered))
    metrics.flush_metrics()


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        with collector_paused():
            outcomes = ARCHIVER.handle(event)
    except PositionResetsError as refused:
        # The other partitions' work is done and counted; the refused ones alarm (PositionResets).
        for stream, outcome in refused.outcomes.items():
            emit_metrics(stream, outcome)
        for stream, count in sorted(Counter(error.stream for error in refused.refused).items()):
            metrics.add_dimension(name="stream", value=stream)
            metrics.add_metric(name="PositionResets", unit=MetricUnit.Count, value=count)  # refused partitions
            metrics.flush_metrics()
        raise
    for stream, outcome in outcomes.items():
        emit_metrics(stream, outcome)
    return {"status": "ok", "streams": {stream: outcome.summary() for stream, outcome in outcomes.items()}}
