"""tidemark.records.kinesis: Kinesis Data Streams ESM events to per-shard batches (and back)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.events import kinesis_event, load_event
from tidemark.exceptions import MalformedEventError
from tidemark.records import PartitionBatch, Record, parse_event, parse_kafka_event, parse_kinesis_event
from tidemark.records.kinesis import arrival_ms, is_kinesis_event, stream_name
from tidemark.records.kinesis_esm import KinesisSource, arrival_seconds, build_kinesis_event
from tidemark.sources import KAFKA, KINESIS

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
SHARD = "shardId-000000000006"
SEQ_0 = 49590338271490256608559692538361571095921575989136588898
SEQ_1 = 49590338271490256608559692538361571095953420055848418930
SEQ_2 = 49590338271490256608559692538361571095985264122560248962
SEQ_3 = 49590338271490256608559692538361571096017108189272078994


def _order(sequence: int, timestamp_ms: int, key: bytes, value: bytes) -> Record:
    return Record("orders", SHARD, sequence, timestamp_ms, value, key)


# The records of events/kinesis-orders.json, written out by hand (data base64-decoded).
DUPLICATED = _order(
    SEQ_1,
    1_795_245_213_123,
    b"c-1",
    b'{"order_id":"o-2002","customer_id":"c-9","product_id":"p-5","price":5.5,"quantity":3,'
    b'"created_at":1795245300100,"country":"US"}',
)
SAMPLE_RECORDS = [
    _order(
        SEQ_0,
        1_795_245_153_000,
        b"c-0",
        b'{"order_id":"o-2001","customer_id":"c-7","product_id":"p-2","price":19.99,"quantity":1,'
        b'"created_at":"2026-11-21T07:12:33Z","country":"DE"}',
    ),
    DUPLICATED,
    DUPLICATED,  # delivered twice in one batch: kept, the writer drops it by position
    _order(SEQ_2, 1_795_245_273_246, b"c-2", b"{not json: the producer sent garbage"),
    _order(
        SEQ_3,
        1_795_245_333_369,
        b"c-3",
        b'{"order_id":"o-2003","customer_id":"c-7","product_id":"p-1","price":42.0,"quantity":2,'
        b'"created_at":"2026-11-21T08:01:02.250Z","country":"FR"}',
    ),
]


def sample() -> dict[str, Any]:
    return load_event("kinesis-orders")


# -- the documented sample event ------------------------------------------------------------------


def test_sample_event_parses_into_one_shard_batch() -> None:
    batches = parse_kinesis_event(sample())
    assert batches == [PartitionBatch("orders", SHARD, SAMPLE_RECORDS, kind=KINESIS)]
    (batch,) = batches
    assert batch.source == ARN  # not part of ==: checked on its own
    assert batch.kind == "kinesis"
    assert batch.records[1] == batch.records[2]
    assert all(record.offset > 2**64 for record in batch.records)  # sequence numbers overflow u64


def test_parse_event_dispatches_the_kinesis_sample() -> None:
    (batch,) = parse_event(sample())
    assert batch == PartitionBatch("orders", SHARD, SAMPLE_RECORDS, kind=KINESIS)
    assert batch.source == ARN


@pytest.mark.parametrize("name", ["msk-orders", "self-managed-orders", "self-managed-powertools"])
def test_parse_event_dispatches_kafka_samples(name: str) -> None:
    event = load_event(name)
    batches = parse_event(event)
    assert batches == parse_kafka_event(event)
    assert batches  # every sample holds records
    assert [batch.kind for batch in batches] == [KAFKA] * len(batches)
    assert [batch.source for batch in batches] == [b.source for b in parse_kafka_event(event)]
    assert not is_kinesis_event(event)


def test_msk_sample_keeps_its_cluster_source() -> None:
    batches = parse_event(load_event("msk-orders"))
    assert [(b.topic, b.partition, b.kind, b.source) for b in batches] == [
        ("orders", 0, KAFKA, "tidemark-demo/4f3e2d1c-0b9a-4c8d-9e7f-6a5b4c3d2e1f-1/orders"),
        ("orders", 1, KAFKA, "tidemark-demo/4f3e2d1c-0b9a-4c8d-9e7f-6a5b4c3d2e1f-1/orders"),
    ]


def test_building_the_sample_records_gives_the_sample_event_back() -> None:
    event = sample()
    template = event["Records"][0]
    source = KinesisSource(template["eventSourceARN"], template["invokeIdentityArn"])
    assert build_kinesis_event(SAMPLE_RECORDS, source) == event


def test_empty_records_give_no_batches() -> None:
    assert parse_kinesis_event({"Records": []}) == []
    assert parse_event({"Records": []}) == []


def test_is_kinesis_event_and_stream_name() -> None:
    assert is_kinesis_event(sample())
    assert not is_kinesis_event({"Records": []})
    assert not is_kinesis_event({"Records": [{"eventSource": "aws:sqs"}]})
    assert not is_kinesis_event({**sample(), "eventSource": "aws:kafka"})
    assert not is_kinesis_event([sample()])
    assert stream_name(ARN) == "orders"
    assert stream_name("arn:aws-cn:kinesis:cn-north-1:123456789012:stream/click_stream.v2") == "click_stream.v2"
    with pytest.raises(MalformedEventError) as caught:
        stream_name("arn:aws:kinesis:us-east-1:123456789012:stream/")
    assert (
        str(caught.value)
        == "eventSourceARN 'arn:aws:kinesis:us-east-1:123456789012:stream/' is not a Kinesis stream ARN"
    )


# -- building and parsing are inverses ------------------------------------------------------------


@pytest.mark.parametrize(
    ("sequence", "following"),
    [(0, 1), (7, 8), (SEQ_0, SEQ_1), (10**128, 10**128 + 1), (10**129 - 2, 10**129 - 1)],
    ids=["zero", "1-digit", "56-digits", "129-digits-low", "129-digits-max"],
)
def test_round_trip_of_sequence_numbers_of_any_width(sequence: int, following: int) -> None:
    records = [
        Record("orders", SHARD, sequence, 1_795_245_153_001, b"\x00\xff binary", "κλειδί".encode()),
        Record("orders", SHARD, following, 1_795_245_153_999, b"", b"k"),
    ]
    event = build_kinesis_event(records, KinesisSource(ARN))
    assert event["Records"][0]["kinesis"]["sequenceNumber"] == str(sequence)
    assert event["Records"][0]["eventID"] == f"{SHARD}:{sequence}"
    (batch,) = parse_kinesis_event(event)
    assert batch == PartitionBatch("orders", SHARD, records, kind=KINESIS)
    assert batch.source == ARN


def test_records_of_several_shards_are_grouped_in_delivery_order() -> None:
    records = [
        Record("orders", "shardId-000000000002", 5, 1_000, b"a", b"k"),
        Record("orders", "shardId-000000000001", 10**60, 2_000, b"b", b"k"),
        Record("orders", "shardId-000000000002", 9, 3_000, b"c", b"k"),
        Record("orders", "shardId-000000000001", 10**60 + 1, 4_000, b"d", b"k"),
    ]
    assert parse_event(kinesis_event(records)) == [
        PartitionBatch("orders", "shardId-000000000002", [records[0], records[2]], kind=KINESIS),
        PartitionBatch("orders", "shardId-000000000001", [records[1], records[3]], kind=KINESIS),
    ]


def test_arrival_timestamps_round_trip_to_the_millisecond() -> None:
    base = 1_795_245_213_000
    timestamps = [0, 1, 999, 1_000, *range(base, base + 2_000)]
    for timestamp in timestamps:
        assert arrival_ms(arrival_seconds(timestamp), 0) == timestamp, timestamp


# -- approximateArrivalTimestamp ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (1545084650.987, 1545084650987),  # a binary product would give ...986
        (1795245213.123, 1795245213123),
        (0.001, 1),
        (0.0, 0),
        (1545084650, 1545084650000),  # an integer number of seconds
        (1545084650.9876, 1545084650987),  # more than 3 decimals: floored
        (1545084650.9999, 1545084650999),
        (0.0019, 1),
        (-0.0011, -2),  # floored, not truncated
    ],
)
def test_arrival_ms_is_exact_and_floored(seconds: float, expected: int) -> None:
    assert arrival_ms(seconds, 0) == expected


@pytest.mark.parametrize(
    ("seconds", "message"),
    [
        ("1795245153.0", "record #3: approximateArrivalTimestamp must be a number, got '1795245153.0'"),
        (None, "record #3: approximateArrivalTimestamp must be a number, got None"),
        (True, "record #3: approximateArrivalTimestamp must be a number, got True"),
        ([1.0], "record #3: approximateArrivalTimestamp must be a number, got [1.0]"),
        (float("inf"), "record #3: approximateArrivalTimestamp inf is not a finite number"),
        (float("nan"), "record #3: approximateArrivalTimestamp nan is not a finite number"),
    ],
)
def test_arrival_ms_refuses_what_is_not_a_finite_number(seconds: object, message: str) -> None:
    with pytest.raises(MalformedEventError) as caught:
        arrival_ms(seconds, 3)
    assert str(caught.value) == message


# -- malformed events -----------------------------------------------------------------------------


def _two_records() -> dict[str, Any]:
    event = sample()
    return {"Records": copy.deepcopy(event["Records"][:2])}


def _set_sequence(value: object) -> Callable[[dict[str, Any]], None]:
    def mutate(event: dict[str, Any]) -> None:
        event["Records"][1]["kinesis"]["sequenceNumber"] = value
        event["Records"][1]["eventID"] = f"{SHARD}:{value}"

    return mutate


def _set_event_id(value: object) -> Callable[[dict[str, Any]], None]:
    return lambda event: event["Records"][1].update(eventID=value)


def _set_payload(**values: object) -> Callable[[dict[str, Any]], None]:
    return lambda event: event["Records"][1]["kinesis"].update(values)


def _drop_payload(name: str) -> Callable[[dict[str, Any]], None]:
    return lambda event: event["Records"][1]["kinesis"].pop(name)


def _set_arns(value: str) -> Callable[[dict[str, Any]], None]:
    def mutate(event: dict[str, Any]) -> None:
        for record in event["Records"]:
            record["eventSourceARN"] = value

    return mutate


SEQ_1_TEXT = str(SEQ_1)
MALFORMED: list[tuple[str, Callable[[dict[str, Any]], object], str]] = [
    (
        "missing-payload",
        lambda e: e["Records"][1].pop("kinesis"),
        "record #1: missing the 'kinesis' payload",
    ),
    (
        "payload-not-an-object",
        lambda e: e["Records"][1].update(kinesis="data"),
        "record #1: missing the 'kinesis' payload",
    ),
    (
        "sequence-130-digits",
        _set_sequence("1" * 130),
        f"record #1: sequenceNumber must be a decimal string of up to 129 digits, got '{'1' * 130}'",
    ),
    (
        "sequence-leading-zero",
        _set_sequence("0123"),
        "record #1: sequenceNumber must be a decimal string of up to 129 digits, got '0123'",
    ),
    (
        "sequence-negative",
        _set_sequence("-1"),
        "record #1: sequenceNumber must be a decimal string of up to 129 digits, got '-1'",
    ),
    (
        "sequence-a-number",
        _set_sequence(123),
        "record #1: sequenceNumber must be a decimal string of up to 129 digits, got 123",
    ),
    (
        "sequence-empty",
        _set_sequence(""),
        "record #1: sequenceNumber must be a decimal string of up to 129 digits, got ''",
    ),
    (
        "sequence-missing",
        _drop_payload("sequenceNumber"),
        "record #1: sequenceNumber must be a decimal string of up to 129 digits, got None",
    ),
    (
        "event-id-of-another-sequence",
        _set_event_id(f"{SHARD}:{SEQ_0}"),
        f"record #1: eventID '{SHARD}:{SEQ_0}' is not '<shard id>:<sequenceNumber>' of this record",
    ),
    (
        "event-id-missing",
        lambda e: e["Records"][1].pop("eventID"),
        "record #1: eventID None is not '<shard id>:<sequenceNumber>' of this record",
    ),
    (
        "event-id-without-colon",
        _set_event_id(SEQ_1_TEXT),
        f"record #1: eventID '{SEQ_1_TEXT}' is not '<shard id>:<sequenceNumber>' of this record",
    ),
    (
        "shard-id-with-slash",
        _set_event_id(f"shard/6:{SEQ_1_TEXT}"),
        f"record #1: eventID 'shard/6:{SEQ_1_TEXT}' is not '<shard id>:<sequenceNumber>' of this record",
    ),
    (
        "shard-id-empty",
        _set_event_id(f":{SEQ_1_TEXT}"),
        f"record #1: eventID ':{SEQ_1_TEXT}' is not '<shard id>:<sequenceNumber>' of this record",
    ),
    (
        "shard-id-all-digits",
        _set_event_id(f"6:{SEQ_1_TEXT}"),
        f"record #1: eventID '6:{SEQ_1_TEXT}' is not '<shard id>:<sequenceNumber>' of this record",
    ),
    (
        "shard-id-129-characters",
        _set_event_id(f"{'s' * 129}:{SEQ_1_TEXT}"),
        f"record #1: eventID '{'s' * 129}:{SEQ_1_TEXT}' is not '<shard id>:<sequenceNumber>' of this record",
    ),
    (
        "partition-key-empty",
        _set_payload(partitionKey=""),
        "record #1: partitionKey must be a non-empty string, got ''",
    ),
    (
        "partition-key-missing",
        _drop_payload("partitionKey"),
        "record #1: partitionKey must be a non-empty string, got None",
    ),
    (
        "partition-key-a-number",
        _set_payload(partitionKey=7),
        "record #1: partitionKey must be a non-empty string, got 7",
    ),
    (
        "data-not-base64",
        _set_payload(data="not base64!"),
        "record #1: data is not valid base64 (Only base64 data is allowed)",
    ),
    (
        "data-without-padding",
        _set_payload(data="YQ"),
        "record #1: data is not valid base64 (Incorrect padding)",
    ),
    (
        "data-missing",
        _drop_payload("data"),
        "record #1: data must be a base64 string, got None",
    ),
    (
        "arrival-timestamp-a-string",
        _set_payload(approximateArrivalTimestamp="1795245213.123"),
        "record #1: approximateArrivalTimestamp must be a number, got '1795245213.123'",
    ),
    (
        "arrival-timestamp-missing",
        _drop_payload("approximateArrivalTimestamp"),
        "record #1: approximateArrivalTimestamp must be a number, got None",
    ),
    (
        "two-stream-arns",
        lambda e: e["Records"][1].update(eventSourceARN="arn:aws:kinesis:us-east-1:123456789012:stream/payments"),
        "record #1: eventSourceARN 'arn:aws:kinesis:us-east-1:123456789012:stream/payments' differs from the "
        f"event's '{ARN}' (one mapping reads one stream)",
    ),
    (
        "second-arn-missing",
        lambda e: e["Records"][1].pop("eventSourceARN"),
        f"record #1: eventSourceARN None differs from the event's '{ARN}' (one mapping reads one stream)",
    ),
    (
        "sqs-queue-arn",
        _set_arns("arn:aws:sqs:us-east-1:123456789012:orders"),
        "eventSourceARN 'arn:aws:sqs:us-east-1:123456789012:orders' is not a Kinesis stream ARN",
    ),
    (
        "dynamodb-stream-arn",
        _set_arns("arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-21T07:00:00.000"),
        "eventSourceARN 'arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-21T07:00:00.000' "
        "is not a Kinesis stream ARN",
    ),
    (
        "wrong-event-source",
        lambda e: e["Records"][1].update(eventSource="aws:dynamodb"),
        "record #1: eventSource='aws:dynamodb', expected 'aws:kinesis'",
    ),
    (
        "record-not-an-object",
        lambda e: e["Records"].append("record"),
        "record #2 is not an object",
    ),
]


@pytest.mark.parametrize(("mutate", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_events_are_refused_with_the_problem_named(
    mutate: Callable[[dict[str, Any]], object], message: str
) -> None:
    event = _two_records()
    mutate(event)
    for parse in (parse_kinesis_event, parse_event):
        with pytest.raises(MalformedEventError) as caught:
            parse(event)
        assert str(caught.value) == message, parse.__name__


def test_the_unmodified_two_record_event_parses() -> None:
    # The base of every malformed case above is itself valid: each case fails for its one change.
    assert parse_kinesis_event(_two_records()) == [PartitionBatch("orders", SHARD, SAMPLE_RECORDS[:2], kind=KINESIS)]


@pytest.mark.parametrize("event", [{}, [], None, {"Records": "x"}, {"Records": {}}])
def test_what_is_not_a_records_list_is_refused(event: object) -> None:
    with pytest.raises(MalformedEventError) as caught:
        parse_kinesis_event(event)
    assert str(caught.value) == "a Kinesis event is an object with a 'Records' list"


@pytest.mark.parametrize(
    ("event", "found"),
    [
        ({}, "None"),
        ({"Records": [{"eventSource": "aws:sqs", "body": "x"}]}, "'aws:sqs'"),
        ({"Records": "x"}, "None"),
        ([], "'list'"),
        (None, "'NoneType'"),
    ],
    ids=["empty", "sqs", "records-not-a-list", "list", "none"],
)
def test_parse_event_names_the_sources_it_reads(event: object, found: str) -> None:
    with pytest.raises(MalformedEventError) as caught:
        parse_event(event)
    assert str(caught.value) == (
        f"not a Kafka, Kinesis or RabbitMQ event source mapping event: eventSource={found} (expected one of "
        "['SelfManagedKafka', 'aws:SelfManagedKafka', 'aws:kafka', 'aws:kinesis', 'aws:rmq'])"
    )


def test_a_kafka_event_is_not_read_as_kinesis_even_with_records() -> None:
    # A top-level eventSource decides: the Kafka adapter gets it (and names its own problem).
    event = {**sample(), "eventSource": "aws:sqs"}
    with pytest.raises(MalformedEventError, match="not a Kafka event source mapping event"):
        parse_event(event)
