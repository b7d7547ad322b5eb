"""The local Amazon MQ (RabbitMQ) event source mapping: consume a queue, invoke, ack only after success.

Behaves like the Lambda event source mapping for an Amazon MQ for RabbitMQ broker:

* one consumer on the queue with manual acks and ``basic_qos(prefetch_count=batch_size)``: the
  broker never has more than a batch of messages out to the mapping unacked;
* batches close at ``batch_size`` messages, at the 6 MB payload limit (``message_payload_size``)
  or when the batching window since the batch's first message has passed (``BatchBuilder``);
* a message too large for any invocation (an event holding it alone passes the payload limit) is
  dropped as Lambda drops it: acked without an invocation, counted in ``dropped`` and logged with
  its id (``MAX_MESSAGE_SIZE``: the broker setting that keeps such messages out of the queue);
* one event per batch, messages of the one queue under ``"<queue>::<virtual host>"``, each with
  its AMQP properties (``messageId``, ``timestamp``, ``headers``, ``contentType``, ...), the
  broker's ``redelivered`` flag and the body in base64 (``records.rabbitmq_esm``);
* invocations are sequential (the mapping's concurrency is one per queue);
* a batch is acked -- ``basic_ack(multiple=True)`` up to its last delivery tag -- only after the
  function returned. A failed invocation is NOT retried with the same event: its messages are
  nacked with requeue (``basic_nack(multiple=True, requeue=True)``), and the broker delivers them
  again, flagged ``redelivered``, possibly in other batches and in another order. After
  ``max_attempts`` failed invocations in a row the mapping stops (``DeliveryError``). A quorum
  queue counts each nack as a delivery and drops (or dead-letters) a message past its delivery
  limit, as it does behind Lambda's mapping (``delivery_limit_problem``).

Delivery tags grow in delivery order on a channel and a batch is always taken from the head of
what was received, so a batch is exactly the unsettled deliveries up to its last tag: settling
with ``multiple=True`` settles the batch and nothing else.

A lost ack (``lose_ack``, chaos -- or an ack on a channel that is gone) is what happens when the
connection breaks after the function succeeded and before the ack reached the broker: the
mapping skips the ack and closes its connection, the broker requeues every message the channel
held unacked, and the mapping connects again (counted in ``rebalances``). The messages come
again, ``redelivered``; the archiver's dedupe index drops the ones it already accepted. A
connection lost any other time (the broker restarted, or closed it after missed heartbeats
during a long invocation) is the same: whatever was received and not acked comes again.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidemark.clock import Clock, MonotonicClock
from tidemark.embedded.esm.batching import (
    ENVELOPE_BYTES,
    GROUP_OVERHEAD_BYTES,
    LAMBDA_PAYLOAD_LIMIT,
    BatchBuilder,
    BatchLimits,
    gather,
)
from tidemark.embedded.esm.invokers import Invocation, Invoker
from tidemark.embedded.esm.mapping import DeliveryError, MappingError, MappingStats
from tidemark.records.model import Record
from tidemark.records.rabbitmq import BROKER_ARN, PROPERTIES, render_timestamp
from tidemark.records.rabbitmq_esm import HeaderValue, RabbitMessage, build_rabbitmq_event, message_payload_size

if TYPE_CHECKING:
    import pika  # type: ignore[import-untyped]
    from pika.adapters.blocking_connection import BlockingChannel  # type: ignore[import-untyped]

logger = logging.getLogger(__name__)

#: the AMQP ``prefetch-count`` is a 16-bit field (Amazon MQ's batch size stops at 10,000 anyway)
MAX_PREFETCH = 65_535

# Lambda's Amazon MQ mapping drops a message it cannot fit in an invocation, silently for the
# queue: "Records also go unprocessed if Lambda drops them due to their size. The size limit for
# Lambda records is 6 MB." (https://docs.aws.amazon.com/lambda/latest/dg/services-mq-errors.html).
# The event carries the body in base64 (4/3 of its bytes), so a body over 3/4 of the 6 MB payload
# can never be delivered; the properties and headers need room too.
#: bodies of at least this many bytes are never delivered: their base64 alone fills the payload
UNDELIVERABLE_BODY_BYTES = LAMBDA_PAYLOAD_LIMIT * 3 // 4  # 4,718,592
#: the broker's ``max_message_size`` (the body's bytes) Tidemark requires: the broker refuses a
#: larger message to its publisher, so none reaches the mapping to be dropped. 4 MiB: its base64
#: (5,592,408 bytes) leaves about 690 KB of the payload for the properties and headers.
MAX_MESSAGE_SIZE = 4 * 1024 * 1024

#: RabbitMQ 4's default ``delivery-limit`` for a quorum queue (3.x: none)
DEFAULT_DELIVERY_LIMIT = 20


def delivery_limit_problem(
    arguments: Mapping[str, Any], policy: Mapping[str, Any] | None = None, *, queue_type: str | None = None
) -> str | None:
    """Why a queue would lose messages the archiver keeps failing, or ``None``.

    A quorum queue drops a message redelivered more often than its delivery limit unless it has a
    dead-letter exchange (https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling);
    Lambda's mapping nacks a failed batch with requeue, so each failed invocation is a delivery.
    RabbitMQ 4 gives every quorum queue a limit of 20 unless told ``-1`` (unlimited), and Amazon MQ
    for RabbitMQ 4.2 makes quorum the default queue type. ``arguments`` are the queue's ``x-``
    arguments, ``policy`` its effective policy definition and ``queue_type`` its type, as the
    management API's ``GET /api/queues/<vhost>/<name>`` returns them (``arguments``,
    ``effective_policy_definition``, ``type``); the type defaults to ``x-queue-type``, else classic.
    Where both set a limit the lower one applies; a DLX argument or policy key is enough here,
    though it is not on the broker: an exchange that routes to no queue drops a dead-lettered
    message all the same, and neither AMQP nor this rule can see the exchange's bindings (README:
    route it to a durable queue).
    """
    policy = policy or {}
    kind = queue_type or str(arguments.get("x-queue-type") or "classic")
    if kind != "quorum":
        return None
    if arguments.get("x-dead-letter-exchange") is not None or policy.get("dead-letter-exchange") is not None:
        return None
    limits = [int(v) for v in (arguments.get("x-delivery-limit"), policy.get("delivery-limit")) if v is not None]
    finite = [limit for limit in limits if limit >= 0]
    if limits and not finite:
        return None  # -1: unlimited (RabbitMQ 4)
    limit = min(finite) if finite else DEFAULT_DELIVERY_LIMIT
    told = "" if finite else " (RabbitMQ 4's default)"
    return (
        f"a quorum queue with delivery limit {limit}{told} and no dead-letter exchange drops a message "
        f"redelivered more than {limit} times (each failed invocation is a delivery); give it a dead-letter "
        "exchange (x-dead-letter-exchange, or a policy's dead-letter-exchange) or no limit (x-delivery-limit -1 "
        "on RabbitMQ 4)"
    )


@dataclass(frozen=True, slots=True)
class RabbitMappingConfig:
    url: str  # amqp://user:password@host:port/<vhost, %2F for "/">
    queue: str
    broker_arn: str  # the events' eventSourceArn (the Amazon MQ broker the stream names)
    virtual_host: str = "/"  # the vhost the url names: the event's "<queue>::<virtual host>"
    limits: BatchLimits = field(default_factory=BatchLimits)
    max_attempts: int = 25  # failed invocations in a row before the mapping stops
    # the queue's declared x- arguments, when known: start() declares the queue with them (the
    # broker refuses them if the queue's differ) and refuses a queue ``delivery_limit_problem``
    # names. Policies are not seen (only the management API shows them).
    queue_arguments: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if BROKER_ARN.fullmatch(self.broker_arn) is None:
            raise MappingError(f"{self.broker_arn!r} is not an Amazon MQ broker ARN")
        if not self.queue:
            raise MappingError("queue must not be empty")
        if self.max_attempts < 1:
            raise MappingError("max_attempts must be at least 1")
        if self.limits.batch_size > MAX_PREFETCH:
            raise MappingError(f"batch_size must be at most {MAX_PREFETCH} (the AMQP prefetch count)")

    @property
    def match_name(self) -> str:
        """The event's queue key, as the stream's ``source.match_name`` reads it."""
        return f"{self.queue}::{self.virtual_host}"


@dataclass
class QueueStats(MappingStats):
    """``MappingStats`` of a queue. ``rebalances`` counts reconnections (the channel closed with
    messages unacked, which the broker requeued) and ``lost_commits`` lost acks; ``batches`` and
    ``records`` count successful invocations, a redelivered message again."""

    received: int = 0  # deliveries from the broker (a redelivery counts again)
    redelivered: int = 0  # of those, flagged redelivered: delivered before and not acked
    acked: int = 0  # messages acked: the broker let go of them
    nacked: int = 0  # messages of failed invocations, nacked with requeue
    dropped: int = 0  # too large for any invocation: acked without one, as Lambda drops them

    def summary(self) -> dict[str, int]:
        return {
            "received": self.received,
            "redelivered": self.redelivered,
            "acked": self.acked,
            "nacked": self.nacked,
            "dropped": self.dropped,
            "reconnects": self.rebalances,
            "lost_acks": self.lost_commits,
        }


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message as the channel delivered it: its delivery tag and what the event carries."""

    tag: int
    message: RabbitMessage


