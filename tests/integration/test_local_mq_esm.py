"""The local Amazon MQ (RabbitMQ) event source mapping against a real broker (the installed
rabbitmq-server on loopback) and the real archiver handler in process: Lambda's delivery contract
for a queue -- a prefetch of one batch, batches closed by size, window or payload, acks only after
the function returned, nack with requeue after a failure (the messages come again, redelivered),
a lost ack requeueing the batch, a message too large for any invocation dropped (acked unprocessed)
and refused at publish by the local broker, a quorum queue's delivery limit dropping or
dead-lettering what keeps failing -- and, read back from S3 by message id, every message archived
exactly once."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import io
import json
import logging
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
import yaml
from pika.exceptions import ChannelClosedByBroker

from tests.conftest import REPO, Archive
from tests.support.events import load_event
from tests.support.rabbitmq import connect, java_medium_date, new_queue, publish, queue_depth, rabbitmq_fixture
from tidemark.config import TidemarkConfig, parse_config
from tidemark.config.loader import ENV_JSON
from tidemark.embedded.demo_rabbitmq import ConfirmedPublisher
from tidemark.embedded.esm import rabbitmq_mapping
from tidemark.embedded.esm.batching import LAMBDA_PAYLOAD_LIMIT, BatchLimits
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
    the invocations whose numbers are in ``fail`` (1-based) or whose message ids ``fail_batch``
    picks before the handler sees them, and those in ``fail_after`` after it ran, and runs
    ``during`` (number -> action) inside an invocation."""

    def __init__(
        self,
        broker: RabbitBroker,
        queue: str,
        *,
        fail: Callable[[int], bool] = lambda _n: False,
        fail_batch: Callable[[list[str | None]], bool] = lambda _ids: False,
        fail_after: Callable[[int], bool] = lambda _n: False,
        archive: bool = True,
        during: dict[int, Callable[[], None]] | None = None,
    ) -> None:
        self.handler = InProcessInvoker(HandlerRef.for_function(REPO, "archiver"), io.StringIO()) if archive else None
        self.events: list[dict[str, Any]] = []
        self.responses: list[Any] = []
        self.ready_seen: list[int] = []
        self.fail = fail
        self.fail_batch = fail_batch
        self.fail_after = fail_after
        self.during = during or {}
        self._probe = connect(broker)
        self._queue = queue

    def invoke(self, event: dict[str, Any]) -> Invocation:
        self.events.append(event)
        number = len(self.events)
        self.ready_seen.append(queue_depth(self._probe.channel(), self._queue)[0])
        if number in self.during:
            self.during[number]()
        if self.fail(number) or self.fail_batch(self.ids(number)):
            return Invocation(ok=False, error="RuntimeError: scripted failure")
        result = self.handler.invoke(event) if self.handler is not None else Invocation(ok=True)
        self.responses.append(result.response)
        if self.fail_after(number):  # the function did its work, then failed (e.g. timed out)
            return Invocation(ok=False, error="RuntimeError: scripted failure after the handler")
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


def archived_exactly_once(
    archive: Archive, config: TidemarkConfig, workload: QueueWorkload, *, headers: bool = True
) -> None:
    """Drain the queue's partition, then read the archive back from S3 by message id (without
    comparing headers when ``headers`` is false: a quorum queue adds its own)."""
    stream = config.streams[0]
    archive.runtime(config).writer(stream, 0).drain()
    expected = workload.expected if headers else [dataclasses.replace(e, meta=None) for e in workload.expected]
    report = verify_messages(archive.s3, archive.bucket, stream.name, expected, config=stream)
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


# -- messages larger than an invocation can carry -----------------------------------------------


def _publish_bodies(broker: RabbitBroker, queue: str, bodies: dict[str, bytes]) -> None:
    connection = connect(broker)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for message_id, body in bodies.items():
            properties = pika.BasicProperties(message_id=message_id, delivery_mode=2)
            channel.basic_publish("", queue, body, properties, mandatory=True)
    finally:
        connection.close()


