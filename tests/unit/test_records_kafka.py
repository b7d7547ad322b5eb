"""tidemark.records.kafka: MSK / self-managed Kafka ESM events to per-partition batches."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.events import load_event, msk_event
from tidemark.exceptions import MalformedEventError, TidemarkError
from tidemark.records import PartitionBatch, Record, parse_kafka_event
from tidemark.records.esm import encode_record

WEB = (("source", b"web"),)


def _order(offset: int, key: bytes | None, value: bytes, timestamp: int, partition: int = 0) -> Record:
    headers = WEB if partition == 0 else ()
    return Record("orders", partition, offset, timestamp, value, key, headers)


MSK_BATCHES = [
    PartitionBatch(
        "orders",
        0,
        [
            _order(
                0,
                b"o-1000",
                b'{"order_id":"o-1001","customer_id":"c-17","product_id":"p-3","price":12.5,"quantity":2,'
                b'"created_at":"2026-11-21T07:12:33Z"}',
                1_795_245_153_000,
            ),
            _order(
                1,
                b"o-1001",
                b'{"order_id":"o-1002","customer_id":"c-42","product_id":"p-1","price":99.0,"quantity":1,'
                b'"created_at":1795245300}',
                1_795_245_300_100,
            ),
            _order(
                2,
                b"o-1002",
                b'{"order_id":"o-0999","customer_id":"c-8","product_id":"p-3","price":12.5,"quantity":1,'
                b'"created_at":"2026-11-21T03:59:59.500Z"}',
                1_795_245_400_000,
            ),
            _order(3, b"o-1003", b"not json at all", 1_795_245_500_000),
            _order(
                4,
                b"o-1004",
                b'{"order_id":"o-1003","customer_id":"c-9","product_id":"p-2","price":5.25,"quantity":4}',
                1_795_245_600_000,
            ),
        ],
    ),
    PartitionBatch(
        "orders",
        1,
        [
            _order(
                7,
                None,
                b'{"order_id":"o-2001","customer_id":"c-1","product_id":"p-9","price":3.0,"quantity":3,'
                b'"created_at":1795245700000}',
                1_795_245_700_000,
                partition=1,
            )
        ],
    ),
]


def test_msk_sample_event() -> None:
    assert parse_kafka_event(load_event("msk-orders")) == MSK_BATCHES


def test_self_managed_sample_event() -> None:
    assert parse_kafka_event(load_event("self-managed-orders")) == [
        PartitionBatch(
            "orders",
            2,
            [
                Record(
                    topic="orders",
                    partition=2,
                    offset=40,
                    timestamp_ms=1_795_248_000_000,
                    value=b'{"order_id":"o-3001","customer_id":"c-5","product_id":"p-1","price":99.0,"quantity":2,'
                    b'"created_at":"2026-11-21T08:00:00+00:00"}',
                    key=b"o-3001",
                    headers=(("trace-id", b"abc123"),),
                )
            ],
        )
    ]


def test_powertools_self_managed_fixture() -> None:
    # Powertools' own self-managed sample (tests/events/kafkaEventSelfManaged.json, verbatim)
    # carries "aws:SelfManagedKafka", where the AWS docs show "SelfManagedKafka".
    event = load_event("self-managed-powertools")
    assert event["eventSource"] == "aws:SelfManagedKafka"
    assert parse_kafka_event(event) == [
        PartitionBatch(
            "mytopic",
            0,
            [
                Record(
                    topic="mytopic",
                    partition=0,
                    offset=15,
                    timestamp_ms=1_545_084_650_987,
                    value=b'{"key":"value"}',
                    key=b"recordKey",
                    headers=(("headerKey", b"headerValue"),),
                )
            ],
        )
    ]


@pytest.mark.parametrize(
    ("name", "source"),
    [("self-managed-orders", "SelfManagedKafka"), ("self-managed-powertools", "aws:SelfManagedKafka")],
)
def test_both_self_managed_event_source_spellings_are_accepted(name: str, source: str) -> None:
    event = load_event(name)
    assert event["eventSource"] == source
    (batch,) = parse_kafka_event(event)
    assert batch.records
    # The spelling alone decides nothing: each sample parses the same with the other one.
    other = "aws:SelfManagedKafka" if source == "SelfManagedKafka" else "SelfManagedKafka"
    assert parse_kafka_event({**event, "eventSource": other}) == [batch]


def test_null_key_empty_key_and_binary_headers_round_trip() -> None:
    records = [
        Record("orders", 0, 10, 1_000, b"\x00\xff\n", None, (("bin", bytes(range(256))), ("dup", b"1"), ("dup", b"2"))),
        Record("orders", 0, 11, 1_001, b"", b"", ()),
        Record("orders", 0, 12, 1_002, b"v", b"\xfe\xff", (("empty", b""),)),
    ]
    assert parse_kafka_event(msk_event(records)) == [PartitionBatch("orders", 0, records)]


def test_records_are_grouped_by_topic_partition_in_delivery_order() -> None:
    records = [
        Record("orders", 1, 5, 1, b"a"),
        Record("orders", 0, 9, 1, b"b"),
        Record("payments", 1, 3, 1, b"c"),
        Record("orders", 1, 6, 1, b"d"),
        Record("orders", 0, 10, 1, b"e"),
    ]
    assert parse_kafka_event(msk_event(records, self_managed=True)) == [
        PartitionBatch("orders", 1, [records[0], records[3]]),
        PartitionBatch("orders", 0, [records[1], records[4]]),
        PartitionBatch("payments", 1, [records[2]]),
    ]


def test_grouping_follows_each_records_own_topic_and_partition() -> None:
    # The 'topic-partition' group label is only a label: a record is filed by its own fields.
    event = msk_event([Record("orders", 0, 1, 1, b"a")])
    event["records"]["orders-0"].append(encode_record(Record("orders", 4, 2, 1, b"b")))
    assert parse_kafka_event(event) == [
        PartitionBatch("orders", 0, [Record("orders", 0, 1, 1, b"a")]),
        PartitionBatch("orders", 4, [Record("orders", 4, 2, 1, b"b")]),
    ]


def test_duplicate_offsets_are_kept_for_the_writer_to_dedupe() -> None:
    records = [Record("orders", 0, 1, 1, b"a"), Record("orders", 0, 1, 1, b"a"), Record("orders", 0, 0, 1, b"z")]
    assert parse_kafka_event(msk_event(records)) == [PartitionBatch("orders", 0, records)]


def test_empty_records_mapping_gives_no_batches() -> None:
    assert parse_kafka_event({**load_event("msk-orders"), "records": {}}) == []


def test_timestamp_minus_one_is_accepted() -> None:
    record = Record("orders", 0, 3, -1, b"{}")
    assert parse_kafka_event(msk_event([record])) == [PartitionBatch("orders", 0, [record])]


def test_signed_header_bytes_are_read_as_unsigned() -> None:
    event = msk_event([Record("orders", 0, 1, 1, b"v")])
    event["records"]["orders-0"][0]["headers"] = [{"h": [-1, -128, 0, 127]}]
    (batch,) = parse_kafka_event(event)
    assert batch.records[0].headers == (("h", b"\xff\x80\x00\x7f"),)


def test_missing_or_null_headers_mean_no_headers() -> None:
    event = msk_event([Record("orders", 0, 1, 1, b"a"), Record("orders", 0, 2, 1, b"b")])
    del event["records"]["orders-0"][0]["headers"]
    event["records"]["orders-0"][1]["headers"] = None
    (batch,) = parse_kafka_event(event)
    assert [r.headers for r in batch.records] == [(), ()]


# -- malformed events -----------------------------------------------------------------------------


def malformed(event: Any) -> str:
    with pytest.raises(MalformedEventError) as caught:
        parse_kafka_event(event)
    assert isinstance(caught.value, TidemarkError)
    return str(caught.value)


def one_record_event(**overrides: Any) -> dict[str, Any]:
    event = msk_event([Record("orders", 0, 5, 1_795_245_153_000, b'{"a":1}', b"k", WEB)])
    event["records"]["orders-0"][0].update(overrides)
    return event


@pytest.mark.parametrize(("event", "kind"), [([], "list"), ("event", "str"), (None, "NoneType"), (42, "int")])
def test_event_that_is_not_an_object(event: Any, kind: str) -> None:
    assert malformed(event) == f"expected an event object, got {kind}"


@pytest.mark.parametrize(
    "source", ["aws:sqs", "aws:kinesis", None, "", "aws:Kafka", "aws:selfManagedKafka", "selfmanagedkafka"]
)
def test_wrong_event_source(source: Any) -> None:
    event = {**load_event("msk-orders"), "eventSource": source}
    assert malformed(event) == (
        f"not a Kafka event source mapping event: eventSource={source!r} "
        "(expected one of ['SelfManagedKafka', 'aws:SelfManagedKafka', 'aws:kafka'])"
    )


def test_missing_event_source() -> None:
    event = load_event("msk-orders")
    del event["eventSource"]
    assert malformed(event).startswith("not a Kafka event source mapping event: eventSource=None")


@pytest.mark.parametrize("records", [[], None, "orders-0", 3])
def test_records_not_a_mapping(records: Any) -> None:
    event = {**load_event("msk-orders"), "records": records}
    assert malformed(event) == "event.records must be an object keyed by 'topic-partition'"


def test_records_missing() -> None:
    event = load_event("self-managed-orders")
    del event["records"]
    assert malformed(event) == "event.records must be an object keyed by 'topic-partition'"


def test_group_that_is_not_a_list() -> None:
    event = load_event("msk-orders")
    event["records"]["orders-1"] = {"offset": 1}
    assert malformed(event) == "event.records group #1 must be a list"


def test_group_holding_a_non_object() -> None:
    event = load_event("msk-orders")
    event["records"]["orders-0"].append("record")
    assert malformed(event) == "event.records group #0 holds a non-object"


@pytest.mark.parametrize("field", ["topic", "partition", "offset", "timestamp"])
def test_missing_required_field(field: str) -> None:
    event = one_record_event()
    del event["records"]["orders-0"][0][field]
    assert malformed(event) == f"record #0: missing field {field!r}"


def test_record_position_counts_across_groups() -> None:
    event = load_event("msk-orders")
    del event["records"]["orders-1"][0]["offset"]
    assert malformed(event) == "record #5: missing field 'offset'"


@pytest.mark.parametrize("topic", ["../etc", "a/b", "", "x" * 250, "orders topic", "orders\n", 5, None])
def test_invalid_topic_name(topic: Any) -> None:
    assert malformed(one_record_event(topic=topic)) == f"record #0: invalid topic name {topic!r}"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("partition", -1),
        ("partition", "0"),
        ("partition", 1.0),
        ("partition", True),
        ("offset", -1),
        ("offset", "5"),
        ("offset", None),
        ("offset", False),
    ],
)
def test_partition_and_offset_must_be_non_negative_integers(field: str, value: Any) -> None:
    assert malformed(one_record_event(**{field: value})) == (
        f"record #0: {field} must be a non-negative integer, got {value!r}"
    )


@pytest.mark.parametrize("timestamp", ["1763709153000", 1.5, None, True])
def test_timestamp_must_be_an_integer(timestamp: Any) -> None:
    assert malformed(one_record_event(timestamp=timestamp)) == (
        f"record #0: timestamp must be an integer, got {timestamp!r}"
    )


@pytest.mark.parametrize(
    ("field", "encoded"),
    [
        ("value", "abc"),  # bad padding
        ("value", "not base64!"),
        ("value", "@@@@"),  # no base64 characters at all
        ("value", "aGVsbG8=garbage*"),
        ("value", 12345),
        ("key", "a"),
        ("key", "k%y!"),
        ("key", ["a"]),
    ],
)
def test_non_base64_key_or_value(field: str, encoded: Any) -> None:
    assert malformed(one_record_event(**{field: encoded})).startswith("record #0: key/value is not valid base64 (")


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (["source"], "record #0: each header must be an object"),
        ([{"h": "web"}], "record #0: header 'h' is not a byte array ("),
        ([{"h": [256]}], "record #0: header 'h' is not a byte array ("),
        ([{"h": [1, "2"]}], "record #0: header 'h' is not a byte array ("),
        # ({"h": None} is a null header value: tests/unit/test_tombstone_records.py)
    ],
)
def test_malformed_headers(headers: Any, message: str) -> None:
    assert malformed(one_record_event(headers=headers)).startswith(message)


def test_the_input_event_is_not_modified() -> None:
    event = load_event("msk-orders")
    before = copy.deepcopy(event)
    parse_kafka_event(event)
    assert event == before
