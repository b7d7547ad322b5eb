"""The archiver use case: one ESM event in, every partition batch archived exactly once."""

from __future__ import annotations

import logging
from typing import Any

from tidemark.exceptions import UnknownTopicError
from tidemark.records.kafka import parse_kafka_event
from tidemark.runtime import Runtime
from tidemark.writer.outcome import BatchOutcome

logger = logging.getLogger(__name__)


class Archiver:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def handle(self, event: Any) -> dict[str, BatchOutcome]:
        """Archive every partition batch of the event, one after the other.

        Any exception fails the whole invocation, so the ESM redelivers the whole batch;
        partitions that were already archived are then dropped as duplicates (invariant 1).
        """
        batches = parse_kafka_event(event)
        config = self.runtime.config
        for batch in batches:  # check every topic before touching anything
            if config.stream_for_topic(batch.topic) is None:
                known = ", ".join(stream.source.topic for stream in config.streams)
                raise UnknownTopicError(f"no stream archives topic {batch.topic!r} (configured topics: {known})")
        outcomes: dict[str, BatchOutcome] = {}
        for batch in batches:
            stream = config.stream_for_topic(batch.topic)
            assert stream is not None
            result = self.runtime.writer(stream, batch.partition).write(batch.records)
            logger.info(
                "partition batch archived",
                extra={
                    "stream": stream.name,
                    "partition": batch.partition,
                    "first_offset": batch.records[0].offset,
                    "last_offset": batch.records[-1].offset,
                    **result.summary(),
                },
            )
            outcomes.setdefault(stream.name, BatchOutcome()).merge(result)
        return outcomes
