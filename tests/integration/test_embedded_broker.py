"""The embedded Kafka-protocol broker: topics, produce, consumer-group fetch and offset commits
work with confluent-kafka, and the broker process is gone after the context exits."""

from __future__ import annotations

import socket

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidemark.embedded.broker import kafka_broker


def test_broker_serves_a_consumer_group_and_stops(tmp_path):
    with kafka_broker() as bootstrap:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic("orders", num_partitions=3, replication_factor=1)]).values():
            future.result(timeout=10)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(300):
            producer.produce("orders", key=b"k%d" % i, value=b'{"i":%d}' % i, partition=i % 3, headers=[("h", b"v")])
        assert producer.flush(10) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "tidemark-test",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "fetch.wait.max.ms": 20,
            }
        )
        consumer.subscribe(["orders"])
        seen: dict[tuple[int, int], tuple[bytes, bytes, list[tuple[str, bytes]]]] = {}
        for _poll in range(120):
            for message in consumer.consume(500, timeout=0.5):
                assert message.error() is None
                seen[(message.partition(), message.offset())] = (message.key(), message.value(), message.headers())
            if len(seen) == 300:
                break
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("orders", p) for p in range(3)], timeout=10)
        consumer.close()
        host, port = bootstrap.split(":")
    assert sorted(seen) == sorted((i % 3, i // 3) for i in range(300))
    assert seen[(1, 5)] == (b"k16", b'{"i":16}', [("h", b"v")])
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 100), (1, 100), (2, 100)]
    with socket.socket() as probe:  # stopped: nothing listens on the port any more
        assert probe.connect_ex((host, int(port))) != 0
