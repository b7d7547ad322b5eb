"""The local Amazon MQ (RabbitMQ) event source mapping against a real broker (the installed
rabbitmq-server on loopback) and the real archiver handler in process: Lambda's delivery contract
for a queue -- a prefetch of one batch, batches closed by size, window or payload, acks only after
the function returned, nack with requeue after a failure (the messages come again, redelivered),
a lost ack requeueing the batch -- and, read back from S3 by message id, every message archived
exactly once."""

from __future__ import annotations

import base64
import io
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
import yaml

from tests.conftest import REPO, Archive
from tests.support.rabbitmq import connect, new_queue, publish, queue_depth, rabbitmq_fixture
from tidemark.config import TidemarkConfig, parse_config
from tidemark.config.loader import ENV_JSON
from tidemark.embedded.demo_rabbitmq import ConfirmedPublisher
from tidemark.embedded.esm.batching import BatchLimits
from tidemark.embedded.esm.invokers import InProcessInvoker, Invocation
from tidemark.embedded.esm.mapping import DeliveryError, MappingError
from tidemark.embedded.esm.rabbitmq_mapping import RabbitEventSourceMapping, RabbitMappingConfig
from tidemark.embedded.lambda_runtime import HandlerRef
from tidemark.embedded.rabbitmq import RabbitBroker
from tidemark.embedded.workload import QueueWorkload, WorkloadSpec, generate, queue_workload
from tidemark.records.rabbitmq import TIMESTAMP_FORMAT
from tidemark.verify import verify_messages

BROKER_ARN = "arn:aws:mq:us-east-1:123456789012:broker:orders:b-1234a5b6-78cd-901e-2fgh-3i45j6k178l9"
NOW_MS = int(time.time() * 1000)


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitBroker]:
    yield from rabbitmq_fixture(tmp_path_factory)


@pytest.fixture
def queue(rabbitmq: RabbitBroker) -> Iterator[str]:
    connection = connect(rabbitmq)
    try:
        yield new_queue(connection.channel(), "esm")
    finally:
        connection.close()


@pytest.fixture
def config(queue: str, archive: Archive, monkeypatch: pytest.MonkeyPatch) -> TidemarkConfig:
    """config/rabbitmq.yaml reading the test's queue, with small flushes; the handler's environment
    points at the test's bucket, table and staging directory."""
    data = yaml.safe_load((REPO / "config" / "rabbitmq.yaml").read_text())
    data["streams"][0]["source"]["queue"] = queue
    data["streams"][0]["flush"] = {"max_records": 40, "max_bytes": "1MiB", "max_age": "15m"}
    for name, value in {**archive.env(), ENV_JSON: json.dumps(data)}.items():
        monkeypatch.setenv(name, value)
    return parse_config(data)


class ScriptedArchiver:
    """The real archiver handler in process (one warm container) behind a script: records every
    event and the queue's ready messages at that moment (read on a connection of its own), fails
    the invocations whose numbers are in ``fail`` (1-based) before the handler sees them, and runs
    ``during`` (number -> action) inside an invocation."""

    def __init__(
        self,
        broker: RabbitBroker,
        queue: str,
        *,
        fail: Callable[[int], bool] = lambda _n: False,
        archive: bool = True,
        during: dict[int, Callable[[], None]] | None = None,
    ) -> None:
        self.handler = InProcessInvoker(HandlerRef.for_function(REPO, "archiver"), io.StringIO()) if archive else None
        self.events: list[dict[str, Any]] = []
        self.responses: list[Any] = []
        self.ready_seen: list[int] = []
        self.fail = fail
        self.during = during or {}
        self._probe = connect(broker)
        self._queue = queue

    def invoke(self, event: dict[str, Any]) -> Invocation:
        self.events.append(event)
        number = len(self.events)
        self.ready_seen.append(queue_depth(self._probe.channel(), self._queue)[0])
        if number in self.during:
            self.during[number]()
        if self.fail(number):
            return Invocation(ok=False, error="RuntimeError: scripted failure")
        result = self.handler.invoke(event) if self.handler is not None else Invocation(ok=True)
        self.responses.append(result.response)
        return result

    def close(self) -> None:
        self._probe.close()

    def messages(self, number: int | None = None) -> list[dict[str, Any]]:
        """The messages of invocation ``number`` (1-based), or of every invocation."""
        events = self.events if number is None else [self.events[number - 1]]
        return [
            message for event in events for messages in event["rmqMessagesByQueue"].values() for message in messages
        ]

    def ids(self, number: int) -> list[str | None]:
        return [message["basicProperties"]["messageId"] for message in self.messages(number)]


def orders(broker: RabbitBroker, queue: str, count: int, seed: int) -> QueueWorkload:
    """``count`` orders published as the demo publishes them (confirms, a few retries, a few without an id)."""
    workload = queue_workload(
        list(generate(WorkloadSpec(records=count, hours=2, seed=seed, malformed_share=0.02), NOW_MS)),
        queue=queue,
        seed=seed,
    )
    assert ConfirmedPublisher(broker.url, queue, workload.messages, window=50).run() == len(workload.messages)
    return workload


