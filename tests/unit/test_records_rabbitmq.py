"""tidemark.records.rabbitmq: Amazon MQ (RabbitMQ) events in, records without positions out."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.events import load_event
from tests.support.rabbitmq import java_medium_date
from tidemark.clock import ManualClock
from tidemark.config import StreamConfig, load_config
from tidemark.embedded.esm.rabbitmq_mapping import message_of
from tidemark.exceptions import MalformedEventError
from tidemark.records.events import parse_event
from tidemark.records.model import Record
from tidemark.records.rabbitmq import parse_rabbitmq_event, timestamp_ms, timestamp_text
from tidemark.records.rabbitmq_esm import RabbitMessage, build_rabbitmq_event, encode_message, message_payload_size
from tidemark.routing import Router
from tidemark.sources import RABBITMQ

BROKER = "arn:aws:mq:us-east-1:123456789012:broker:orders:b-1234a5b6-78cd-901e-2fgh-3i45j6k178l9"
RABBITMQ_CONFIG = Path(__file__).resolve().parents[2] / "config" / "rabbitmq.yaml"
#: ``Date.now()`` (epoch ms) set as the AMQP timestamp, which is in seconds: the year 58,859
MS_AS_SECONDS = 1_795_245_153_000
JAVA_LONG_MAX = 2**63 - 1


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


def _sample() -> dict[str, Any]:
    return copy.deepcopy(load_event("rabbitmq-orders"))


# -- timestamps: Java's medium date format, read without datetime's year limits ------------------


@given(st.integers(0, JAVA_LONG_MAX // 1000).map(lambda seconds: seconds * 1000))
def test_timestamps_render_as_java_does_and_read_back_across_a_java_long(ms: int) -> None:
    text = timestamp_text(ms)
    assert text == java_medium_date(ms)
    assert timestamp_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("Jan 1, 1970, 12:33:41 AM", 2_021_000),  # AWS's documented sample
        ("Nov 21, 2026, 7:12:33 AM", 1_795_245_153_000),
        ("Jan 1, 1970, 12:33:41\u202fAM", 2_021_000),  # JDK 20+ (CLDR 42): a narrow no-break space
        ("Jan 1, 1970, 12:33:41\u00a0AM", 2_021_000),
        ("Jan 1, 1970 12:33:41 AM", 2_021_000),  # JDK 8: no comma after the year
        ("Dec 31, 1999, 12:00:00 PM", 946_641_600_000),
        ("Feb 29, 2000, 11:59:59 PM", 951_868_799_000),
        ("Jan 20, 58859, 9:10:00 AM", MS_AS_SECONDS * 1000),  # a year datetime cannot hold
        ("Aug 17, 292278994, 7:12:55 AM", JAVA_LONG_MAX // 1000 * 1000),  # the last second of a Java Date
    ],
)
def test_java_renderings_read_as_their_instant(text: str, ms: int) -> None:
    assert timestamp_ms(text) == ms


@pytest.mark.parametrize(
    "text",
    [
        "yesterday",
        "Feb 30, 2026, 1:00:00 AM",  # no such day
        "Feb 29, 1900, 1:00:00 AM",  # not a leap year
        "Jan 1, 2026, 13:00:00 PM",
        "Jan 1, 2026, 0:00:00 AM",  # h is 1..12
        "Jan 1, 2026, 1:60:00 AM",
        "Dec 31, 1969, 11:59:59 PM",  # before the epoch: no record timestamp can say it
        "Aug 17, 292278994, 7:12:56 AM",  # past a Java long of ms
        "Jan 1, 99999999999999999999, 1:00:00 AM",
        "Jan 1, \uff12\uff10\uff12\uff16, 1:00:00 AM",  # full-width digits are not Java's
        "",
    ],
)
def test_texts_that_are_no_readable_time_are_none(text: str) -> None:
    assert timestamp_ms(text) is None


def _one(properties: dict[str, Any], data: str = "e30=") -> dict[str, Any]:
    """An event of the sample queue holding one message with these properties (and two more)."""
    event = _sample()
    messages = event["rmqMessagesByQueue"]["orders::/"]
    messages[1]["basicProperties"].update(properties)
    messages[1]["data"] = data
    return event


def test_a_millisecond_timestamp_is_read_as_its_instant_past_the_year_9999() -> None:
    """A producer that put ``Date.now()`` in the timestamp: Java shows the year 58,859. The record
    keeps that instant (the router files it as any time past 9999: see the next tests)."""
    event = _one({"timestamp": java_medium_date(MS_AS_SECONDS * 1000)})
    [batch] = parse_event(event)
    assert [record.timestamp_ms for record in batch.records] == [
        1_795_245_153_000,
        MS_AS_SECONDS * 1000,
        1_795_245_155_000,
        1_795_245_156_000,
    ]
    assert "amqp.timestamp" not in dict(batch.records[1].headers)


@pytest.mark.parametrize(
    ("stamp", "kept"),
    [
        ("yesterday", b"yesterday"),
        ("Dec 31, 1969, 11:59:59 PM", b"Dec 31, 1969, 11:59:59 PM"),
        ("Aug 17, 292278994, 7:12:56 AM", b"Aug 17, 292278994, 7:12:56 AM"),
        (42, b"42"),
        ({"seconds": 1}, b'{"seconds":1}'),
        (2**70, b"1180591620717411303424"),  # past what orjson writes
    ],
)
def test_an_unreadable_timestamp_leaves_the_record_without_one_and_keeps_its_text(stamp: Any, kept: bytes) -> None:
    [batch] = parse_event(_one({"timestamp": stamp}))
    records = batch.records
    assert len(records) == 4 and records[1].value == b"{}" and records[1].key == b"m-1002"
    assert records[1].timestamp_ms == -1
    assert records[1].headers[-1] == ("amqp.timestamp", kept)
    assert [record.timestamp_ms for record in records[::2]] == [1_795_245_153_000, 1_795_245_155_000]


def test_the_local_mapping_renders_and_the_decoder_reads_a_millisecond_timestamp() -> None:
    """``message_of`` (the local mapping's view of a pika delivery) must render what Java does for
    any AMQP timestamp, not fail on a year datetime cannot hold."""
    properties = pika.BasicProperties(message_id="m-ms", timestamp=MS_AS_SECONDS)
    event = build_rabbitmq_event([message_of(False, properties, b"{}")], broker_arn=BROKER, queue="orders")
    [message] = event["rmqMessagesByQueue"]["orders::/"]
    assert (
        message["basicProperties"]["timestamp"] == "Jan 20, 58859, 9:10:00 AM" == java_medium_date(MS_AS_SECONDS * 1000)
    )
    [batch] = parse_rabbitmq_event(event)
    assert batch.records[0].timestamp_ms == MS_AS_SECONDS * 1000


@pytest.mark.parametrize(
    ("seconds", "rendered", "ms"),
    [
        (0, "Jan 1, 1970, 12:00:00 AM", 0),
        (JAVA_LONG_MAX // 1000, "Aug 17, 292278994, 7:12:55 AM", JAVA_LONG_MAX // 1000 * 1000),
        # past that, Java's seconds * 1000 wraps around (a long): 2^63 / 1000 + 1 seconds is
        # -9223372036854775808 + 192 ms, a date in 292,269,055 BC (Julian calendar); Java's "y" is
        # the year of the era, so the text is that of the same day AD, and reads so
        (JAVA_LONG_MAX // 1000 + 1, "Dec 2, 292269055, 4:47:04 PM", 9_223_058_401_519_624_000),
        (2**64 - 1, "Dec 31, 1969, 11:59:59 PM", -1),  # a long of -1 seconds
    ],
)
def test_the_local_mapping_renders_any_amqp_timestamp_as_java_does(seconds: int, rendered: str, ms: int) -> None:
    properties = pika.BasicProperties(message_id="m", timestamp=seconds)
    event = build_rabbitmq_event([message_of(False, properties, b"{}")], broker_arn=BROKER, queue="orders")
    [message] = event["rmqMessagesByQueue"]["orders::/"]
    assert message["basicProperties"]["timestamp"] == rendered
    [batch] = parse_rabbitmq_event(event)
    assert batch.records[0].timestamp_ms == ms
    assert ms == -1 or java_medium_date(ms) == rendered


# -- headers: byte arrays, nested tables ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ({"bytes": [119, 101, 98]}, b"web"),  # a long string (AWS's sample)
        ({"bytes": [-1, 104, 127, -128]}, b"\xffh\x7f\x80"),  # Java's bytes are signed
        ({"bytes": [255, 0]}, b"\xff\x00"),  # also a table {"bytes": [255, 0]}: the event cannot tell
        ({"bytes": []}, b""),
        # a nested table with one key "bytes" holding a long string: its JSON, as the event shows it
        ({"bytes": {"bytes": [97, 98, 99]}}, b'{"bytes":{"bytes":[97,98,99]}}'),
        ({"bytes": "abc"}, b'{"bytes":"abc"}'),
        ({"bytes": [256]}, b'{"bytes":[256]}'),  # no byte array: a table holding an array
        ({"bytes": [-129]}, b'{"bytes":[-129]}'),
        ({"bytes": [True]}, b'{"bytes":[true]}'),
        ({"bytes": [1.0]}, b'{"bytes":[1.0]}'),
        ({"bytes": [1], "more": 2}, b'{"bytes":[1],"more":2}'),
        ([{"count": 1, "queue": {"bytes": [113]}}], b'[{"count":1,"queue":{"bytes":[113]}}]'),  # x-death
        (10, b"10"),
        (None, b"null"),
        ("text", b'"text"'),
        (2**70, b"1180591620717411303424"),
    ],
)
def test_header_values_are_their_bytes_or_their_json(value: Any, kept: bytes) -> None:
    [batch] = parse_event(_one({"headers": {"h": value, "after": {"bytes": [49]}}}))
    assert batch.records[1].headers[:2] == (("h", kept), ("after", b"1"))


def test_the_local_mapping_renders_a_nested_header_table_as_lambda_does() -> None:
    """Lambda shows a nested table as a JSON object whose long strings are byte arrays: the table
    ``{"meta": {"bytes": "abc"}}`` is ``{"bytes": {"bytes": [97, 98, 99]}}`` -- the rendering this
    decoder assumes (Gson's of the RabbitMQ Java client's values), pinned here."""
    headers = {"meta": {"bytes": "abc"}, "list": ["a", 1, {"k": b"\x00"}], "plain": "x"}
    properties = pika.BasicProperties(message_id="m-nested", headers=headers)
    event = build_rabbitmq_event([message_of(False, properties, b"{}")], broker_arn=BROKER, queue="orders")
    [message] = event["rmqMessagesByQueue"]["orders::/"]
    assert message["basicProperties"]["headers"] == {
        "meta": {"bytes": {"bytes": [97, 98, 99]}},
        "list": [{"bytes": [97]}, 1, {"k": {"bytes": [0]}}],
        "plain": {"bytes": [120]},
    }
    [batch] = parse_rabbitmq_event(json.loads(json.dumps(event)))
    assert batch.records[0].headers == (
        ("meta", b'{"bytes":{"bytes":[97,98,99]}}'),
        ("list", b'[{"bytes":[97]},1,{"k":{"bytes":[0]}}]'),
        ("plain", b"x"),
    )


header_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.binary(max_size=8) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)


@given(st.lists(st.dictionaries(st.text(min_size=1, max_size=6), header_values, max_size=3), min_size=1, max_size=5))
def test_nested_headers_fit_the_payload_bound_and_decode(all_headers: list[dict[str, Any]]) -> None:
    """The local mapping's batches stay under the payload limit with nested header values too
    (``message_payload_size`` bounds the rendered message), and every one decodes: a string or byte
    string to its bytes, anything else to its rendering's JSON."""
    batch = [RabbitMessage(b"{}", f"m-{n}", headers=headers) for n, headers in enumerate(all_headers)]
    assert all(message_payload_size(m) >= len(json.dumps(encode_message(m))) for m in batch)
    [parsed] = parse_rabbitmq_event(json.loads(json.dumps(build_rabbitmq_event(batch, broker_arn=BROKER, queue="q"))))
    for record, message in zip(parsed.records, batch, strict=True):
        rendered = encode_message(message)["basicProperties"]["headers"] or {}
        assert [name for name, _data in record.headers] == list(rendered)
        for name, data in record.headers:
            shown = rendered[name]
            items = shown.get("bytes") if isinstance(shown, dict) and len(shown) == 1 else None
            if isinstance(items, list) and all(type(i) is int and -128 <= i <= 255 for i in items):
                assert data == bytes(i & 0xFF for i in items)  # a string, or a table just like one
            else:
                assert json.loads(data) == shown


# -- a message that cannot be read at all: its own dead letter -----------------------------------


@pytest.fixture(scope="module")
def queue_stream() -> StreamConfig:
    return load_config(RABBITMQ_CONFIG).streams[0]


def _reasons(stream: StreamConfig, records: list[Record]) -> list[str]:
    """The dead-letter reasons (``""``: archived) the router gives, checked to be the same one by
    one and column at a time."""
    router = Router(stream, ManualClock())
    one_by_one = [router.route(record) for record in records]
    assert Router(stream, ManualClock()).route_batch(records) == one_by_one
    return [routed.reason for routed in one_by_one]


def _damage_message(index: int, damage: Any) -> dict[str, Any]:
    event = _sample()
    messages = event["rmqMessagesByQueue"]["orders::/"]
    messages[index] = damage(messages[index])
    return event


@pytest.mark.parametrize(
    ("damage", "detail"),
    [
        (lambda m: {**m, "data": "not base64!"}, "data is not valid base64"),
        (lambda m: {**m, "data": None}, "data must be a base64 string"),
        (lambda m: {**m, "basicProperties": None}, "basicProperties must be an object"),
        (lambda m: {**m, "basicProperties": {**m["basicProperties"], "messageId": 7}}, "messageId must be a string"),
        (lambda m: {**m, "basicProperties": {**m["basicProperties"], "headers": [1]}}, "headers must be an object"),
        (
            lambda m: {**m, "basicProperties": {**m["basicProperties"], "messageId": "m-\ud800"}},
            "messageId is not Unicode",
        ),
        (
            lambda m: {**m, "basicProperties": {**m["basicProperties"], "headers": {"tidemark.undecodable": 1}}},
            "header 'tidemark.undecodable' is reserved",
        ),
        (lambda _m: "not an object", "not an object"),
    ],
)
def test_a_message_that_cannot_be_read_is_a_dead_letter_of_its_own(
    queue_stream: StreamConfig, damage: Any, detail: str
) -> None:
    """Not something Lambda sends -- but were it sent, it is that message's problem: the batch
    decodes, the message becomes a dead letter naming what was wrong, the others are archived."""
    [batch] = parse_event(_damage_message(1, damage))
    records = batch.records
    assert len(records) == 4
    assert [record.key for record in records[::2]] == [b"m-1001", b"m-1001"]
    assert _reasons(queue_stream, records) == ["", "undecodable_message", "", "missing_message_id"]
    routed = Router(queue_stream, ManualClock()).route(records[1])
    assert routed.detail.startswith("undecodable_message: message #1 of 'orders::/': ") and detail in routed.detail
    assert records[1].offset == -1 and records[1].value  # the message as the event showed it, for re-drive


def test_a_dead_letter_of_an_unreadable_message_keeps_the_message_as_shown_but_redelivered() -> None:
    """Its value is the message's JSON without ``redelivered``, so a redelivery of it is the same
    record (deduplicated by its id, or its body's digest when it has none)."""
    damaged = _damage_message(1, lambda m: {**m, "data": "not base64!"})
    again = copy.deepcopy(damaged)
    again["rmqMessagesByQueue"]["orders::/"][1]["redelivered"] = True
    [first], [second] = parse_event(damaged), parse_event(again)
    assert first.records[1] == second.records[1]
    shown = json.loads(first.records[1].value)
    assert shown == {
        "basicProperties": damaged["rmqMessagesByQueue"]["orders::/"][1]["basicProperties"],
        "data": "not base64!",
    }
    assert first.records[1].key == b"m-1002"


def test_a_kafka_header_named_like_the_marker_is_only_a_header(queue_stream: StreamConfig) -> None:
    from tidemark.records.rabbitmq import UNDECODABLE_HEADER

    kafka = load_config(Path(__file__).resolve().parents[2] / "config" / "tidemark.yaml").streams[0]
    value = b'{"order_id":"o-1","created_at":"2026-11-21T07:12:33Z"}'
    record = Record("orders", 0, 7, 1_795_245_153_000, value, b"k", ((UNDECODABLE_HEADER, b"forged"),))
    assert Router(kafka, ManualClock()).route(record).reason == ""


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8) | st.just("\ud800"),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
byte_lists = st.lists(st.integers(-200, 300), max_size=4).map(lambda items: {"bytes": items})
odd_properties = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": json_values | st.sampled_from(["Jan 20, 58859, 9:10:00 AM", "Jan 1, 1970, 12:33:41\u202fAM"]),
        "headers": json_values | st.dictionaries(st.text(max_size=6), json_values | byte_lists, max_size=3),
        "messageId": json_values,
        "contentType": json_values,
        "priority": json_values,
    },
)
odd_messages = (
    st.fixed_dictionaries(
        {"basicProperties": odd_properties | json_values},
        optional={
            "data": st.sampled_from(["e30=", "", "bm90IGpzb24=", "!!"]) | json_values,
            "redelivered": json_values,
        },
    )
    | json_values
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(odd_messages, min_size=1, max_size=6))
def test_every_message_decodes_or_is_its_own_dead_letter_whatever_its_fields(
    queue_stream: StreamConfig, messages: list[Any]
) -> None:
    """Totality: whatever each message holds, the event decodes to one record per message, and
    the router archives or dead-letters each (never an exception for the batch)."""
    event = {"eventSource": "aws:rmq", "eventSourceArn": BROKER, "rmqMessagesByQueue": {"orders::/": messages}}
    [batch] = parse_event(event)
    assert len(batch.records) == len(messages)
    assert all(isinstance(record.value, bytes) and -1 <= record.timestamp_ms < 2**63 for record in batch.records)
    assert len(_reasons(queue_stream, batch.records)) == len(messages)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda e: e.update(eventSourceArn="arn:aws:kafka:us-east-1:1:cluster/x"), "not an Amazon MQ broker ARN"),
        (lambda e: e.update(rmqMessagesByQueue={"orders": []}), "is not '<queue>::<virtual host>'"),
        (lambda e: e.update(rmqMessagesByQueue={"orders::/": {}}), "must be a list of messages"),
        (lambda e: e.update(rmqMessagesByQueue=[]), "rmqMessagesByQueue must be an object"),
    ],
)
def test_an_event_that_is_not_a_mapping_event_is_refused_naming_the_field(damage: Any, message: str) -> None:
    """What is wrong with the event itself, not with one of its messages, refuses the event."""
    event = _sample()
    damage(event)
    with pytest.raises(MalformedEventError, match=message):
        parse_event(event)
