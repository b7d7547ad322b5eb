"""The archiver use case: one ESM event in, every partition batch archived exactly once."""

from __future__ import annotations

import logging
from typing import Any

from tidemark.exceptions import PositionResetError, UnknownTopicError
from tidemark.records.events import parse_event
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
        """Archive every partition batch of the event, one after the other.

        Any exception fails the whole invocation, so the ESM redelivers the whole batch;
        partitions that were already archived are then dropped as duplicates (invariant 1). A
        partition whose positions went backwards (``PositionResetError``) does not stop the
        others: they are archived first, then ``PositionResetsError`` fails the invocation.
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
        for batch in batches:
            stream = config.stream_for_topic(batch.topic, batch.kind)
            assert stream is not None
            writer = self.runtime.writer(stream, batch.partition)
            try:
                result = writer.write(batch.records, source=batch.source)
            except PositionResetError as exc:
                logger.critical(
                    "positions went back in a way no redelivery explains: batch refused, nothing dropped",
                    extra={"stream": stream.name, "partition": batch.partition, "kind": exc.kind, "error": str(exc)},
                )
                refused.append(exc)
                continue
            archived.setdefault(stream.name, []).append(
                {
                    "partition": batch.partition,
                    "first_offset": batch.records[0].offset,
                    "last_offset": batch.records[-1].offset,
                    "staged": result.staged,
                    "duplicates": result.duplicates,
                }
            )
            outcomes.setdefault(stream.name, BatchOutcome()).merge(result)
        for name, partitions in archived.items():  # one line per stream and invocation, whatever the partitions
            logger.info("batch archived", extra={"stream": name, "partitions": partitions, **outcomes[name].summary()})
        if refused:
            raise PositionResetsError(refused, outcomes)
        return outcomes
