"""The demo's RabbitMQ source: a broker on loopback, a publisher with confirms, and the local
Amazon MQ event source mapping.

1. start the installed ``rabbitmq-server`` on free loopback ports (``embedded/rabbitmq.py``: its
   own node, files and Erlang cookie; ``max_message_size`` capped at what an invocation can carry,
   so a larger message is refused to the publisher; stopped with the demo, also on errors and Ctrl-C);
2. declare the stream's queue, durable (it must be empty), and publish the orders as persistent
   messages with ids ``m-<seed>-<n>`` under publisher confirms -- a window of unconfirmed
   messages, a nacked one published again; a share of them a second time, as a publisher
   retrying after a lost confirm would, and a few without a message id (``queue_workload``);
3. archive through the local mapping (``esm/rabbitmq_mapping.py``: prefetch of one batch, ack
   after success, nack with requeue after a failure, lost acks with ``--chaos``) until every
   published message is acked and the queue is empty.

The archive is then checked by message id (``verify_messages``): a queue has no offsets, the
ledger numbers what it accepts, and redeliveries and publisher retries must be archived once.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tidemark.embedded.aws import LocalAws
from tidemark.embedded.demo_common import DemoError, DemoOptions, DemoUI, Feed, FeedContext
from tidemark.embedded.demo_kafka import batch_limits
from tidemark.embedded.esm.invokers import Invocation
from tidemark.embedded.esm.rabbitmq_mapping import Delivery, RabbitEventSourceMapping, RabbitMappingConfig
from tidemark.embedded.ports import claim_port
from tidemark.embedded.rabbitmq import RabbitBroker, RabbitBrokerError, rabbitmq_broker
from tidemark.embedded.workload import (
    PERSISTENT,
    QUEUE_CONTENT_TYPE,
    QueueMessage,
    WorkloadError,
    queue_workload,
)
from tidemark.sources import RABBITMQ

#: unconfirmed messages the publisher keeps in flight (the broker confirms them in groups)
CONFIRM_WINDOW = 2_000
#: the demo's queue: classic, stated (Amazon MQ for RabbitMQ 4.2 makes quorum the default type);
#: the mapping declares it with these again and checks them (``delivery_limit_problem``)
QUEUE_ARGUMENTS: dict[str, Any] = {"x-queue-type": "classic"}
PUBLISH_TIMEOUT_S = 600.0


class ConfirmedPublisher:
    """Publish messages to a queue through the default exchange, persistent and mandatory, with
    publisher confirms: up to ``window`` unconfirmed at a time (``pika.SelectConnection``; the
    blocking adapter waits for each confirm, a round trip and a disk sync per message). A message
    the broker nacks is published again; one it returns (unroutable) fails the run."""

    def __init__(
        self,
        url: str,
        queue: str,
        messages: list[QueueMessage],
        *,
        window: int = CONFIRM_WINDOW,
        on_progress: Callable[[int], None] | None = None,
        timeout_s: float = PUBLISH_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.queue = queue
        self.messages = messages
        self.window = window
        self.on_progress = on_progress
        self.timeout_s = timeout_s
        self.confirmed = 0
        self.nacked = 0  # publishes the broker refused, published again
        self.returned: list[str | None] = []  # ids of messages returned unroutable
        self._pending: deque[int] = deque(range(len(messages)))  # message indexes still to publish
        self._unconfirmed: dict[int, int] = {}  # publish sequence number -> message index
        self._order: deque[int] = deque()  # sequence numbers in publish order
        self._sequence = 0
        self._done = False
        self._error: str | None = None
        self._connection: Any = None
        self._channel: Any = None

    def run(self) -> int:
        """Publish everything; the number of messages the broker confirmed."""
        import pika  # type: ignore[import-untyped]

        self._connection = pika.SelectConnection(
            pika.URLParameters(self.url),
            on_open_callback=self._opened,
            on_open_error_callback=self._open_failed,
            on_close_callback=self._closed,
        )
        self._connection.ioloop.call_later(self.timeout_s, self._timed_out)
        try:
            self._connection.ioloop.start()
        finally:
            if not self._connection.is_closed:  # interrupted: close, and let the loop see it through
                with contextlib.suppress(Exception):
                    self._connection.close()
                    self._connection.ioloop.start()
        if self._error is not None:
            raise WorkloadError(f"publishing to queue {self.queue!r} failed: {self._error}")
        if self.returned:
            raise WorkloadError(f"{len(self.returned)} messages were returned unroutable by queue {self.queue!r}")
        return self.confirmed

    def _fail(self, error: str) -> None:
        if self._error is None:
            self._error = error
        if self._connection.is_open:
            self._connection.close()
        elif self._connection.is_closed:
            self._connection.ioloop.stop()

    def _opened(self, connection: Any) -> None:
        connection.channel(on_open_callback=self._channel_opened)

    def _open_failed(self, _connection: Any, error: BaseException) -> None:
        self._error = f"cannot connect: {error!r}"
        self._connection.ioloop.stop()

    def _closed(self, _connection: Any, reason: BaseException) -> None:
        if not self._done and self._error is None:
            self._error = f"the connection closed: {reason!r}"
        self._connection.ioloop.stop()

    def _timed_out(self) -> None:
        if not self._done:
            self._fail(f"{self.confirmed} of {len(self.messages)} confirmed within {self.timeout_s:.0f}s")

    def _channel_opened(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._channel_closed)
        channel.add_on_return_callback(self._returned)
        channel.confirm_delivery(self._confirmed, callback=lambda _frame: self._publish())

    def _channel_closed(self, _channel: Any, reason: BaseException) -> None:
        if not self._done:
            self._fail(f"the channel closed: {reason!r}")

    def _returned(self, _channel: Any, _method: Any, properties: Any, _body: bytes) -> None:
        self.returned.append(properties.message_id)

    def _publish(self) -> None:
        import pika

        now = int(time.time())
        while self._pending and len(self._unconfirmed) < self.window:
            index = self._pending.popleft()
            message = self.messages[index]
            properties = pika.BasicProperties(
                message_id=message.message_id,
                delivery_mode=PERSISTENT,
                content_type=QUEUE_CONTENT_TYPE,
                headers=message.headers,
                timestamp=now,
            )
            self._channel.basic_publish("", self.queue, message.order.value, properties, mandatory=True)
            self._sequence += 1
            self._unconfirmed[self._sequence] = index
            self._order.append(self._sequence)
        if not self._pending and not self._unconfirmed:
            self._done = True
            self._connection.close()

    def _confirmed(self, frame: Any) -> None:
        import pika

        method = frame.method
        acked = isinstance(method, pika.spec.Basic.Ack)
        tags = [method.delivery_tag]
        if method.multiple:
            tags = []
            while self._order and self._order[0] <= method.delivery_tag:
                tags.append(self._order.popleft())
        for tag in tags:
            index = self._unconfirmed.pop(tag, None)
            if index is None:
                continue
            if acked:
                self.confirmed += 1
            else:
                self.nacked += 1
                self._pending.append(index)  # the broker did not take it: publish it again
        while self._order and self._order[0] not in self._unconfirmed:
            self._order.popleft()
        if self.on_progress is not None:
            self.on_progress(self.confirmed)
        self._publish()


def broker_url(broker: RabbitBroker, vhost: str = "/") -> str:
    return f"amqp://{broker.username}:{broker.password}@{broker.host}:{broker.port}/{quote(vhost, safe='')}"


class RabbitRunner:
    kind = RABBITMQ

    def __init__(self, options: DemoOptions, ui: DemoUI) -> None:
        for given, option in (
            (options.bootstrap_servers, "--bootstrap-servers"),
            (options.recreate_topic, "--recreate-topic"),
        ):
            if given:
                raise DemoError(f"{option} is for Kafka sources; the RabbitMQ demo starts its own broker")
        if options.aggregate:
            raise DemoError(
                "--aggregate: the Spark aggregation job reads Kafka and Kinesis archives, not yet a RabbitMQ "
                "queue's (its envelope names queue and position); leave it out"
            )
        self.options = options
        self.ui = ui
        self.broker: RabbitBroker | None = None

    def start(self, stack: contextlib.ExitStack, workdir: Path) -> str:
        self.ui.step("starting RabbitMQ (the installed rabbitmq-server) on loopback")
        port = claim_port(self.options.broker_port, option="--broker-port")
        try:
            self.broker = stack.enter_context(rabbitmq_broker(workdir / "rabbitmq", port=port))
        except RabbitBrokerError as exc:
            raise DemoError(str(exc)) from None
        broker = self.broker
        return (
            f"RabbitMQ at {broker.host}:{broker.port} (node {broker.node}, started in {broker.started_in_s:.1f}s); "
            "starting moto (S3 + DynamoDB)"
        )

    def connect(self, aws: LocalAws) -> None:
        return None

    def feed(self, context: FeedContext) -> Feed:
        from pika.exceptions import AMQPError  # type: ignore[import-untyped]

        try:
            return self._feed(context)
        except AMQPError as exc:
            raise DemoError(f"RabbitMQ failed: {exc!r}") from None

    def _feed(self, context: FeedContext) -> Feed:
        import pika

        options, stream, ui, broker = context.options, context.stream, self.ui, self.broker
        assert broker is not None, "start() the runner first"
        source = stream.source
        queue, vhost = source.topic, source.virtual_host or "/"
        assert source.broker_arn is not None  # a rabbitmq source has one
        if vhost != broker.vhost:
            raise DemoError(
                f"stream {stream.name!r} reads virtual host {vhost!r}; the demo's broker has only {broker.vhost!r}"
            )
        url = broker_url(broker, vhost)
        workload = queue_workload(context.orders, queue=queue, seed=options.seed, dedupe_id=stream.dedupe_settings.id)
        total = len(workload.messages)
        ui.step(
            f"publishing {total} messages to queue {queue!r} (persistent, publisher confirms): "
            f"{len(context.orders)} orders, {workload.retries} of them published twice (publisher retries), "
            f"{workload.without_id} without a message id"
        )
        connection = pika.BlockingConnection(pika.URLParameters(url))
        try:
            channel = connection.channel()
            declared = channel.queue_declare(queue=queue, durable=True, arguments=QUEUE_ARGUMENTS).method
            if declared.message_count:
                raise DemoError(
                    f"queue {queue!r} already holds {declared.message_count} messages; the demo needs an empty "
                    "queue: pass --topic with a new name"
                )
        finally:
            connection.close()
        publisher = ConfirmedPublisher(
            url, queue, workload.messages, on_progress=lambda n: ui.progress("produce", n, total)
        )
        published = publisher.run()
        ui.progress("produce", published, total)
        context.lap("produce")

        ui.step("archiving through the local Amazon MQ event source mapping" + (" with chaos" if options.chaos else ""))
        duplicates = 0

        def delivered(batch: list[Delivery], result: Invocation) -> None:
            """Count what the archiver dropped as already accepted: the batch less what it staged
            (raw or dead-lettered). Not the response's ``duplicates``: the writer leaves it at 0 for
            a batch that holds nothing but duplicates (a lost ack's redelivery)."""
            nonlocal duplicates
            streams = result.response.get("streams", {}) if isinstance(result.response, dict) else {}
            duplicates += len(batch) - sum(int(outcome.get("staged", 0)) for outcome in streams.values())
            ui.progress("archive", mapping.stats.acked, published)

        config = RabbitMappingConfig(
            url,
            queue,
            source.broker_arn,
            virtual_host=vhost,
            limits=batch_limits(options, stream),
            queue_arguments=QUEUE_ARGUMENTS,
        )
        mapping = RabbitEventSourceMapping(
            config,
            context.invoker,
            lose_ack=context.chaos.lose_commit if options.chaos else (lambda: False),
            on_delivered=delivered,
        )

        def settled() -> bool:
            """Every published message acked (or dropped, too large for an invocation: the
            verification then reports it lost), none held, none left in the queue."""
            if mapping.stats.acked + mapping.stats.dropped < published or mapping.holding():
                return False
            return mapping.ready_messages() == 0

        with mapping:
            mapping.run(settled)
            left = mapping.ready_messages()
        ui.progress("archive", published, published)
        context.lap("archive")
        queue_report: dict[str, Any] = {
            "broker": f"amqp://{broker.host}:{broker.port}/{quote(vhost, safe='')}",
            "node": broker.node,
            "broker_started_in_s": round(broker.started_in_s, 2),
            "broker_arn": source.broker_arn,
            "queue": queue,
            "virtual_host": vhost,
            "published": published,
            "orders": len(context.orders),
            "publisher_retries": workload.retries,
            "without_message_id": workload.without_id,
            "publish_nacked": publisher.nacked,
            "distinct_messages": len(workload.expected),
            "dedupe_id": stream.dedupe_settings.id,
            **mapping.stats.summary(),
            "duplicates_dropped": duplicates,
            "left_in_queue": left,
        }
        return Feed(queue_report["broker"], workload.expected, mapping.stats, queue=queue_report)