def mapping_for(
    broker: RabbitBroker, queue: str, invoker: ScriptedArchiver, limits: BatchLimits | None = None, **kwargs: Any
) -> RabbitEventSourceMapping:
    config = RabbitMappingConfig(
        broker.url,
        queue,
        BROKER_ARN,
        limits=limits or BatchLimits(batch_size=40, window_ms=300),
        **kwargs.pop("config", {}),
    )
    return RabbitEventSourceMapping(config, invoker, **kwargs)


def run_to_end(mapping: RabbitEventSourceMapping, total: int) -> None:
    """Until every published message is acked and none is held or left in the queue."""
    with mapping:
        mapping.run(
            lambda: mapping.stats.acked >= total and not mapping.holding() and mapping.ready_messages() == 0,
            idle_timeout_s=20,
        )


def archived_exactly_once(archive: Archive, config: TidemarkConfig, workload: QueueWorkload) -> None:
    """Drain the queue's partition, then read the archive back from S3 by message id."""
    stream = config.streams[0]
    archive.runtime(config).writer(stream, 0).drain()
    report = verify_messages(archive.s3, archive.bucket, stream.name, workload.expected, config=stream)
    assert report.ok, report.summary()
    assert report.archived + report.dead_lettered == report.produced == len(workload.expected)
    assert report.dead_letter_reasons["missing_message_id"] == workload.without_id > 0


def test_batches_of_a_prefetch_each_close_at_size_then_window_in_lambdas_shape(rabbitmq, queue, config, archive):
    workload = orders(rabbitmq, queue, 95, seed=1)
    total = len(workload.messages)
    invoker = ScriptedArchiver(rabbitmq, queue)
    mapping = mapping_for(rabbitmq, queue, invoker)

    began = time.monotonic()
    run_to_end(mapping, total)
    invoker.close()

    assert workload.retries > 0 and total == 95 + workload.retries
    sizes = [len(invoker.messages(n)) for n in range(1, len(invoker.events) + 1)]
    assert sizes == [40, 40, total - 80]  # the last one closed by the window
    assert time.monotonic() - began >= 0.3
    # While a batch is out, the broker holds back everything past the prefetch of one batch.
    assert invoker.ready_seen == [total - 40, total - 80, 0]
    published = [message.message_id for message in workload.messages]
    assert [message["basicProperties"]["messageId"] for message in invoker.messages()] == published  # FIFO
    for event in invoker.events:
        assert event["eventSource"] == "aws:rmq" and event["eventSourceArn"] == BROKER_ARN
        assert list(event["rmqMessagesByQueue"]) == [f"{queue}::/"]
    for sent, got in zip(workload.messages, invoker.messages(), strict=True):
        properties = got["basicProperties"]
        assert base64.b64decode(got["data"]) == sent.order.value and properties["bodySize"] == len(sent.order.value)
        assert got["redelivered"] is False
        assert properties["contentType"] == "application/json" and properties["deliveryMode"] == 2
        assert properties["headers"] == {name: {"bytes": list(value.encode())} for name, value in sent.headers.items()}
        assert time.strptime(properties["timestamp"], TIMESTAMP_FORMAT)
    stats = mapping.stats
    assert (stats.batches, stats.invocations, stats.records, stats.max_batch) == (3, 3, total, 40)
    assert (stats.received, stats.acked, stats.redelivered, stats.nacked, stats.lost_commits) == (total, total, 0, 0, 0)
    staged = sum(response["streams"]["orders"]["staged"] for response in invoker.responses)
    assert total - staged == workload.retries  # the archiver dropped each publisher retry
    archived_exactly_once(archive, config, workload)


def test_the_payload_limit_closes_a_batch_before_its_size(rabbitmq, queue):
    connection = connect(rabbitmq)
    channel = connection.channel()
    channel.confirm_delivery()
    for n in range(12):
        channel.basic_publish(
            "", queue, b"x" * 6000, pika.BasicProperties(message_id=f"big-{n}", delivery_mode=2), mandatory=True
        )
    connection.close()
    invoker = ScriptedArchiver(rabbitmq, queue, archive=False)
    limit = 32 * 1024
    mapping = mapping_for(rabbitmq, queue, invoker, BatchLimits(batch_size=100, window_ms=200, max_payload_bytes=limit))

    run_to_end(mapping, 12)
    invoker.close()

    sizes = [len(invoker.messages(n)) for n in range(1, len(invoker.events) + 1)]
    assert sum(sizes) == 12 and max(sizes) < 12 and len(sizes) >= 3
    assert all(len(json.dumps(event)) <= limit for event in invoker.events)
    assert [m["basicProperties"]["messageId"] for m in invoker.messages()] == [f"big-{n}" for n in range(12)]


