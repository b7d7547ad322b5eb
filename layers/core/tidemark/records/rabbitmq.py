"""Adapter for Amazon MQ (RabbitMQ) event source mapping events.

Lambda delivers ``{"eventSource": "aws:rmq", "eventSourceArn": <broker>, "rmqMessagesByQueue":
{"<queue>::<virtual host>": [message, ...]}}``; each message holds ``basicProperties`` (the AMQP
properties: ``messageId``, ``headers``, ``timestamp`` as ``"Jan 1, 1970, 12:33:41 AM"``, ...),
``redelivered`` and the body as base64 ``data``. A queue is one partition (0) and has no
offsets: records leave here with position ``-1``, and the partition writer numbers the ones it
accepts (``tidemark.dedupe``)::

    "<queue>::<vhost>" -> topic (the stream's source.match_name)     partition -> 0
    messageId -> key          data -> value          timestamp -> timestamp (ms; -1 when null)
    headers -> headers: a byte array ({"bytes": [...]}) as its bytes, any other value as its JSON
    the other set properties -> headers "amqp.<property>" (content_type, correlation_id, ...)

``redelivered`` is not kept: it says how the message came, not what it is (a redelivery is
told by its id). Parsing goes through Powertools' ``RabbitMQEvent`` data class; anything
malformed raises ``MalformedEventError`` (not an event the mapping sends: failing it requeues
the messages, nothing is lost).
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import orjson

from tidemark.exceptions import MalformedEventError
from tidemark.records.model import PartitionBatch, Record
from tidemark.sources import RABBITMQ

EVENT_SOURCE = "aws:rmq"
BROKER_ARN = re.compile(r"^arn:aws[a-z-]*:mq:[a-z0-9-]+:\d{12}:broker:[^:]+:[^:]+$")
#: the AMQP properties kept as ``amqp.<name>`` headers, in this order (messageId is the key,
#: headers and timestamp have their own fields, bodySize is the value's length)
PROPERTIES = (
    ("contentType", "content_type"),
    ("contentEncoding", "content_encoding"),
    ("deliveryMode", "delivery_mode"),
    ("priority", "priority"),
    ("correlationId", "correlation_id"),
    ("replyTo", "reply_to"),
    ("expiration", "expiration"),
    ("type", "type"),
    ("userId", "user_id"),
    ("appId", "app_id"),
    ("clusterId", "cluster_id"),
)
PROPERTY_PREFIX = "amqp."
TIMESTAMP_FORMAT = "%b %d, %Y, %I:%M:%S %p"  # "Jan 1, 1970, 12:33:41 AM", UTC


def is_rabbitmq_event(event: Any) -> bool:
    return isinstance(event, Mapping) and event.get("eventSource") == EVENT_SOURCE


def timestamp_ms(text: object, position: int) -> int:
    """The AMQP timestamp as the mapping renders it (seconds, UTC) in epoch ms; -1 when unset."""
    if text is None:
        return -1
    if not isinstance(text, str):
        raise MalformedEventError(f"message #{position}: timestamp must be a string, got {text!r}")
    try:
        return _parsed_ms(text)
    except ValueError:
        raise MalformedEventError(
            f"message #{position}: timestamp {text!r} is not like 'Jan 1, 1970, 12:33:41 AM'"
        ) from None


@lru_cache(maxsize=4096)
def _parsed_ms(text: str) -> int:
    """``strptime`` costs ~25 us; the messages of a batch share few seconds."""
    return int(datetime.strptime(text, TIMESTAMP_FORMAT).replace(tzinfo=UTC).timestamp()) * 1000


def timestamp_text(ms: int) -> str | None:
    """``timestamp_ms`` backwards (the local mapping renders timestamps so)."""
    if ms < 0:
        return None
    moment = datetime.fromtimestamp(ms // 1000, UTC)  # Java's medium format: "MMM d, yyyy, h:mm:ss a"
    return f"{moment:%b} {moment.day}, {moment.year}, {moment.hour % 12 or 12}:{moment:%M:%S %p}"


def _header_bytes(name: str, value: object, position: int) -> bytes:
    if isinstance(value, Mapping) and set(value) == {"bytes"}:
        data = value["bytes"]
        if not isinstance(data, list):
            raise MalformedEventError(f"message #{position}: header {name!r} bytes must be a list")
        try:
            return bytes(item & 0xFF if isinstance(item, int) and not isinstance(item, bool) else item for item in data)
        except (TypeError, ValueError) as exc:
            raise MalformedEventError(f"message #{position}: header {name!r} is not a byte array ({exc})") from None
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise MalformedEventError(f"message #{position}: header {name!r} has no JSON value ({exc})") from None


def _convert(message: Mapping[str, Any], topic: str, position: int) -> Record:
    properties = message.get("basicProperties")
    if not isinstance(properties, Mapping):
        raise MalformedEventError(f"message #{position}: basicProperties must be an object")
    data = message.get("data")
    try:
        value = binascii.a2b_base64(data, strict_mode=True) if isinstance(data, str) else None
    except (binascii.Error, ValueError) as exc:
        raise MalformedEventError(f"message #{position}: data is not valid base64 ({exc})") from None
    if value is None:
        raise MalformedEventError(f"message #{position}: data must be a base64 string, got {data!r}")
    message_id = properties.get("messageId")
    if message_id is not None and not isinstance(message_id, str):
        raise MalformedEventError(f"message #{position}: messageId must be a string, got {message_id!r}")
    raw_headers = properties.get("headers") or {}
    if not isinstance(raw_headers, Mapping):
        raise MalformedEventError(f"message #{position}: headers must be an object")
    headers = [(str(name), _header_bytes(str(name), item, position)) for name, item in raw_headers.items()]
    for field, name in PROPERTIES:
        item = properties.get(field)
        if item is not None:
            text = item if isinstance(item, str) else orjson.dumps(item).decode()
            headers.append((PROPERTY_PREFIX + name, text.encode("utf-8")))
    return Record(
        topic,
        0,
        -1,  # the partition writer numbers accepted messages
        timestamp_ms(properties.get("timestamp"), position),
        value,
        None if message_id is None else message_id.encode("utf-8"),
        tuple(headers),
    )


def parse_rabbitmq_event(event: Any) -> list[PartitionBatch]:
    """One batch per queue, messages in delivery order (positions unassigned)."""
    if not is_rabbitmq_event(event):
        raise MalformedEventError(f"not an Amazon MQ (RabbitMQ) event: eventSource={event.get('eventSource')!r}")
    arn = event.get("eventSourceArn")
    if not isinstance(arn, str) or BROKER_ARN.fullmatch(arn) is None:
        raise MalformedEventError(f"eventSourceArn {arn!r} is not an Amazon MQ broker ARN")
    queues = event.get("rmqMessagesByQueue")
    if not isinstance(queues, Mapping):
        raise MalformedEventError("rmqMessagesByQueue must be an object keyed by '<queue>::<virtual host>'")
    for topic, messages in queues.items():
        if not isinstance(messages, list) or not all(isinstance(message, Mapping) for message in messages):
            raise MalformedEventError(f"rmqMessagesByQueue[{topic!r}] must be a list of message objects")
    # Imported here: Powertools' data classes package costs ~25 ms of import, which a Kafka
    # stream's cold start should not pay.
    from aws_lambda_powertools.utilities.data_classes.rabbit_mq_event import RabbitMQEvent

    parsed = RabbitMQEvent(dict(event))
    batches = []
    position = 0
    for topic, messages in parsed.rmq_messages_by_queue.items():
        queue, separator, vhost = topic.partition("::")
        if not separator or not queue or not vhost:
            raise MalformedEventError(f"queue key {topic!r} is not '<queue>::<virtual host>'")
        records = []
        for message in messages:
            records.append(_convert(message.raw_event, topic, position))
            position += 1
        broker = arn.split(":broker:", 1)[1]
        batches.append(PartitionBatch(topic, 0, records, kind=RABBITMQ, source=f"{broker}/{topic}"))
    return batches
