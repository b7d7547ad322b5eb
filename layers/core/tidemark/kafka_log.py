"""Reading a Kafka topic's log itself, for the operator commands (``audit``, ``status``,
``rearchive``, ``replay``).

Kafka leaves offsets without a record (transaction markers, records compacted away), and some
brokers report watermarks loosely (the embedded one does), so every answer here comes from
reading the records, not from the watermarks alone: how many records a range holds, where a
partition really ends, and the records of a range themselves. An offset below the log's start
(retention, deletion) or past its end (a recreated topic) is not retained: ``None`` from the
counting questions, ``NotRetainedError`` from ``records``.

confluent-kafka is imported only here (the ``demo`` extra; not in the Lambda layer).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

from tidemark.exceptions import NotRetainedError, SourceUnavailableError
from tidemark.records.model import Headers, Record
from tidemark.sources import PartitionId

#: how long the first answer of a read may take (a connection, SASL/IAM authentication)
FIRST_S = 30.0
#: how long a read may then go without a message before the partition's end counts as reached
IDLE_S = 5.0


class KafkaLog:
    def __init__(self, bootstrap_servers: str, topic: str, *, settings: dict[str, Any] | None = None) -> None:
        try:
            from confluent_kafka import Consumer
        except ImportError:  # pragma: no cover -- the demo extra brings it
            raise SourceUnavailableError(
                "--bootstrap-servers needs confluent-kafka (pip install 'tidemark[demo]')"
            ) from None
        self.topic = topic
        self._consumer = client_or_error(
            Consumer,
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": "tidemark-operator",  # never subscribes or commits: offsets are assigned
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",  # below the log start: not retained, said so
                # A partition's end is known from an empty fetch: answer it in 50 ms, not the
                # default 500 (every question here reads to the end at least once).
                "fetch.wait.max.ms": 50,
                **(settings or {}),
            },
        )

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> KafkaLog:
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

    def records(self, partition: PartitionId, first: int, last: int) -> Iterator[Record]:
        """The records the log holds at offsets ``first..last`` of ``partition``, in order (offsets
        without a record are skipped, as a consumer skips them). Raises ``NotRetainedError`` when
        the log no longer holds ``first``: below its start (retention, deletion), or past its end
        (a recreated or truncated topic)."""
        start, _end = self._watermarks(partition)
        if first < start:
            raise NotRetainedError(
                f"{self.topic}/{partition}: offset {first} is no longer retained (the log starts at {start})"
            )
        end = self.end_offset(partition)
        if first >= end:
            raise NotRetainedError(
                f"{self.topic}/{partition}: offset {first} is past the log's end ({end}): "
                "the topic was recreated or truncated"
            )
        yield from self._messages(partition, first, last)

    def _messages(self, partition: PartitionId, first: int, last: int) -> Iterator[Record]:
        for message in self.messages(partition, first):
            offset = message.offset()
            if message.error() is not None or offset > last:
                return
            if offset >= first:
                yield record_of(message)

    def start_offset(self, partition: PartitionId) -> int:
        """The partition's first retained offset (the low watermark: exact on every broker)."""
        return self._watermarks(partition)[0]

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
        partition's end."""
        for message in self.messages(partition, start):
            offset = message.offset()
            if message.error() is not None:
                yield (start if offset is None else offset), True
                return
            if offset is not None:
                yield offset, False

    def messages(self, partition: PartitionId, start: int) -> Iterator[Any]:
        """Every message (confluent-kafka's) from ``start`` on, and last the partition-EOF event at
        its end. The first answer may take ``FIRST_S`` (a connection, authentication); after it,
        ``IDLE_S`` without one is a stalled read: ``SourceUnavailableError``, never taken for the
        end (a short read would make a replay resume too early, or a rearchive see records as
        missing)."""
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
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise SourceUnavailableError(f"{self.topic}/{partition}: {error.str()}")
                yield message
                if error is not None:
                    return
        finally:
            self._consumer.unassign()
        if not answered:
            raise SourceUnavailableError(f"{self.topic}/{partition}: no answer within {FIRST_S:.0f}s")
        raise SourceUnavailableError(
            f"{self.topic}/{partition}: the read stalled ({IDLE_S:.0f}s without a message before the partition's end)"
        )


def record_of(message: Any) -> Record:
    """A consumed message as the record the event source mapping would have delivered: a null
    value (a tombstone) stays ``None``, never ``b""``, as the mapping's adapter reads it."""
    _kind, timestamp = message.timestamp()
    return Record(
        message.topic(),
        message.partition(),
        message.offset(),
        timestamp,
        message.value(),
        message.key(),
        headers_of(message),
    )


def headers_of(message: Any) -> Headers:
    """A consumed message's headers; a null header value stays ``None``."""
    return tuple((str(name), None if data is None else bytes(data)) for name, data in message.headers() or ())


def client_or_error(client: Any, settings: dict[str, Any]) -> Any:
    """A confluent-kafka client; a setting librdkafka refuses (an unknown property, a bad value)
    becomes a one-line ``SourceUnavailableError`` naming it."""
    from confluent_kafka import KafkaException

    try:
        return client(settings)
    except (KafkaException, ValueError, TypeError) as exc:
        reason = exc.args[0].str() if isinstance(exc, KafkaException) and exc.args else str(exc)
        raise SourceUnavailableError(f"Kafka client settings: {redacted(reason, settings)}") from None


#: settings whose values are secrets (librdkafka echoes a value it refuses: ``Invalid value "..."``)
SECRET_SETTING = re.compile(r"password|secret|jaas|token|credential|\.key\b|key\.pem|sasl\.username", re.IGNORECASE)


def redacted(reason: str, settings: dict[str, Any]) -> str:
    """``reason`` with the value of every secret setting (:data:`SECRET_SETTING`) replaced."""
    for name, value in settings.items():
        if SECRET_SETTING.search(name) and isinstance(value, str) and value:
            reason = reason.replace(value, "<redacted>")
    return reason