def test_a_message_too_large_for_any_invocation_is_acked_unprocessed_and_counted_as_dropped(rabbitmq, queue, caplog):
    """Lambda drops a record over its size limit (services-mq-errors.html): the local mapping
    acks it without an invocation, counts it, and logs its id -- the batches go on around it."""
    limit = 32 * 1024  # the 6 MB payload limit, scaled down
    bodies = {f"s-{n}": b"x" * 100 for n in range(3)}
    bodies["huge"] = b"y" * (limit * 3 // 4)  # its base64 alone fills the payload: never deliverable
    bodies.update({f"s-{n}": b"x" * 100 for n in range(3, 6)})
    _publish_bodies(rabbitmq, queue, bodies)
    invoker = ScriptedArchiver(rabbitmq, queue, archive=False)
    mapping = mapping_for(rabbitmq, queue, invoker, BatchLimits(batch_size=100, window_ms=200, max_payload_bytes=limit))

    with caplog.at_level(logging.WARNING, logger=rabbitmq_mapping.__name__):
        run_to_end(mapping, 6)
    invoker.close()

    delivered = [m["basicProperties"]["messageId"] for m in invoker.messages()]
    assert delivered == [f"s-{n}" for n in range(6)]  # never invoked with the huge one
    stats = mapping.stats
    assert (stats.acked, stats.dropped, stats.failed_invocations) == (6, 1, 0)
    assert stats.summary()["dropped"] == 1
    assert [r for r in caplog.records if r.levelno == logging.WARNING and "huge" in r.getMessage()]
    connection = connect(rabbitmq)
    assert queue_depth(connection.channel(), queue) == (0, 0)  # acked: the broker let go of it
    connection.close()


def test_the_local_broker_refuses_at_publish_what_the_mapping_could_never_deliver(rabbitmq, queue):
    """The embedded broker (the demo's and the tests') sets ``max_message_size`` to what one
    invocation can carry: a larger message is refused to its publisher (the channel closes with
    PRECONDITION_FAILED) instead of being dropped by the mapping later."""
    largest = rabbitmq_mapping.MAX_MESSAGE_SIZE
    assert largest < rabbitmq_mapping.UNDELIVERABLE_BODY_BYTES == LAMBDA_PAYLOAD_LIMIT * 3 // 4
    with pytest.raises(ChannelClosedByBroker, match=f"larger than configured max size {largest}"):
        _publish_bodies(rabbitmq, queue, {"too-large": b"z" * (largest + 1)})
    _publish_bodies(rabbitmq, queue, {"largest": b"z" * largest})
    invoker = ScriptedArchiver(rabbitmq, queue, archive=False)
    mapping = mapping_for(rabbitmq, queue, invoker, BatchLimits(batch_size=10, window_ms=100))

    run_to_end(mapping, 1)
    invoker.close()

    assert invoker.ids(1) == ["largest"] and mapping.stats.dropped == 0
    assert len(json.dumps(invoker.events[0])) <= LAMBDA_PAYLOAD_LIMIT  # delivered under the real limit


def test_the_embedded_broker_caps_messages_unless_told_otherwise(rabbitmq):
    """``rabbitmq_broker`` (the demo starts it with its defaults) writes the cap to its rabbitmq.conf."""
    import inspect

    from tidemark.embedded.rabbitmq import rabbitmq_broker

    conf = (rabbitmq.log_path.parents[1] / "rabbitmq.conf").read_text()
    assert f"max_message_size = {rabbitmq_mapping.MAX_MESSAGE_SIZE}" in conf.splitlines()
    default = inspect.signature(rabbitmq_broker).parameters["max_message_size"].default
    assert default == rabbitmq_mapping.MAX_MESSAGE_SIZE


# -- quorum queues: the delivery limit ------------------------------------------------------------


def _declare(broker: RabbitBroker, queue: str, arguments: dict[str, Any]) -> None:
    connection = connect(broker)
    try:
        connection.channel().queue_declare(queue=queue, durable=True, arguments=arguments)
    finally:
        connection.close()


def test_a_quorum_queue_drops_a_batch_that_fails_past_its_delivery_limit(rabbitmq):
    """The local mapping fails as Lambda's does -- nack with requeue -- so a quorum queue counts
    each failed invocation as a delivery and drops the messages past its limit (no DLX): the loss
    that RabbitMQ 4's default limit of 20 brings to a failing archiver."""
    queue = f"qq-{uuid.uuid4().hex[:8]}"
    _declare(rabbitmq, queue, {"x-queue-type": "quorum", "x-delivery-limit": 2})
    connection = connect(rabbitmq)
    ids = publish(connection.channel(), queue, 5)
    invoker = ScriptedArchiver(rabbitmq, queue, archive=False, fail=lambda _n: True)
    mapping = mapping_for(
        rabbitmq, queue, invoker, BatchLimits(batch_size=10, window_ms=100), config={"max_attempts": 10}
    )

    with mapping:
        mapping.run(lambda: mapping.stats.failed_invocations >= 3 and not mapping.holding(), idle_timeout_s=20)
    invoker.close()
    # Once the broker has let the mapping's consumer go, anything nacked back (not dropped) is ready.
    deadline = time.monotonic() + 10
    while (depth := queue_depth(connection.channel(), queue))[1] and time.monotonic() < deadline:
        time.sleep(0.05)

    assert [sorted(invoker.ids(n)) for n in (1, 2, 3)] == [ids] * 3
    assert [{m["redelivered"] for m in invoker.messages(n)} for n in (1, 2, 3)] == [{False}, {True}, {True}]
    counts = [{m["basicProperties"]["headers"].get("x-delivery-count", 0) for m in invoker.messages(n)} for n in (2, 3)]
    assert counts == [{1}, {2}]  # the broker counted each nack with requeue
    assert depth == (0, 0)  # gone: dropped, never acked
    assert len(invoker.events) == 3 and mapping.stats.acked == 0
    connection.close()


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"x-queue-type": "quorum", "x-delivery-limit": 2}, "delivery limit 2 and no dead-letter exchange"),
        ({"x-queue-type": "quorum"}, "delivery limit 20 .RabbitMQ 4's default. and no dead-letter exchange"),
        ({"x-queue-type": "quorum", "x-delivery-limit": -1}, None),
        ({"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx"}, None),
        ({"x-queue-type": "classic"}, None),
        ({}, None),
    ],
)
def test_the_delivery_limit_rule(arguments, problem):
    found = rabbitmq_mapping.delivery_limit_problem(arguments)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert re.search(problem, found), found


