"""Ask a Kafka topic whether it holds records in a gap of the archive (``audit --bootstrap-servers``).

Kafka leaves offsets without a record (transaction markers, records compacted away), so a gap
in the archive is only a loss where the log still holds records in it. The probe reads the
range itself from the gap's first offset until past its last or the end of the partition,
counting records rather than trusting the high watermark (some brokers report it loosely).
An offset below the log's start (retention, deletion) or past its end (a recreated topic)
cannot be told either way: ``None``.

confluent-kafka is imported only here (the ``demo`` extra; not in the Lambda layer).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from tidemark.audit.auditor import SourceUnavailableError
from tidemark.sources import PartitionId

#: how long the first answer of a read may take (a connection, SASL/IAM authentication)
FIRST_S = 30.0
#: how long a read may then go without a message before the partition's end counts as reached
IDLE_S = 5.0


class KafkaProbe:
    def __init__(self, bootstrap_servers: str, topic: str, *, settings: dict[str, Any] | None = None) -> None:
        try:
            from confluent_kafka import Consumer
        except ImportError:  # pragma: no cover -- the demo extra brings it
            raise SourceUnavailableError(
                "--bootstrap-servers needs confluent-kafka (pip install 'tidemark[demo]')"
            ) from None
        self.topic = topic
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": "tidemark-audit",  # never subscribes or commits: offsets are assigned
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",  # below the log start: not retained, said so
                **(settings or {}),
            }
        )

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> KafkaProbe:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def partitions(self) -> list[int]:
        """The topic's partitions, from the cluster's metadata."""
        from confluent_kafka import KafkaException

        try:
            metadata = self._consumer.list_topics(self.topic, timeout=15).topics.get(self.topic)
        except KafkaException as exc:
            raise SourceUnavailableError(f"{self.topic}: {exc}") from None
        if metadata is None or metadata.error is not None:
            raise SourceUnavailableError(f"topic {self.topic!r}: {metadata.error if metadata else 'not found'}")
        return sorted(metadata.partitions)

    def end_offset(self, partition: PartitionId) -> int:
        """The offset the partition's next record will get (``tidemark status``'s lag): the high
        watermark, confirmed by reading on from it to the partition's end (a broker that reports
        the watermark loosely is corrected by the records that follow it)."""
        start, end = self._watermarks(partition)
        end = max(start, end)
        for offset, at_end in self._read(partition, end):
            if at_end:
                return max(end, offset)
            end = max(end, offset + 1)
        return end

    def records_between(self, partition: PartitionId, first: int, last: int) -> int | None:
        """Records the topic holds at offsets ``first..last`` of ``partition``; ``None`` if it does
        not hold ``first`` at all (below the log's start, or past its end)."""
        start, _end = self._watermarks(partition)
        if first < start or first >= self.end_offset(partition):  # retention took it, or a recreated topic
            return None
        found = 0
        for offset, at_end in self._read(partition, first):
            if at_end or offset > last:
                break
            if offset >= first:
                found += 1
        return found

    def _watermarks(self, partition: PartitionId) -> tuple[int, int]:
        from confluent_kafka import KafkaException, TopicPartition

        if not isinstance(partition, int):
            raise SourceUnavailableError(f"partition {partition!r} is not a Kafka partition")
        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=15)
        except KafkaException as exc:
            raise SourceUnavailableError(f"{self.topic}/{partition}: {exc}") from None
        return int(low), int(high)

    def _read(self, partition: PartitionId, start: int) -> Iterator[tuple[int, bool]]:
        """``(offset, False)`` per record from ``start`` on, then ``(end offset, True)`` at the
        partition's end. The first answer may take ``FIRST_S`` (a connection, authentication);
        after it, ``IDLE_S`` without one ends the read as if at the end."""
        from confluent_kafka import KafkaError, TopicPartition

        assert isinstance(partition, int)  # _watermarks refused anything else first
        self._consumer.assign([TopicPartition(self.topic, partition, start)])
        answered, since = False, time.monotonic()
        try:
            while time.monotonic() - since < (IDLE_S if answered else FIRST_S):
                message = self._consumer.poll(0.2)
                if message is None:
                    continue
                answered, since = True, time.monotonic()
                error, offset = message.error(), message.offset()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise SourceUnavailableError(f"{self.topic}/{partition}: {error.str()}")
                    yield (start if offset is None else offset), True
                    return
                if offset is not None:
                    yield offset, False
        finally:
            self._consumer.unassign()
        if not answered:
            raise SourceUnavailableError(f"{self.topic}/{partition}: no answer within {FIRST_S:.0f}s")
