"""Build Amazon MQ (RabbitMQ) event source mapping events: the inverse of ``rabbitmq.py``.

The local Amazon MQ mapping, the tests and the benchmarks deliver messages to the archiver
through this one encoder, in the shape Lambda delivers: messages grouped under
``"<queue>::<virtual host>"``, the body base64-encoded, AMQP properties under
``basicProperties`` (every property present, ``null`` when unset), byte-array headers as
``{"bytes": [...]}``, and ``redelivered``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.records.rabbitmq import EVENT_SOURCE, timestamp_text

# What one message adds to the invocation payload beyond its base64 body and its headers: the
# property names, null values and punctuation of the JSON encoding (measured, rounded up).
MESSAGE_OVERHEAD_BYTES = 420


@dataclass(frozen=True, slots=True)
class RabbitMessage:
    """A message as the broker delivers it: body, AMQP properties, and whether it was delivered before."""

    body: bytes
    message_id: str | None = None
    timestamp_ms: int = -1
    headers: Mapping[str, bytes | int | str | bool | None] = field(default_factory=dict)
    properties: Mapping[str, Any] = field(default_factory=dict)  # contentType, correlationId, ... (camelCase)
    redelivered: bool = False


def _header(value: bytes | int | str | bool | None) -> Any:
    # The mapping renders AMQP byte strings (long strings included) as byte arrays.
    if isinstance(value, str):
        value = value.encode("utf-8")
    return {"bytes": list(value)} if isinstance(value, bytes) else value


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
    # a character of a name or an id escapes to at most 12 bytes (a surrogate pair); a byte-array
    # header's byte to at most 5 ("255, ")
    headers = sum(12 * len(name) + 5 * len(str(value)) + 24 for name, value in message.headers.items())
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