def test_the_mapping_refuses_a_quorum_queue_that_would_drop_after_its_delivery_limit(rabbitmq):
    """Given the queue's declared arguments, the mapping declares them (the broker refuses them
    if the queue differs) and refuses a quorum queue with a finite limit and no DLX."""
    queue = f"qq-{uuid.uuid4().hex[:8]}"
    arguments = {"x-queue-type": "quorum", "x-delivery-limit": 2}
    _declare(rabbitmq, queue, arguments)
    invoker = NeverInvoked()
    config = RabbitMappingConfig(rabbitmq.url, queue, BROKER_ARN, queue_arguments=arguments)
    with pytest.raises(MappingError, match="delivery limit 2 and no dead-letter exchange"):
        RabbitEventSourceMapping(config, invoker).start()
    # arguments that are not the queue's: the broker says which one differs
    stated = {"x-queue-type": "quorum", "x-delivery-limit": 2, "x-dead-letter-exchange": ""}
    config = RabbitMappingConfig(rabbitmq.url, queue, BROKER_ARN, queue_arguments=stated)
    with pytest.raises(MappingError, match="inequivalent arg 'x-dead-letter-exchange'"):
        RabbitEventSourceMapping(config, invoker).start()


def test_with_a_dead_letter_exchange_failed_messages_survive_and_a_redrive_archives_them_once(
    rabbitmq, archive, monkeypatch
):
    """A quorum queue with a delivery limit and a DLX: a poison batch that keeps failing is
    dead-lettered into the DLX's queue, not lost; the operator re-drives that queue into the
    source queue (as a shovel would: the same message ids) once the function is fixed, and the
    archive holds every message exactly once -- the dedupe index drops what was accepted before."""
    queue = f"qq-{uuid.uuid4().hex[:8]}"
    dlq = f"{queue}.dlq"
    connection = connect(rabbitmq)
    channel = connection.channel()
    channel.queue_declare(queue=dlq, durable=True)
    arguments = {
        "x-queue-type": "quorum",
        "x-delivery-limit": 2,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": dlq,
    }
    channel.queue_declare(queue=queue, durable=True, arguments=arguments)
    data = yaml.safe_load((REPO / "config" / "rabbitmq.yaml").read_text())
    data["streams"][0]["source"]["queue"] = queue
    data["streams"][0]["flush"] = {"max_records": 40, "max_bytes": "1MiB", "max_age": "15m"}
    for name, value in {**archive.env(), ENV_JSON: json.dumps(data)}.items():
        monkeypatch.setenv(name, value)
    config = parse_config(data)
    workload = orders(rabbitmq, queue, 60, seed=5)
    total = len(workload.messages)
    poison = workload.messages[5].message_id
    assert poison is not None
    # The poison batch's first invocation accepts it and then fails; the next two fail outright.
    invoker = ScriptedArchiver(rabbitmq, queue, fail_after=lambda n: n == 1)
    invoker.fail_batch = lambda ids: poison in ids and len(invoker.events) > 1
    mapping = mapping_for(
        rabbitmq, queue, invoker, BatchLimits(batch_size=20, window_ms=200), config={"queue_arguments": arguments}
    )

    def settled() -> bool:
        if mapping.holding() or mapping.ready_messages():
            return False
        return mapping.stats.acked + queue_depth(channel, dlq)[0] >= total

    with mapping:
        mapping.run(settled, idle_timeout_s=20)
    dead = queue_depth(channel, dlq)[0]
    assert 1 <= dead < total and mapping.stats.failed_invocations == 3  # the poison batch, three deliveries
    assert poison in invoker.ids(1) and mapping.stats.acked == total - dead
    before = len(invoker.responses)

    # The operator's re-drive (the function fixed): the DLX's queue back into the source queue.
    channel.confirm_delivery()
    while (got := channel.basic_get(dlq))[0] is not None:
        method, properties, body = got
        assert "x-death" in properties.headers
        channel.basic_publish("", queue, body, properties, mandatory=True)
        channel.basic_ack(method.delivery_tag)
    invoker.fail_batch = lambda _ids: False
    again = mapping_for(rabbitmq, queue, invoker, BatchLimits(batch_size=20, window_ms=200))
    run_to_end(again, dead)
    invoker.close()
    assert queue_depth(channel, dlq) == (0, 0)
    connection.close()
    # Every dead-lettered message was in the first poison batch, accepted before it failed: the
    # re-driven copies are dropped by message id (or body digest), not archived twice.
    assert again.stats.acked == dead
    assert sum(r["streams"]["orders"]["staged"] for r in invoker.responses[before:]) == 0

    archived_exactly_once(archive, config, workload, headers=False)


