"""Small helpers for tests that talk to the embedded broker."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidemark.embedded.kafka_clients import client_settings
from tidemark.records.model import Record


def new_topic(bootstrap: str, partitions: int, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(client_settings(bootstrap))
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=15)
    return name


def produce_round_robin(bootstrap: str, topic: str, count: int, partitions: int, size: int = 60) -> list[Record]:
    """Produce ``count`` records spread over partitions; returns them with the broker's offsets."""
    producer = Producer(client_settings(bootstrap, **{"linger.ms": 5}))
    produced: list[Record] = []

    def delivered(headers: tuple[tuple[str, bytes], ...]):
        def on_delivery(error, message) -> None:
            assert error is None, error
            produced.append(
                Record(
                    topic,
                    message.partition(),
                    message.offset(),
                    message.timestamp()[1],
                    message.value(),
                    message.key(),
                    headers,  # delivery reports carry no headers: the ones we sent
                )
            )

        return on_delivery

    for n in range(count):
        value = (b'{"n":%d,"pad":"' % n).ljust(size - 2, b"x") + b'"}'
        headers = (("seq", str(n).encode()),)
        producer.produce(
            topic, value, b"k%d" % n, partition=n % partitions, headers=list(headers), on_delivery=delivered(headers)
        )
    assert producer.flush(30) == 0
    return sorted(produced, key=lambda r: (r.partition, r.offset))


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """What the consumer group has committed (-1001 = nothing), read without joining the group."""
    probe = Consumer(client_settings(bootstrap, **{"group.id": group}))
    try:
        found = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        probe.close()


def produce_records(bootstrap: str, records: list[Record]) -> list[int]:
    """Produce ``records`` (key, value, headers, timestamp) to their topic and partition, in order;
    the offsets the broker gave them."""
    producer = Producer(client_settings(bootstrap, **{"enable.idempotence": True, "linger.ms": 5}))
    offsets: list[int] = []

    def on_delivery(error, message) -> None:
        assert error is None, error
        offsets.append(message.offset())

    for record in records:
        producer.produce(
            record.topic,
            record.value,
            record.key,
            partition=record.partition,
            timestamp=record.timestamp_ms,
            headers=list(record.headers),
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0
    return offsets