def _header_value(value: Any) -> HeaderValue:
    """An AMQP header value as the event renders it: strings and byte strings as byte arrays,
    integers and booleans as JSON, tables and arrays as JSON objects and arrays of values rendered
    so (Lambda's rendering, ``records.rabbitmq``); anything else (floats, decimals, timestamps) as
    its text."""
    if value is None or isinstance(value, bytes | str | bool | int):
        return value
    if isinstance(value, Mapping):
        return {str(name): _header_value(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [_header_value(item) for item in value]
    return str(value)


_LONG = 2**64


def java_date_ms(seconds: int) -> int:
    """The ms of the ``Date`` the RabbitMQ Java client (Lambda's mapping) makes of an AMQP
    timestamp: its unsigned 64 bits read as a signed long, times 1000 in a long (wrapping)."""
    ms = (seconds * 1000) % _LONG
    return ms - _LONG if ms >= _LONG // 2 else ms


def message_of(redelivered: bool, properties: Any, body: bytes) -> RabbitMessage:
    """A delivered message (pika's ``BasicProperties``) as the event's message. The timestamp is
    rendered as Lambda renders it for any AMQP value, in any year; one whose ``Date`` falls before
    1970 (only from a wrapped long) is given as text, as it is no record timestamp."""
    camel: dict[str, Any] = {
        name: value for name, attribute in PROPERTIES if (value := getattr(properties, attribute, None)) is not None
    }
    headers: Mapping[str, Any] = properties.headers or {}
    stamp = properties.timestamp
    ms = -1 if stamp is None else java_date_ms(int(stamp))
    if stamp is not None and ms < 0:
        camel["timestamp"] = render_timestamp(ms)
        ms = -1
    return RabbitMessage(
        body=body,
        message_id=properties.message_id,
        timestamp_ms=ms,
        headers={str(name): _header_value(value) for name, value in headers.items()},
        properties=camel,
        redelivered=redelivered,
    )


class RabbitEventSourceMapping:
    def __init__(
        self,
        config: RabbitMappingConfig,
        invoker: Invoker,
        *,
        clock: Clock | None = None,
        lose_ack: Callable[[], bool] = lambda: False,
        on_delivered: Callable[[list[Delivery], Invocation], None] | None = None,
    ) -> None:
        self.config = config
        self.invoker = invoker
        self.clock = clock or MonotonicClock()
        self.stats = QueueStats()
        self._lose_ack = lose_ack
        self._on_delivered = on_delivered
        self._fetched: deque[Delivery] = deque()  # received, not yet in a batch
        self._batched: dict[int, Delivery] = {}  # delivery tag -> the delivery, in the open batch
        self._builder = BatchBuilder(config.limits, measure=self._measure)
        self._failures = 0  # failed invocations in a row
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None

    # -- connection lifecycle ---------------------------------------------------------------

    def start(self) -> RabbitEventSourceMapping:
        """Connect, limit the unacked messages to a batch, and consume the queue (which must exist)."""
        import pika
        from pika.exceptions import AMQPError, ChannelClosedByBroker  # type: ignore[import-untyped]

        if self._connection is not None:
            return self
        where = f"queue {self.config.queue!r} on {self._where()}"
        arguments = self.config.queue_arguments
        if arguments is not None and (problem := delivery_limit_problem(arguments)):
            raise MappingError(f"refusing {where}: {problem}")
        try:
            self._connection = pika.BlockingConnection(pika.URLParameters(self.config.url))
            channel = self._connection.channel()
            channel.queue_declare(queue=self.config.queue, passive=True)
            if self.config.queue_arguments is not None:  # the broker checks them against the queue's
                channel.queue_declare(
                    queue=self.config.queue, durable=True, arguments=dict(self.config.queue_arguments)
                )
            channel.basic_qos(prefetch_count=self.config.limits.batch_size)
            channel.basic_consume(self.config.queue, self._received, auto_ack=False)
        except ChannelClosedByBroker as exc:
            self.close()
            raise MappingError(f"cannot consume {where}: {exc.reply_text}") from None
        except AMQPError as exc:
            self.close()
            raise MappingError(f"cannot reach RabbitMQ for {where}: {exc!r}") from None
        self._channel = channel
        return self

    def _where(self) -> str:
        import pika

        parameters = pika.URLParameters(self.config.url)
        return f"{parameters.host}:{parameters.port} (vhost {parameters.virtual_host!r})"

    def close(self) -> None:
        """Close the connection: whatever the channel holds unacked goes back to the queue."""
        from pika.exceptions import AMQPError

        connection, self._connection, self._channel = self._connection, None, None
        self._fetched.clear()
        self._batched.clear()
        self._builder.take()
        if connection is not None and connection.is_open:
            with contextlib.suppress(AMQPError):
                connection.close()

    def __enter__(self) -> RabbitEventSourceMapping:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def reconnect(self) -> None:
        """Drop the connection and consume again: every unacked message is requeued and comes again."""
        self.stats.rebalances += 1
        self.close()
        self.start()

    # -- receiving ------------------------------------------------------------------------------

    def _received(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        redelivered = bool(method.redelivered)
        self.stats.received += 1
        self.stats.redelivered += redelivered
        self._fetched.append(Delivery(int(method.delivery_tag), message_of(redelivered, properties, body)))

    def _measure(self, record: Record) -> int:
        return message_payload_size(self._batched[record.offset].message)

    def _undeliverable(self, message: RabbitMessage) -> int | None:
        """The size of an event holding ``message`` alone when that passes the payload limit."""
        limit = self.config.limits.max_payload_bytes
        config = self.config
        bound = message_payload_size(message) + ENVELOPE_BYTES + GROUP_OVERHEAD_BYTES + len(config.match_name)
        if bound <= limit:  # an upper bound of the event's size: it fits
            return None
        alone = build_rabbitmq_event(
            [message], broker_arn=config.broker_arn, queue=config.queue, virtual_host=config.virtual_host
        )
        size = len(json.dumps(alone))
        return size if size > limit else None

    def _drop(self, delivery: Delivery, size: int) -> None:
        """Lambda's rule for a message over the size limit: unprocessed -- acked without an
        invocation (https://docs.aws.amazon.com/lambda/latest/dg/services-mq-errors.html). A queue
        has no offsets, so nothing downstream sees the gap: the warning and ``dropped`` do."""
        message = delivery.message
        logger.warning(
            "dropping message %r: an invocation holding it alone would be %d bytes, over the %d-byte payload "
            "limit (Lambda drops such records; cap the broker's max_message_size at %d)",
            message.message_id,
            size,
            self.config.limits.max_payload_bytes,
            MAX_MESSAGE_SIZE,
            extra={"message_id": message.message_id, "body_bytes": len(message.body), "event_bytes": size},
        )
        self.stats.dropped += 1
        # A lost ack (the channel is gone) brings it again after the reconnect, to be dropped again.
        self._settle(delivery.tag, ack=True, multiple=False)

    def _offer(self, delivery: Delivery, now_ms: int) -> bool:
        """Offer a delivery to the batch (``BatchBuilder`` sees it as a record of partition 0 at
        its delivery tag, measured by the message's share of the payload); one too large for any
        invocation is dropped instead."""
        if (size := self._undeliverable(delivery.message)) is not None:
            self._drop(delivery, size)
            return True
        self._batched[delivery.tag] = delivery
        if self._builder.offer(Record(self.config.match_name, 0, delivery.tag, -1, b""), now_ms):
            return True
        del self._batched[delivery.tag]
        return False

    def _take(self) -> list[Delivery]:
        return [self._batched.pop(record.offset) for record in self._builder.take()]

    def _wait(self, timeout_s: float) -> None:
        """Receive for up to ``timeout_s`` (less once a message arrived); a broken connection is
        reconnected: what it held unacked is requeued by the broker."""
        from pika.exceptions import AMQPError

        if self._connection is None:
            self.start()
        assert self._connection is not None
        try:
            self._connection.process_data_events(time_limit=timeout_s)
        except AMQPError as exc:
            logger.warning("RabbitMQ connection lost; reconnecting", extra={"error": repr(exc)})
            self.reconnect()

    def next_batch(self) -> list[Delivery]:
        """Gather the next batch; an empty list means nothing arrived for a poll interval."""
        return gather(
            self._builder,
            self._fetched,
            offer=self._offer,
            take=self._take,
            receive=self._wait,
            now_ms=self.clock.now_ms,
        )

    # -- delivery -------------------------------------------------------------------------------

    def deliver(self, batch: list[Delivery]) -> Invocation:
        """Invoke once; ack the batch after success (unless chaos loses the ack), nack it with
        requeue after a failure."""
        config = self.config
        event = build_rabbitmq_event(
            [delivery.message for delivery in batch],
            broker_arn=config.broker_arn,
            queue=config.queue,
            virtual_host=config.virtual_host,
        )
        stats = self.stats
        stats.invocations += 1
        result = self.invoker.invoke(event)
        last = batch[-1].tag
        if not result.ok:
            stats.failed_invocations += 1
            stats.crashed_invocations += result.crashed
            if result.error and not result.crashed and result.error not in stats.errors:
                stats.errors.append(result.error)
            self._failures += 1
            logger.info(
                "invocation failed; nacking the batch with requeue",
                extra={"messages": len(batch), "error": result.error, "in_a_row": self._failures},
            )
            if self._settle(last, ack=False):
                stats.nacked += len(batch)
            else:  # the channel is gone: the broker requeued the batch, and what was received after it
                self.reconnect()
            if self._failures >= config.max_attempts:
                raise DeliveryError(
                    f"{self._failures} invocations in a row failed on queue {config.queue!r}; "
                    f"last error: {result.error}"
                )
            return result
        self._failures = 0
        stats.batches += 1
        stats.records += len(batch)
        stats.max_batch = max(stats.max_batch, len(batch))
        if self._on_delivered is not None:
            self._on_delivered(batch, result)
        if self._lose_ack() or not self._settle(last, ack=True):
            stats.lost_commits += 1
            self.reconnect()  # the ack never reached the broker: the batch comes again
        else:
            stats.acked += len(batch)
        return result

    def _settle(self, tag: int, *, ack: bool, multiple: bool = True) -> bool:
        """Ack, or nack with requeue, every unsettled delivery up to ``tag`` (only ``tag`` unless
        ``multiple``); ``False`` if the channel is gone (the broker requeues what it held anyway)."""
        from pika.exceptions import AMQPError

        channel = self._channel
        if channel is None or not channel.is_open:
            return False
        try:
            if ack:
                channel.basic_ack(delivery_tag=tag, multiple=multiple)
            else:
                channel.basic_nack(delivery_tag=tag, multiple=multiple, requeue=True)
        except AMQPError as exc:
            logger.warning("settling the batch failed", extra={"ack": ack, "error": repr(exc)})
            return False
        return True

    def ready_messages(self) -> int:
        """Messages waiting in the queue (not counting those out to a consumer, unacked)."""
        assert self._channel is not None, "start() the mapping first"
        method = self._channel.queue_declare(queue=self.config.queue, passive=True).method
        return int(method.message_count)

    def holding(self) -> bool:
        """Messages received and not yet settled (fetched, or in an open batch)."""
        return bool(self._fetched or self._batched)

    def run(self, until: Callable[[], bool], *, idle_timeout_s: float = 60.0) -> None:
        """Deliver batches until ``until()`` holds; fail if nothing arrives for ``idle_timeout_s``."""
        self.start()
        idle_since: int | None = None
        while not until():
            batch = self.next_batch()
            if batch:
                idle_since = None
                self.deliver(batch)
                continue
            now = self.clock.now_ms()
            idle_since = now if idle_since is None else idle_since
            if now - idle_since > idle_timeout_s * 1000:
                raise MappingError(
                    f"no messages from queue {self.config.queue!r} for {idle_timeout_s:.0f}s while messages are "
                    "still outstanding; is the broker up and the queue right?"
                )