# -- odd fields: one message's problem, never its batch's -----------------------------------------


def _odd_fields_config(
    queue: str, archive: Archive, monkeypatch: pytest.MonkeyPatch, event_time: dict[str, Any] | None = None
) -> TidemarkConfig:
    """config/rabbitmq.yaml reading ``queue``, objects as gzip JSON Lines (read back here with the
    stdlib, not Tidemark's readers), optionally another event time."""
    data = yaml.safe_load((REPO / "config" / "rabbitmq.yaml").read_text())
    stream = data["streams"][0]
    stream["source"]["queue"] = queue
    stream["flush"] = {"max_records": 40, "max_bytes": "1MiB", "max_age": "15m"}
    stream["format"] = {"type": "jsonl", "compression": "gzip"}
    if event_time is not None:
        stream["event_time"] = event_time
    for name, value in {**archive.env(), ENV_JSON: json.dumps(data)}.items():
        monkeypatch.setenv(name, value)
    return parse_config(data)


def _archived_lines(archive: Archive, config: TidemarkConfig) -> dict[str, list[dict[str, Any]]]:
    """Drain the queue's partition; every line of every object, by prefix (``raw``, ``errors``).
    A dead letter's base64 fields (``message_id_base64``, ``value_base64``, headers') are decoded
    into the archived records' names (``message_id``, ``value``, headers' ``value``) as text."""
    stream = config.streams[0]
    archive.runtime(config).writer(stream, 0).drain()
    found: dict[str, list[dict[str, Any]]] = {"raw": [], "errors": []}
    for prefix, lines in found.items():
        listed = archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix=f"{prefix}/{stream.name}/")
        for item in listed.get("Contents", []):
            body = archive.s3.get_object(Bucket=archive.bucket, Key=item["Key"])["Body"].read()
            lines += [json.loads(line) for line in gzip.decompress(body).splitlines()]
    for line in found["errors"]:
        for name in ("message_id", "value"):
            encoded = line.pop(f"{name}_base64")
            line[name] = None if encoded is None else base64.b64decode(encoded).decode("utf-8", "replace")
        line["headers"] = [
            {"key": header["key"], "value": base64.b64decode(header["value_base64"]).decode("utf-8", "replace")}
            for header in line["headers"]
        ]
    return found


