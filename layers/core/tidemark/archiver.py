"""The archiver use case: one ESM event in, every partition batch archived exactly once."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tidemark.config.model import StreamConfig
from tidemark.exceptions import PositionResetError, UnknownTopicError
from tidemark.records.events import parse_event
from tidemark.records.model import PartitionBatch
from tidemark.runtime import Runtime
from tidemark.writer.outcome import BatchOutcome


class PositionResetsError(PositionResetError):
    """One or more partitions of the event were refused (see ``PositionResetError``); every
    other partition of the event was archived before this was raised."""

    def __init__(self, refused: list[PositionResetError], outcomes: dict[str, BatchOutcome]) -> None:
        first = refused[0]
        super().__init__(
            "; ".join(str(error) for error in refused)
            + " -- refused until an operator starts a new epoch: tidemark epoch start (see README, 'Epochs')",
            stream=first.stream,
            partition=first.partition,
            kind=first.kind,
            offset=first.offset,
        )
        self.refused = refused
        self.outcomes = outcomes


logger = logging.getLogger(__name__)


class Archiver:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def handle(self, event: Any) -> dict[str, BatchOutcome]:
        """Archive every partition batch of the event, the partitions concurrently.

        Partitions share nothing a write depends on (each has its own ledger item and staging
        directory), and most of a partition's time is spent waiting: fsyncs, the ledger's
        round trip, uploads. Every partition runs to its end before this returns or raises, so
        no write outlives the invocation. Any exception fails the whole invocation, so the ESM
        redelivers the whole batch; partitions that were archived are then dropped as duplicates
        (invariant 1). A partition whose positions went backwards (``PositionResetError``) does
        not stop the others: they are archived, then ``PositionResetsError`` fails the invocation.
        """
        batches = parse_event(event)
        config = self.runtime.config
        for batch in batches:  # check every topic before touching anything
            if config.stream_for_topic(batch.topic, batch.kind) is None:
                known = ", ".join(f"{stream.source.kind} {stream.source.topic}" for stream in config.streams)
                what = "Kinesis stream" if batch.kind == "kinesis" else "topic"
                raise UnknownTopicError(f"no stream archives {what} {batch.topic!r} (configured sources: {known})")
        outcomes: dict[str, BatchOutcome] = {}
        archived: dict[str, list[dict[str, Any]]] = {}
        refused: list[PositionResetError] = []
        for batch, (stream, result) in zip(batches, self._archive_all(batches), strict=True):
            if isinstance(result, PositionResetError):
                logger.critical(
                    "positions went back in a way no redelivery explains: batch refused, nothing dropped",
                    extra={
                        "stream": stream.name,
                        "partition": batch.partition,
                        "kind": result.kind,
                        "error": str(result),
                    },
                )
                refused.append(result)
                continue
            summary: dict[str, Any] = {"partition": batch.partition}
            if batch.records[0].offset >= 0:  # a queue's messages are numbered by the writer
                summary.update(first_offset=batch.records[0].offset, last_offset=batch.records[-1].offset)
            archived.setdefault(stream.name, []).append(
                {**summary, "staged": result.staged, "duplicates": result.duplicates}
            )
            outcomes.setdefault(stream.name, BatchOutcome()).merge(result)
        for name, partitions in archived.items():  # one line per stream and invocation, whatever the partitions
            logger.info("batch archived", extra={"stream": name, "partitions": partitions, **outcomes[name].summary()})
        if refused:
            raise PositionResetsError(refused, outcomes)
        return outcomes

    def _archive(self, batch: PartitionBatch) -> tuple[StreamConfig, BatchOutcome | PositionResetError]:
        stream = self.runtime.config.stream_for_topic(batch.topic, batch.kind)
        assert stream is not None
        writer = self.runtime.writer(stream, batch.partition)
        try:
            return stream, writer.write(batch.records, source=batch.source)
        except PositionResetError as exc:
            return stream, exc

    def _archive_all(
        self, batches: list[PartitionBatch]
    ) -> list[tuple[StreamConfig, BatchOutcome | PositionResetError]]:
        """Each batch's outcome, in order; the first failure is raised once every batch is done."""
        if len(batches) < 2:
            return [self._archive(batch) for batch in batches]
        results = []
        failure: BaseException | None = None
        for future in [_pool().submit(self._archive, batch) for batch in batches]:
            try:
                results.append(future.result())
            except BaseException as exc:  # noqa: BLE001 -- re-raised below, after every partition ended
                failure = failure or exc
        if failure is not None:
            raise failure
        return results


PARTITION_THREADS = 8  # partitions of one event archived at once
_partition_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _partition_pool
    with _pool_lock:
        if _partition_pool is None:
            _partition_pool = ThreadPoolExecutor(max_workers=PARTITION_THREADS, thread_name_prefix="tidemark-partition")
        return _partition_pool
