"""The demo's workload: realistic JSON orders produced to a real Kafka topic.

Event times are spread over the last ``hours`` hours in produce order (with jitter), a share of
records arrives hours late, and a few are malformed (not JSON, no event time, an unreadable
event time). What each record should become -- its event-hour folder, or a dead letter -- is
worked out here from the values the generator chose, independently of the archiver, and tied to
the partition and offset the broker assigned (from the delivery reports). ``workload_avro`` turns
the same orders into Avro values for a schema registry (``tidemark demo --avro``);
``queue_workload`` makes them messages of a RabbitMQ queue, known by their message ids
(``tidemark demo --source rabbitmq``). A Kafka topic also gets a few tombstones among the orders
(``with_tombstones``: a null value deleting an earlier order's key, as a compacted topic or a
CDC connector has), which must be archived and replayed as null values; Kinesis and RabbitMQ
have no tombstones.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import orjson

from tidemark.embedded.kafka_clients import client_settings
from tidemark.exceptions import TidemarkError
from tidemark.records.model import Record, Schemas
from tidemark.verify import ExpectedMessage, ExpectedRecord, RecordMeta

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message

HOUR_MS = 3_600_000
MALFORMED_KINDS = ("not_json", "no_event_time", "bad_event_time")
PRODUCTS = [f"p-{n:03d}" for n in range(1, 41)]
CHANNELS = (b"web", b"app", b"store")
COUNTRIES = ("DE", "FR", "NL", "US", "JP", "BR")


class WorkloadError(TidemarkError):
    """The workload could not be produced (topic problems, undelivered records)."""


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    records: int = 50_000
    hours: int = 4
    late_share: float = 0.03
    malformed_share: float = 0.002
    seed: int = 7
    tombstone_share: float = 0.002  # Kafka: tombstones among the orders (``with_tombstones``)

    def __post_init__(self) -> None:
        if self.records < 1 or self.hours < 1:
            raise ValueError("records and hours must be at least 1")
        shares = (
            ("late_share", self.late_share),
            ("malformed_share", self.malformed_share),
            ("tombstone_share", self.tombstone_share),
        )
        for name, share in shares:
            if not 0 <= share <= 1:
                raise ValueError(f"{name} must be between 0 and 1, got {share}")


@dataclass(frozen=True, slots=True)
class Order:
    key: bytes
    value: bytes | None  # None: a tombstone (Kafka only)
    headers: list[tuple[str, str | bytes | None]]
    hour: str | None  # expected event-hour label, None: must be dead-lettered
    late: bool
    archived: bytes | None = None  # the value the archive must hold when not ``value`` (a registry decodes it)
    schemas: Schemas = ()  # the schema references the archive must keep (``--avro``: the value's id)
    timestamp_ms: int | None = None  # the record timestamp to produce with (None: the producer's clock)

    @property
    def tombstone(self) -> bool:
        return self.value is None

    @property
    def payload(self) -> bytes:
        """The value of an order that is no tombstone: what a Kinesis record, a queue message or
        an Avro order is made of (none of them can be a tombstone)."""
        if self.value is None:
            raise ValueError(f"key {self.key!r}: a tombstone has no value (only a Kafka topic holds them)")
        return self.value


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def generate(
    spec: WorkloadSpec, now_ms: int, timezone: str = "UTC", malformed_kinds: tuple[str, ...] = MALFORMED_KINDS
) -> Iterator[Order]:
    """The orders, as JSON values. ``malformed_kinds`` are the kinds the malformed records take
    in turn (a subset of ``MALFORMED_KINDS``; Avro orders cannot be ``not_json``)."""
    rng = random.Random(spec.seed)
    zone = ZoneInfo(timezone)
    span = spec.hours * HOUR_MS
    start = now_ms - span
    # "a few" malformed records even in small runs, at fixed positions spread over the run
    malformed_every = max(1, min(int(1 / spec.malformed_share) if spec.malformed_share else 0, spec.records // 3))
    for index in range(spec.records):
        event_ms = start + span * index // spec.records - rng.randint(0, 120_000)
        late = rng.random() < spec.late_share
        if late:
            event_ms -= rng.randint(2, 6) * HOUR_MS - rng.randint(0, HOUR_MS)
        customer = f"c-{rng.randint(1, 5_000):05d}"
        order = {
            "order_id": f"o-{spec.seed}-{index:08d}",
            "customer_id": customer,
            "product_id": rng.choice(PRODUCTS),
            "price": round(rng.uniform(2, 250), 2),
            "quantity": rng.randint(1, 5),
            "currency": "EUR",
            "country": COUNTRIES[zlib.crc32(customer.encode()) % len(COUNTRIES)],  # a customer's, no draw
            "created_at": _iso(event_ms),
        }
        hour: str | None = datetime.fromtimestamp(event_ms / 1000, zone).strftime("%Y-%m-%dT%H")
        value = orjson.dumps(order)
        if spec.malformed_share and index % malformed_every == malformed_every // 2:
            kind = malformed_kinds[(index // malformed_every) % len(malformed_kinds)]
            hour = None
            if kind == "not_json":
                value = f"order {order['order_id']} price={order['price']}".encode()
            elif kind == "no_event_time":
                value = orjson.dumps({k: v for k, v in order.items() if k != "created_at"})
            else:
                value = orjson.dumps({**order, "created_at": "yesterday"})
        headers: list[tuple[str, str | bytes | None]] = [("channel", rng.choice(CHANNELS)), ("schema", b"orders/v1")]
        yield Order(customer.encode(), value, headers, hour, late and hour is not None)


def with_tombstones(orders: list[Order], spec: WorkloadSpec, now_ms: int, timezone: str = "UTC") -> list[Order]:
    """``orders`` with about ``spec.tombstone_share`` tombstones among them (at least a few even in
    short runs, at fixed positions): each deletes the key of an order a little before it, with a
    null value, an ``op: d`` header and a null ``trace`` header value. A tombstone has no value to
    read an event time from: it is filed under the hour of its record timestamp, which it is
    produced with (the time of its place in the run), so its hour is known here."""
    every = max(2, min(round(1 / spec.tombstone_share), len(orders) // 3)) if spec.tombstone_share else 0
    if not every or len(orders) < 2:
        return list(orders)
    zone = ZoneInfo(timezone)
    span = spec.hours * HOUR_MS
    found: list[Order] = []
    for index, order in enumerate(orders):
        found.append(order)
        if index % every == every - 1:
            deleted = orders[max(0, index - every // 2)]
            stamp = now_ms - span + span * index // len(orders)
            hour = datetime.fromtimestamp(stamp / 1000, zone).strftime("%Y-%m-%dT%H")
            headers: list[tuple[str, str | bytes | None]] = [("op", b"d"), ("trace", None)]
            found.append(Order(deleted.key, None, headers, hour, late=False, timestamp_ms=stamp))
    return found


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 15.0) -> None:
    """Create ``topic``; an existing one must be empty (the report compares against what we produce)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(client_settings(bootstrap))
    metadata = admin.list_topics(timeout=timeout_s)
    if topic not in metadata.topics:
        future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise WorkloadError(f"cannot create topic {topic!r}: {exc}") from None
        return
    probe = Consumer(client_settings(bootstrap, **{"group.id": "tidemark-demo-probe"}))
    try:
        for partition in metadata.topics[topic].partitions:
            low, high = probe.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
            if high > low:
                raise WorkloadError(
                    f"topic {topic!r} already holds records; the demo needs an empty topic: "
                    "pass --topic with a new name"
                )
    finally:
        probe.close()