@pytest.mark.parametrize(
    "event_time",
    [None, {"source": "record_timestamp", "timezone": "UTC"}],
    ids=["json_field", "record_timestamp"],
)
def test_a_millisecond_timestamp_and_a_nested_header_table_never_wedge_the_queue(
    rabbitmq, queue, archive, monkeypatch, event_time
):
    """Published with pika: a timestamp of ``Date.now()`` (ms where AMQP means seconds: the year
    58,859 to Java) and a nested header table ``{"meta": {"bytes": "abc"}}``, between ordinary
    messages. Each is delivered once as Lambda shows it, the invocations succeed, everything is
    acked and the queue is empty; the odd timestamp is the record's timestamp (dead-lettered
    ``invalid_event_time`` when it is the event time), the table is kept as its JSON."""
    config = _odd_fields_config(queue, archive, monkeypatch, event_time)
    now_s = NOW_MS // 1000
    sent = {
        "before": pika.BasicProperties(message_id="before", timestamp=now_s),
        "ms-stamp": pika.BasicProperties(message_id="ms-stamp", timestamp=NOW_MS),
        "nested": pika.BasicProperties(message_id="nested", timestamp=now_s, headers={"meta": {"bytes": "abc"}}),
        "after": pika.BasicProperties(message_id="after", timestamp=now_s, headers={"source": "web"}),
    }
    connection = connect(rabbitmq)
    channel = connection.channel()
    channel.confirm_delivery()
    for message_id, properties in sent.items():
        body = json.dumps({"order_id": message_id, "created_at": NOW_MS}).encode()
        channel.basic_publish("", queue, body, properties, mandatory=True)
    invoker = ScriptedArchiver(rabbitmq, queue)
    mapping = mapping_for(rabbitmq, queue, invoker, BatchLimits(batch_size=2, window_ms=200))

    run_to_end(mapping, len(sent))
    invoker.close()

    stats = mapping.stats
    assert (stats.failed_invocations, stats.acked, stats.redelivered, stats.invocations) == (0, 4, 0, 2)
    assert queue_depth(channel, queue) == (0, 0)
    connection.close()
    shown = {m["basicProperties"]["messageId"]: m["basicProperties"] for m in invoker.messages()}
    assert shown["ms-stamp"]["timestamp"] == java_medium_date(NOW_MS * 1000)
    assert int(shown["ms-stamp"]["timestamp"].split(", ")[1]) > 50_000  # past datetime's year 9999
    assert shown["nested"]["headers"] == {"meta": {"bytes": {"bytes": [97, 98, 99]}}}
    assert [response["streams"]["orders"]["staged"] for response in invoker.responses] == [2, 2]

    lines = _archived_lines(archive, config)
    by_id = {line["message_id"]: line for line in lines["raw"] + lines["errors"]}
    assert sorted(by_id) == sorted(sent) and len(lines["raw"]) + len(lines["errors"]) == 4
    assert by_id["ms-stamp"]["timestamp"] == NOW_MS * 1000
    assert {"key": "meta", "value": '{"bytes":{"bytes":[97,98,99]}}'} in by_id["nested"]["headers"]
    assert {line["timestamp"] for line in (by_id["before"], by_id["nested"], by_id["after"])} == {now_s * 1000}
    dead = {line["message_id"]: line for line in lines["errors"]}
    if event_time is None:  # the event time is the body's created_at: all archived
        assert dead == {}
    else:  # the record timestamp is the event time: the year 58,859 is none, for that message alone
        assert list(dead) == ["ms-stamp"]
        assert re.fullmatch(r"invalid_event_time: \d+ ms is outside 1970..9999", dead["ms-stamp"]["error"]), dead
    assert sorted(line["position"] for line in lines["raw"] + lines["errors"]) == [0, 1, 2, 3]


