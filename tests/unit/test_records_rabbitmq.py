"""tidemark.records.rabbitmq: Amazon MQ (RabbitMQ) events in, records without positions out."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.events import load_event
from tidemark.exceptions import MalformedEventError
from tidemark.records.events import parse_event
from tidemark.records.rabbitmq import parse_rabbitmq_event, timestamp_ms, timestamp_text
from tidemark.records.rabbitmq_esm import RabbitMessage, build_rabbitmq_event, encode_message, message_payload_size
from tidemark.sources import RABBITMQ

BROKER = "arn:aws:mq:us-east-1:123456789012:broker:orders:b-1234a5b6-78cd-901e-2fgh-3i45j6k178l9"


def test_the_sample_event_becomes_one_queue_batch_without_positions() -> None:
    [batch] = parse_event(load_event("rabbitmq-orders"))
    assert (batch.topic, batch.partition, batch.kind) == ("orders::/", 0, RABBITMQ)
    assert batch.source == "orders:b-1234a5b6-78cd-901e-2fgh-3i45j6k178l9/orders::/"
    assert [record.offset for record in batch.records] == [-1] * 4
    assert [record.key for record in batch.records] == [b"m-1001", b"m-1002", b"m-1001", None]
    first = batch.records[0]
    assert first.timestamp_ms == 1795245153000
    assert first.headers == (
        ("source", b"web"),
        ("retries", b"0"),  # a number header: its JSON
        ("amqp.content_type", b"application/json"),
        ("amqp.delivery_mode", b"2"),
        ("amqp.priority", b"0"),
        ("amqp.user_id", b"AIDACKCEVSQ6C2EXAMPLE"),
    )
    assert first.value.startswith(b'{"order_id":"o-1001"')


def test_aws_documented_example_parses() -> None:
    """The example of AWS's documentation (and Powertools' tests): a byte-array header, a number
    header, no message id, an expiration."""
    event = {
        "eventSource": "aws:rmq",
        "eventSourceArn": "arn:aws:mq:us-west-2:112556298976:broker:test:b-9bcfa592-423a-4942-879d-eb284b418fc8",
        "rmqMessagesByQueue": {
            "test::/": [
                {
                    "basicProperties": {
                        "contentType": "text/plain",
                        "contentEncoding": None,
                        "headers": {"header1": {"bytes": [118, 97, 108, 117, 101, 49]}, "numberInHeader": 10},
                        "deliveryMode": 1,
                        "priority": 34,
                        "correlationId": None,
                        "replyTo": None,
                        "expiration": "60000",
                        "messageId": None,
                        "timestamp": "Jan 1, 1970, 12:33:41 AM",
                        "type": None,
                        "userId": "AIDACKCEVSQ6C2EXAMPLE",
                        "appId": None,
                        "clusterId": None,
                        "bodySize": 80,
                    },
                    "redelivered": False,
                    "data": "eyJ0aW1lb3V0IjowLCJkYXRhIjoiQ1pybWYwR3c4T3Y0YnFMUXhENEUifQ==",
                }
            ]
        },
    }
    [batch] = parse_rabbitmq_event(event)
    [record] = batch.records
    assert (record.key, record.timestamp_ms) == (None, 2_021_000)
    assert ("header1", b"value1") in record.headers and ("numberInHeader", b"10") in record.headers
    assert ("amqp.expiration", b"60000") in record.headers


messages = st.builds(
    RabbitMessage,
    st.binary(max_size=200),
    st.none() | st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=30),
    st.just(-1) | st.integers(0, 4_000_000_000).map(lambda seconds: seconds * 1000),  # -1: no timestamp
    st.dictionaries(st.sampled_from(["a", "trace"]), st.binary(max_size=10), max_size=2),
)


@given(st.lists(messages, min_size=1, max_size=20))
def test_events_built_for_local_delivery_are_what_the_adapter_reads(batch: list[RabbitMessage]) -> None:
    [parsed] = parse_rabbitmq_event(build_rabbitmq_event(batch, broker_arn=BROKER, queue="orders", virtual_host="prod"))
    assert parsed.topic == "orders::prod"
    assert [(r.value, r.key, r.timestamp_ms) for r in parsed.records] == [
        (m.body, None if m.message_id is None else m.message_id.encode(), m.timestamp_ms) for m in batch
    ]
    assert [dict(r.headers) for r in parsed.records] == [dict(m.headers) for m in batch]
    assert all(message_payload_size(m) >= len(json.dumps(encode_message(m))) for m in batch)


@given(st.integers(0, 253_402_300_799).map(lambda seconds: seconds * 1000))
def test_timestamps_render_and_read_back(ms: int) -> None:
    assert timestamp_ms(timestamp_text(ms), 0) == ms


def _sample() -> dict[str, Any]:
    return copy.deepcopy(load_event("rabbitmq-orders"))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda e: e.update(eventSourceArn="arn:aws:kafka:us-east-1:1:cluster/x"), "not an Amazon MQ broker ARN"),
        (lambda e: e.update(rmqMessagesByQueue={"orders": []}), "is not '<queue>::<virtual host>'"),
        (lambda e: e.update(rmqMessagesByQueue={"orders::/": {}}), "must be a list of message objects"),
        (lambda e: e["rmqMessagesByQueue"]["orders::/"][0].update(data="not base64!"), "data is not valid base64"),
        (
            lambda e: e["rmqMessagesByQueue"]["orders::/"][1]["basicProperties"].update(timestamp="yesterday"),
            "message #1: timestamp 'yesterday'",
        ),
        (
            lambda e: e["rmqMessagesByQueue"]["orders::/"][0]["basicProperties"].update(messageId=7),
            "messageId must be a string",
        ),
        (lambda e: e["rmqMessagesByQueue"]["orders::/"][0].update(basicProperties=None), "basicProperties"),
    ],
)
def test_malformed_events_are_refused_naming_the_field(damage: Any, message: str) -> None:
    event = _sample()
    damage(event)
    with pytest.raises(MalformedEventError, match=message):
        parse_event(event)
