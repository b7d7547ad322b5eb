"""Build Amazon MQ (RabbitMQ) event source mapping events: the inverse of ``rabbitmq.py``.

The local Amazon MQ mapping, the tests and the benchmarks deliver messages to the archiver
through this one encoder, in the shape Lambda delivers: messages grouped under
``"<queue>::<virtual host>"``, the body base64-encoded, AMQP properties under
``basicProperties`` (every property present, ``null`` when unset), byte-array headers as
``{"bytes": [...]}``, and ``redelivered``. Header values may nest: a table is a JSON object and an
array a JSON array of values rendered the same way, so ``{"meta": {"bytes": "abc"}}`` is
``{"bytes": {"bytes": [97, 98, 99]}}`` (as Lambda shows it: ``records.rabbitmq``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidemark.records.rabbitmq import EVENT_SOURCE, timestamp_text

# What one message adds to the invocation payload beyond its base64 body and its headers: the
# property names, null values and punctuation of the JSON encoding (measured, rounded up).
MESSAGE_OVERHEAD_BYTES = 420

#: an AMQP header value as a message carries it: a (long) string or byte string, a number, a
#: boolean, void, or a table or array of such values
HeaderValue = bytes | str | int | float | bool | None | Mapping[str, "HeaderValue"] | Sequence["HeaderValue"]


@dataclass(frozen=True, slots=True)
class RabbitMessage:
    """A message as the broker delivers it: body, AMQP properties, and whether it was delivered before."""

    body: bytes
    message_id: str | None = None
    timestamp_ms: int = -1
    headers: Mapping[str, HeaderValue] = field(default_factory=dict)
    properties: Mapping[str, Any] = field(default_factory=dict)  # contentType, correlationId, ... (camelCase)
    redelivered: bool = False


def _header(value: HeaderValue) -> Any:
    """The mapping renders AMQP byte strings (long strings included) as byte arrays, tables as
    objects and arrays as arrays of values rendered so."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, bytes):
        return {"bytes": list(value)}
    if isinstance(value, Mapping):
        return {str(name): _header(item) for name, item in value.items()}
    if isinstance(value, Sequence):
        return [_header(item) for item in value]
    return value


def _header_bound(value: HeaderValue) -> int:
    """Bytes at most of ``value`` rendered into the event's JSON (``json.dumps``: ASCII, ", " and
    ": " between items): a byte is at most "255, " and a name's character at most 12 bytes (a
    surrogate pair, escaped)."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, bytes):
        return 5 * len(value) + 16
    if isinstance(value, Mapping):
        return 2 + sum(12 * len(str(name)) + 6 + _header_bound(item) for name, item in value.items())
    if isinstance(value, Sequence):
        return 2 + sum(_header_bound(item) + 2 for item in value)
    return 32 if isinstance(value, float) else len(str(value)) + 2


def encode_message(message: RabbitMessage) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "contentType": None,
        "contentEncoding": None,
        "headers": {name: _header(value) for name, value in message.headers.items()} or None,
        "deliveryMode": None,
        "priority": None,
        "correlationId": None,
        "replyTo": None,
        "expiration": None,
        "messageId": message.message_id,
        "timestamp": timestamp_text(message.timestamp_ms),
        "type": None,
        "userId": None,
        "appId": None,
        "clusterId": None,
        "bodySize": len(message.body),
    }
    properties.update(message.properties)
    return {
        "basicProperties": properties,
        "redelivered": message.redelivered,
        "data": base64.b64encode(message.body).decode("ascii"),
    }


def message_payload_size(message: RabbitMessage) -> int:
    """Bytes ``message`` adds to an invocation payload (at most: base64 grows data by 4/3)."""
    # a character of a name or an id escapes to at most 12 bytes (a surrogate pair)
    headers = sum(12 * len(name) + 6 + _header_bound(value) for name, value in message.headers.items())
    return MESSAGE_OVERHEAD_BYTES + 4 * ((len(message.body) + 2) // 3) + 12 * len(message.message_id or "") + headers


def build_rabbitmq_event(
    messages: Iterable[RabbitMessage], *, broker_arn: str, queue: str, virtual_host: str = "/"
) -> dict[str, Any]:
    """One event holding ``messages`` of one queue, in delivery order."""
    return {
        "eventSource": EVENT_SOURCE,
        "eventSourceArn": broker_arn,
        "rmqMessagesByQueue": {f"{queue}::{virtual_host}": [encode_message(message) for message in messages]},
    }