def test_a_message_the_decoder_cannot_read_is_its_own_dead_letter_and_the_batch_is_archived(archive, monkeypatch):
    """Through the real handler, a hand-made event whose second message's ``data`` is not base64
    (not something Lambda sends): the invocation succeeds, that message is dead-lettered
    ``undecodable_message`` with the message as the event showed it, the others are archived as
    ever; its redelivery is dropped by its id like any accepted message."""
    config = _odd_fields_config("orders", archive, monkeypatch)
    event = load_event("rabbitmq-orders")
    event["rmqMessagesByQueue"]["orders::/"][1]["data"] = "not base64!"
    handler = InProcessInvoker(HandlerRef.for_function(REPO, "archiver"), io.StringIO())

    first = handler.invoke(event)
    for message in event["rmqMessagesByQueue"]["orders::/"]:
        message["redelivered"] = True
    again = handler.invoke(event)

    assert first.ok and again.ok, (first.error, again.error)
    assert first.response["streams"]["orders"]["staged"] == 3  # m-1001 twice in the event: once
    assert again.response["streams"]["orders"]["staged"] == 0
    lines = _archived_lines(archive, config)
    assert [line["message_id"] for line in lines["raw"]] == ["m-1001"]
    dead = {line["message_id"]: line for line in lines["errors"]}
    assert set(dead) == {"m-1002", None}  # the sample's message without an id: missing_message_id
    assert dead[None]["error"].startswith("missing_message_id: ")
    undecodable = dead["m-1002"]
    reason = "message #1 of 'orders::/': data is not valid base64"
    assert undecodable["error"].startswith(f"undecodable_message: {reason}")
    assert [header["key"] for header in undecodable["headers"]] == ["tidemark.undecodable"]
    assert undecodable["headers"][0]["value"].startswith(reason)
    shown = json.loads(undecodable["value"])  # the message as the event showed it, for a re-drive
    assert shown["data"] == "not base64!" and shown["basicProperties"]["messageId"] == "m-1002"
    assert "redelivered" not in shown