def test_a_failed_invocation_is_nacked_and_requeued_then_redelivered_and_archived_once(
    rabbitmq, queue, config, archive
):
    workload = orders(rabbitmq, queue, 100, seed=2)
    total = len(workload.messages)
    invoker = ScriptedArchiver(rabbitmq, queue, fail=lambda n: n in (1, 3))
    mapping = mapping_for(rabbitmq, queue, invoker)

    run_to_end(mapping, total)
    invoker.close()

    # Nacked with requeue: the same messages come again, flagged redelivered, none lost meanwhile.
    assert Counter(invoker.ids(2)) == Counter(invoker.ids(1))
    assert {m["redelivered"] for m in invoker.messages(1)} == {False}
    assert {m["redelivered"] for m in invoker.messages(2)} == {True}
    failed = len(invoker.messages(1)) + len(invoker.messages(3))
    stats = mapping.stats
    assert (stats.failed_invocations, stats.nacked, stats.redelivered) == (2, failed, failed)
    assert stats.errors == ["RuntimeError: scripted failure"] and stats.acked == total
    assert Counter(message.message_id for message in workload.messages) == Counter(
        m["basicProperties"]["messageId"]
        for n in range(1, len(invoker.events) + 1)
        if n not in (1, 3)
        for m in invoker.messages(n)
    )  # every published message delivered successfully once
    archived_exactly_once(archive, config, workload)


def test_a_lost_ack_requeues_the_batch_and_the_archiver_drops_it_as_already_archived(rabbitmq, queue, config, archive):
    workload = orders(rabbitmq, queue, 100, seed=3)
    total = len(workload.messages)
    losses = iter([False, True])
    invoker = ScriptedArchiver(rabbitmq, queue)
    mapping = mapping_for(rabbitmq, queue, invoker, lose_ack=lambda: next(losses, False))

    run_to_end(mapping, total)
    invoker.close()

    # The second batch succeeded but its ack was lost: the connection closed, the broker requeued it.
    assert Counter(invoker.ids(3)) == Counter(invoker.ids(2))
    assert {m["redelivered"] for m in invoker.messages(3)} == {True}
    assert invoker.responses[2]["streams"]["orders"]["staged"] == 0  # every one already accepted
    stats = mapping.stats
    assert (stats.lost_commits, stats.rebalances, stats.failed_invocations) == (1, 1, 0)
    assert stats.redelivered == len(invoker.messages(2)) and stats.acked == total
    assert stats.records == total + len(invoker.messages(2))
    archived_exactly_once(archive, config, workload)


def test_no_ack_before_the_function_returns_a_connection_lost_mid_invocation_brings_the_batch_back(rabbitmq, queue):
    connection = connect(rabbitmq)
    ids = publish(connection.channel(), queue, 30)
    connection.close()
    holder: list[RabbitEventSourceMapping] = []

    def break_the_connection() -> None:
        """The poller's connection dies while the function runs (the function still succeeds)."""
        channel = holder[0]._channel  # the test breaks the mapping's own connection
        assert channel is not None
        channel.connection.close()

    invoker = ScriptedArchiver(rabbitmq, queue, archive=False, during={1: break_the_connection})
    mapping = mapping_for(rabbitmq, queue, invoker, BatchLimits(batch_size=20, window_ms=200))
    holder.append(mapping)

    run_to_end(mapping, 30)
    invoker.close()

    assert invoker.ids(1) == ids[:20]
    redelivered = [m["basicProperties"]["messageId"] for m in invoker.messages() if m["redelivered"]]
    assert sorted(redelivered) == ids[:20]  # unacked when the connection died: requeued whole
    assert (mapping.stats.lost_commits, mapping.stats.rebalances, mapping.stats.acked) == (1, 1, 30)


def test_a_function_that_keeps_failing_stops_the_mapping_and_leaves_every_message_queued(rabbitmq, queue):
    connection = connect(rabbitmq)
    channel = connection.channel()
    publish(channel, queue, 25)
    invoker = ScriptedArchiver(rabbitmq, queue, archive=False, fail=lambda _n: True)
    mapping = mapping_for(
        rabbitmq, queue, invoker, BatchLimits(batch_size=10, window_ms=100), config={"max_attempts": 3}
    )

    with pytest.raises(DeliveryError, match="3 invocations in a row failed"), mapping:
        mapping.run(lambda: False, idle_timeout_s=20)
    invoker.close()

    assert mapping.stats.failed_invocations == 3 and mapping.stats.acked == 0
    deadline = time.monotonic() + 10
    while queue_depth(channel, queue)[0] != 25 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert queue_depth(channel, queue) == (25, 0)  # all back in the queue, no consumer left
    connection.close()


class NeverInvoked:
    def invoke(self, event: dict[str, Any]) -> Invocation:
        raise AssertionError("nothing to deliver")


def test_a_missing_queue_is_a_one_line_error(rabbitmq):
    config = RabbitMappingConfig(rabbitmq.url, f"nope-{uuid.uuid4().hex[:6]}", BROKER_ARN)
    with pytest.raises(MappingError, match=r"cannot consume queue 'nope-.*NOT_FOUND"):
        RabbitEventSourceMapping(config, NeverInvoked()).start()