def recreate_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 15.0) -> None:
    """Delete ``topic`` and create it again, empty: its offsets start over at 0 (what an operator
    does to a topic by mistake, or to 'clean it up')."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(client_settings(bootstrap))
    try:
        admin.delete_topics([topic])[topic].result(timeout=timeout_s)
        deadline = time.monotonic() + timeout_s
        while topic in admin.list_topics(timeout=timeout_s).topics:
            if time.monotonic() > deadline:
                raise WorkloadError(f"topic {topic!r} still listed {timeout_s:.0f}s after its deletion")
            time.sleep(0.1)
        future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        raise WorkloadError(f"cannot recreate topic {topic!r}: {exc}") from None


def produce(
    bootstrap: str,
    topic: str,
    orders: Iterator[Order],
    *,
    on_progress: Callable[[int], None] | None = None,
    timeout_s: float = 120.0,
) -> list[ExpectedRecord]:
    """Produce every order; return what the archive must hold, keyed by the broker's offsets."""
    from confluent_kafka import Producer

    producer = Producer(client_settings(bootstrap, **{"linger.ms": 20, "acks": "all", "enable.idempotence": True}))
    expected: list[ExpectedRecord] = []
    failures: list[str] = []

    def delivered(order: Order) -> Callable[[KafkaError | None, Message], None]:
        def report(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                failures.append(error.str())
                return
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            headers = tuple(
                (name, data if isinstance(data, bytes) or data is None else data.encode())
                for name, data in order.headers
            )
            meta = RecordMeta(topic, order.key, headers, order.schemas)
            value = order.value if order.archived is None else order.archived
            expected.append(ExpectedRecord(partition, offset, value, order.hour, meta))

        return report

    sent = 0
    for order in orders:
        while True:
            try:
                producer.produce(
                    topic,
                    order.value,  # None: a tombstone
                    order.key,
                    headers=order.headers,
                    on_delivery=delivered(order),
                    timestamp=order.timestamp_ms or 0,  # 0: the producer's clock
                )
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
            if on_progress is not None:
                on_progress(sent)
    remaining = producer.flush(timeout_s)
    if on_progress is not None:
        on_progress(sent)
    if remaining or failures:
        raise WorkloadError(
            f"{remaining + len(failures)} of {sent} records were not delivered to {topic!r}"
            + (f": {failures[0]}" if failures else "")
        )
    return expected


# -- a queue's workload (``tidemark demo --source rabbitmq``) ------------------------------------

#: the AMQP properties every order is published with (besides its id and timestamp)
QUEUE_CONTENT_TYPE = "application/json"
PERSISTENT = 2  # AMQP delivery mode: written to disk by the broker


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """An order as a queue message: what the demo's publisher sends, in its order."""

    order: Order
    message_id: str | None  # ``m-<seed>-<n>``; None: published without one (dead-lettered missing_message_id)
    retry: bool = False  # a publisher's retry: the same message (same id, same body) published again

    @property
    def headers(self) -> dict[str, str | None]:
        """The AMQP headers: the order's headers, as (long) strings."""
        return {
            name: value.decode("utf-8") if isinstance(value, bytes) else value for name, value in self.order.headers
        }

    def archived_headers(self) -> tuple[tuple[str, bytes], ...]:
        """The headers the archive must keep for the message: its AMQP headers, then the
        properties it was published with as ``amqp.<property>`` (the adapter's order)."""
        headers = tuple((name, b"null" if value is None else value.encode()) for name, value in self.headers.items())
        return (
            *headers,
            ("amqp.content_type", QUEUE_CONTENT_TYPE.encode()),
            ("amqp.delivery_mode", str(PERSISTENT).encode()),
        )


@dataclass
class QueueWorkload:
    """The messages to publish (retries included, in publish order) and what the archive must
    hold: one message per distinct id (``verify_messages``)."""

    messages: list[QueueMessage]
    expected: list[ExpectedMessage]

    @property
    def retries(self) -> int:
        return sum(message.retry for message in self.messages)

    @property
    def without_id(self) -> int:
        return sum(message.message_id is None and not message.retry for message in self.messages)


def _every(share: float, count: int, at_least: int) -> int | None:
    """A fixed stride giving about ``share`` of ``count``, and at least ``at_least`` of them in short runs."""
    if share <= 0:
        return None
    return max(2, min(round(1 / share), count // at_least))


def queue_workload(
    orders: list[Order],
    *,
    queue: str,
    seed: int,
    dedupe_id: str = "message_id",
    retry_share: float = 0.01,
    missing_id_share: float = 0.001,
    max_retry_gap: int = 200,
) -> QueueWorkload:
    """The orders as queue messages with ids ``m-<seed>-<n>``. About ``retry_share`` of them are
    published twice (a publisher's retry after a lost confirm: the same id and body again, up to
    ``max_retry_gap`` messages later) and about ``missing_id_share`` have no message id; at least
    a few of each even in short runs. ``dedupe_id`` is the stream's ``dedupe.id``: what the
    expected messages are known by (a message without that id is dead-lettered
    ``missing_message_id``, known by its body's digest)."""
    from tidemark.dedupe.ids import CONTENT_SHA256, digest, message_id

    rng = random.Random(seed)
    retry_every = _every(retry_share, len(orders), 5)
    missing_every = _every(missing_id_share, len(orders), 4)
    sequence: list[QueueMessage] = []
    later: dict[int, list[QueueMessage]] = {}  # publish position -> retries published there
    expected: dict[bytes, ExpectedMessage] = {}
    for index, order in enumerate(orders):
        missing = missing_every is not None and index % missing_every == missing_every - 1
        message = QueueMessage(order, None if missing else f"m-{seed}-{index}")
        sequence.append(message)
        sequence.extend(later.pop(index, ()))
        if retry_every is not None and index % retry_every == 1:
            at = min(index + rng.randint(1, max_retry_gap), len(orders) - 1)
            later.setdefault(at, []).append(QueueMessage(order, message.message_id, retry=True))
        headers = message.archived_headers()
        key = None if message.message_id is None else message.message_id.encode()
        shaped = Record("", 0, 0, 0, order.payload, key, headers)
        found = message_id(shaped, dedupe_id)
        ident = found if found is not None and dedupe_id != CONTENT_SHA256 else digest(shaped, dedupe_id)
        hour = order.hour if found is not None else None
        expected.setdefault(ident, ExpectedMessage(ident, order.payload, hour, RecordMeta(queue, key, headers)))
    for retries in later.values():  # none left: a retry goes at most to the last position
        sequence.extend(retries)
    return QueueWorkload(sequence, list(expected.values()))
