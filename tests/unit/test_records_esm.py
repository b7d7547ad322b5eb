"""tidemark.records.esm: events built for local delivery are exactly what the adapter parses."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tidemark.records.esm import MSK, SELF_MANAGED, EventSource, build_event, encode_record, payload_size
from tidemark.records.kafka import parse_kafka_event
from tidemark.records.model import Record, SchemaRef

# a schema id as a registry gives one: text UTF-8 can hold, never empty (no id is no reference)
ids = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40)
records = st.builds(
    Record,
    topic=st.sampled_from(["orders", "clicks.v2"]),
    partition=st.integers(0, 50),
    offset=st.integers(0, 2**40),
    timestamp_ms=st.integers(0, 2**42),
    value=st.binary(max_size=300),
    key=st.none() | st.binary(max_size=40),
    headers=st.lists(st.tuples(st.sampled_from(["a", "trace-id"]), st.binary(max_size=30)), max_size=3).map(tuple),
    # what a schema registry integration adds: a key's, a value's, both (key first) or none
    schemas=st.sampled_from([(), ("value",), ("key",), ("key", "value")]).flatmap(
        lambda parts: st.tuples(
            *(st.builds(SchemaRef, st.just(part), st.sampled_from(["AVRO", "PROTOBUF", "JSON"]), ids) for part in parts)
        )
    ),
)


@given(st.lists(records, min_size=1, max_size=20))
def test_build_event_round_trips_through_the_adapter(batch):
    event = build_event(batch, EventSource("b-1:9098", event_source_arn="arn:aws:kafka:us-east-1:1:cluster/x/y"))
    parsed = [record for group in parse_kafka_event(event) for record in group.records]
    # grouped by topic-partition, delivery order kept inside each group
    expected = sorted(
        batch, key=lambda r: next(i for i, k in enumerate(event["records"]) if k == f"{r.topic}-{r.partition}")
    )
    assert parsed == expected


@given(records)
def test_payload_size_never_underestimates_the_json_encoding(record):
    assert payload_size(record) >= len(json.dumps(encode_record(record)))
    assert payload_size(record) <= 2 * len(json.dumps(encode_record(record))) + 200


def test_envelope_matches_the_sample_events():
    msk = EventSource("b-1:9098", event_source_arn="arn:aws:kafka:us-east-1:1:cluster/x/y").envelope()
    assert msk == {
        "eventSource": MSK,
        "eventSourceArn": "arn:aws:kafka:us-east-1:1:cluster/x/y",
        "bootstrapServers": "b-1:9098",
    }
    assert EventSource("k:9092", event_source=SELF_MANAGED).envelope() == {
        "eventSource": SELF_MANAGED,
        "bootstrapServers": "k:9092",
    }


def test_encoded_record_uses_base64_and_header_byte_arrays():
    record = Record("orders", 2, 40, 1_795_248_000_000, b'{"a":1}', b"o-1", (("channel", b"web"),))
    assert encode_record(record) == {
        "topic": "orders",
        "partition": 2,
        "offset": 40,
        "timestamp": 1_795_248_000_000,
        "timestampType": "CREATE_TIME",
        "key": "by0x",
        "value": "eyJhIjoxfQ==",
        "headers": [{"channel": [119, 101, 98]}],
    }
