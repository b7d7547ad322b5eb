"""jobs.aggregation.reader: envelopes split by their byte template, without parsing values;
values typed, and conformed to the run's sampled schema."""

from __future__ import annotations

import gzip

import orjson
import pyarrow as pa
import pytest

from jobs.aggregation.reader import EnvelopeError, read_object, split_envelope, value_schema
from tests.support.legacy_segments import encode_frame
from tidemark.formats.base import RenderContext
from tidemark.formats.jsonl import JsonLinesFormat
from tidemark.staging.frames import RAW, decode_frames


def rendered(values: list[bytes], headers=(("value", b'a,"headers":[x'),)) -> bytes:
    """Lines exactly as the archiver renders them (the real format, not a copy of it)."""
    frames = decode_frames(
        b"".join(
            encode_frame(RAW, 10 + i, 1_795_248_000_000, 1_795_248_000_000 + i, b"k", v, headers)
            for i, v in enumerate(values)
        )
    )
    context = RenderContext(
        topic="orders", partition=3, value_encoding="json", key_encoding="text", header_encoding="text"
    )
    return b"".join(JsonLinesFormat("none").lines(frames, context))


KEY = "raw/orders/2026/11/21/08/orders+3+00000000000000000010-00000000000000000059.jsonl"
GZ_KEY = KEY + ".gz"


def test_split_gives_partition_offset_event_time_and_the_value_bytes():
    value = orjson.dumps({"a": 1, "headers": [1, 2], "s": 'x,"value":y'})  # the markers inside the value
    (line,) = rendered([value]).splitlines()
    assert split_envelope(line) == (3, 10, "2026-11-21T08:00:00.000Z", value)


def test_read_object_handles_gzip_and_returns_the_values_as_typed_columns():
    values = [orjson.dumps({"n": n, "price": n * 1.5, "tag": f"t{n}"}) for n in range(50)]
    body = gzip.compress(rendered(values))
    schema = value_schema([(GZ_KEY, body)])
    batch = read_object(GZ_KEY, body, "2026-11-21T08", schema)
    assert batch.schema.names == ["hour", "epoch", "partition", "offset", "event_time", "n", "price", "tag"]
    assert batch.column("offset").to_pylist() == list(range(10, 60))
    assert batch.column("price").to_pylist() == [n * 1.5 for n in range(50)]
    assert batch.column("tag").to_pylist() == [f"t{n}" for n in range(50)]
    assert set(batch.column("hour").to_pylist()) == {"2026-11-21T08"}


def test_values_are_conformed_to_the_sampled_schema():
    """An integer where the sample had doubles is cast; a field the object lacks becomes null;
    a field the sample did not have is left out (every task returns the same columns)."""
    sampled = pa.schema([("price", pa.float64()), ("customer_id", pa.string())])
    body = rendered([orjson.dumps({"price": 12, "other": 1}), orjson.dumps({"price": 3, "other": 2})])
    batch = read_object(KEY, body, "2026-11-21T08", sampled)
    assert batch.schema.names == ["hour", "epoch", "partition", "offset", "event_time", "price", "customer_id"]
    assert batch.column("price").to_pylist() == [12.0, 3.0]
    assert batch.column("customer_id").to_pylist() == [None, None]


@pytest.mark.parametrize("line", [b"", b"{}", b'{"topic":"orders","partition":1}', b"not json"])
def test_a_line_that_is_not_an_envelope_is_an_error(line):
    with pytest.raises(EnvelopeError):
        split_envelope(line)


def test_a_field_whose_type_changes_between_records_is_still_read():
    """Arrow's JSON reader refuses a column that is a number in one record and a string in the
    next; the Python path takes over: numbers widen, a mix of kinds becomes text."""
    values = [
        orjson.dumps({"created_at": 1_795_248_000_000, "price": 2, "tags": ["a"]}),
        orjson.dumps({"created_at": "2026-11-21T08:00:00Z", "price": 2.5, "tags": "b"}),
    ]
    body = rendered(values)
    schema = value_schema([(KEY, body)])
    assert schema.field("price").type == pa.float64()
    assert schema.field("created_at").type == pa.string()
    batch = read_object(KEY, body, "2026-11-21T08", schema)
    assert batch.column("price").to_pylist() == [2.0, 2.5]
    assert batch.column("created_at").to_pylist() == ["1795248000000", "2026-11-21T08:00:00Z"]
    assert batch.column("tags").to_pylist() == ['["a"]', "b"]


def test_the_run_schema_widens_over_samples_and_never_nulls_a_value():
    """One object with whole prices, another with fractions: the run's type is double for both,
    and neither object's prices are lost."""
    whole = rendered([orjson.dumps({"price": 10, "note": None})])
    fractional = rendered([orjson.dumps({"price": 2.5, "note": "n"})])
    schema = value_schema([(KEY, whole), (KEY, fractional)])
    assert (schema.field("price").type, schema.field("note").type) == (pa.float64(), pa.string())
    assert read_object(KEY, whole, "h", schema).column("price").to_pylist() == [10.0]
    assert read_object(KEY, fractional, "h", schema).column("price").to_pylist() == [2.5]


def test_iso_timestamps_stay_text():
    body = rendered([orjson.dumps({"created_at": "2026-11-21T08:00:00Z", "price": 1.0})])
    schema = value_schema([(KEY, body)])
    assert schema.field("created_at").type == pa.string()
    assert read_object(KEY, body, "h", schema).column("created_at").to_pylist() == ["2026-11-21T08:00:00Z"]


def test_a_value_that_cannot_take_the_run_type_fails_loudly():
    sampled = pa.schema([("price", pa.float64())])
    body = rendered([orjson.dumps({"price": {"amount": 1}})])
    with pytest.raises(EnvelopeError, match="field 'price'"):
        read_object(KEY, body, "h", sampled)
