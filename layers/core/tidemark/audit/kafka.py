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
from typing import Any

from tidemark.audit.auditor import SourceUnavailableError
from tidemark.sources import PartitionId

#: how long a read may go without a message before the partition's end counts as reached
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
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        if not isinstance(partition, int):
            raise SourceUnavailableError(f"partition {partition!r} is not a Kafka partition")
        try:
            start, end = self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=15)
        except KafkaException as exc:
            raise SourceUnavailableError(f"{self.topic}/{partition}: {exc}") from None
        end = max(start, end)
        self._consumer.assign([TopicPartition(self.topic, partition, end)])
        idle_since = time.monotonic()
        try:
            while time.monotonic() - idle_since < IDLE_S:
                message = self._consumer.poll(0.2)
                if message is None:
                    continue
                idle_since = time.monotonic()
                offset = message.offset()
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise SourceUnavailableError(f"{self.topic}/{partition}: {error.str()}")
                if offset is not None:
                    end = max(end, offset if error is not None else offset + 1)
                if error is not None:  # the end of the partition
                    return end
        finally:
            self._consumer.unassign()
        return end

    def records_between(self, partition: PartitionId, first: int, last: int) -> int | None:
        """Records the topic holds at offsets ``first..last`` of ``partition``; ``None`` if it does
        not hold ``first`` at all (below the log's start, or past its end)."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        if not isinstance(partition, int):
            raise SourceUnavailableError(f"partition {partition!r} is not a Kafka partition")
        try:  # also proves the brokers reachable: silence below means an empty range
            start, _end = self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=15)
        except KafkaException as exc:
            raise SourceUnavailableError(f"{self.topic}/{partition}: {exc}") from None
        if first < start:  # retention or deletion took it
            return None
        self._consumer.assign([TopicPartition(self.topic, partition, first)])
        found = 0
        idle_since = time.monotonic()
        try:
            while time.monotonic() - idle_since < IDLE_S:
                message = self._consumer.poll(0.2)
                if message is None:
                    continue
                idle_since = time.monotonic()
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        end = message.offset()
                        return None if found == 0 and end is not None and end <= first else found
                    if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        return None
                    raise SourceUnavailableError(f"{self.topic}/{partition}: {error.str()}")
                offset = message.offset()
                if offset is None:
                    continue
                if offset > last:
                    return found
                if offset >= first:
                    found += 1
        finally:
            self._consumer.unassign()
        return found or None  # nothing at or after ``first`` (a broker that reports no end)
