"""The target topic on a Kafka cluster: its tail read back, records produced exactly once.

The producer is idempotent (``enable.idempotence``, ``acks=all``): retries never duplicate a
record, and what lands in a partition is always a prefix of what was sent to it -- which is what
the resume logic relies on (``tidemark.replay.tail``). Two settings close the remaining ways a
gap could open, where a later record lands and an earlier one does not: messages never time out
in the producer (``message.timeout.ms=0``: librdkafka lets a timed-out message leave a gap behind
later ones that were still sent), and ``enable.gapless.guarantee`` turns any other failure that
could leave one into a fatal error that stops the producer. Any failed delivery stops the replay
(``DeliveryError``); a rerun resumes. A broker that stays away makes the replay wait (Ctrl-C
stops it; a rerun resumes) rather than give up on records it may already have written.

Reads go through ``tidemark.kafka_log.KafkaLog`` (a consumer that never joins a group or
commits); where a partition ends comes from ``KafkaLog.end_offset``, which reads on from the
watermark (some brokers, the embedded one among them, report watermarks loosely).

confluent-kafka is imported only here and in ``tidemark.kafka_log`` (the ``demo`` extra).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from tidemark.exceptions import SourceUnavailableError
from tidemark.kafka_log import KafkaLog, client_or_error, headers_of
from tidemark.records.model import Headers
from tidemark.replay.exceptions import DeliveryError, ReplayError

#: records produced between two polls of the producer's delivery reports
POLL_EVERY = 1000

#: the readers': a fetch at a partition's end answers (EOF) after this long instead of librdkafka's
#: 500 ms (a fetch with records answers at once whatever it says): the tail is read to its end
#: several times per partition
READ_SETTINGS: dict[str, Any] = {"fetch.wait.max.ms": 10}

PRODUCER_SETTINGS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "enable.gapless.guarantee": True,
    "message.timeout.ms": 0,  # never: a timed-out message may leave a gap (see the module docstring)
    "linger.ms": 20,
    "delivery.report.only.error": True,  # a delivery report (a Python call) only for a failure
}


class _Expected(logging.Filter):
    """Drops librdkafka's warning that ``enable.gapless.guarantee`` is experimental: chosen on
    purpose, and a line on stderr at every start would break the CLI's one-line errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "enable.gapless.guarantee is experimental" not in record.getMessage()


#: where the producer's log lines go (a warning still reaches stderr through logging's last resort)
PRODUCER_LOG = logging.getLogger("tidemark.replay.producer")
PRODUCER_LOG.addFilter(_Expected())


class KafkaTarget:
    """``ReplayTarget`` on a Kafka topic. ``settings`` go to every client (security settings for
    a real cluster), ``producer_settings`` to the producer only."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        settings: dict[str, Any] | None = None,
        producer_settings: dict[str, Any] | None = None,
    ) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        common = {"bootstrap.servers": bootstrap_servers, **(settings or {})}
        self._log = KafkaLog(bootstrap_servers, topic, settings={**READ_SETTINGS, **(settings or {})})
        self._failure: str | None = None
        self._producer = client_or_error(
            Producer,
            {
                **common,
                **PRODUCER_SETTINGS,
                "logger": PRODUCER_LOG,
                **(producer_settings or {}),
                "error_cb": self._on_error,
            },
        )
        self._since_poll = 0

    def close(self) -> None:
        """Stop reading. Records still queued are not waited for: what landed is a prefix of what
        was sent, and a rerun resumes after it (``flush`` is how a run waits for its records)."""
        self._log.close()

    def __enter__(self) -> KafkaTarget:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- reading --------------------------------------------------------------------------------

    def partitions(self) -> int:
        try:
            return len(self._log.partitions())
        except SourceUnavailableError as exc:
            raise ReplayError(f"target {exc} (create the topic first)") from None

    def start_offset(self, partition: int) -> int:
        return self._log.start_offset(partition)

    def end_offset(self, partition: int) -> int:
        return self._log.end_offset(partition)

    def read(self, partition: int, first: int, end: int) -> Iterator[Headers]:
        if first >= end:
            return
        for message in self._log.messages(partition, first):
            offset = message.offset()
            if message.error() is not None or offset >= end:
                return
            if offset >= first:
                yield headers_of(message)
                if offset == end - 1:
                    return

    # -- producing ------------------------------------------------------------------------------

    def produce(
        self, partition: int, key: bytes | None, value: bytes | None, headers: Headers, timestamp_ms: int | None
    ) -> None:
        """Queue one record for ``partition`` (its CreateTime ``timestamp_ms``; ``None`` or not
        positive: now); a ``None`` value is produced as a null value (a tombstone), a ``None``
        header value as a null header value. A record the producer refuses outright (larger
        than ``message.max.bytes``) stops the replay there: ``DeliveryError``."""
        from confluent_kafka import KafkaException

        if self._failure is not None:
            raise DeliveryError(self._failure)
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    value,
                    key,
                    partition=partition,
                    headers=list(headers),
                    timestamp=timestamp_ms if timestamp_ms is not None and timestamp_ms > 0 else 0,
                    on_delivery=self._on_delivery,
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self._producer.poll(0.05)
                if self._failure is not None:
                    raise DeliveryError(self._failure) from None
            except KafkaException as exc:
                size = len(value or b"")
                raise DeliveryError(
                    f"{self.topic}/{partition}: a record of {size} bytes was refused ({exc.args[0].str()}): "
                    "the replay stopped there; fix the cause (e.g. the producer's message.max.bytes) and rerun"
                ) from None
        self._since_poll += 1
        if self._since_poll >= POLL_EVERY:
            self._since_poll = 0
            self._producer.poll(0)

    def flush(self) -> None:
        """Wait until every queued record is delivered; ``DeliveryError`` at the first that failed."""
        while self._producer.flush(1.0) > 0:
            if self._failure is not None:
                break
        if self._failure is not None:
            raise DeliveryError(self._failure)

    def _on_delivery(self, error: Any, message: Any) -> None:
        if error is not None and self._failure is None:
            self._failure = (
                f"{self.topic}/{message.partition()}: a record was not delivered ({error.str()}); "
                "the producer stopped there: rerun the same command to resume"
            )

    def _on_error(self, error: Any) -> None:
        if error.fatal() and self._failure is None:
            self._failure = f"{self.topic}: {error.str()}; the producer stopped: rerun the same command to resume"
