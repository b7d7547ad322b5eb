"""tidemark.formats with a Kinesis source: every format renders Kinesis's envelope (``stream``,
``shard_id``, ``sequence_number``, ``approximate_arrival_timestamp``, ``partition_key``, no
headers) deterministically, sequence numbers of up to 129 digits survive as strings, and the
objects read back, with the format's own reader and with independent ones."""

from __future__ import annotations

import base64
import csv
import dataclasses
import io
import json
import random
import struct
from datetime import UTC, datetime
from typing import Any

import fastavro
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.independent import expected_kinesis_envelopes, plain
from tests.unit.test_formats_parquet import SCHEMA, TYPED_FIELDS, TYPED_FRAMES
from tests.unit.test_formats_registry import ALL_CODECS, EVENT, JSON_CONTEXT, render
from tidemark.eventtime import iso_utc
from tidemark.formats import JsonLinesFormat, RenderContext, RenderSpec, format_for, format_of
from tidemark.formats.avro import AvroFormat
from tidemark.formats.base import ArchivedEnvelope
from tidemark.formats.bytes import BytesFormat
from tidemark.formats.csv import CsvFormat
from tidemark.formats.jsonl import line_template, ms_of_seconds, seconds_text
from tidemark.formats.parquet import ParquetFormat, arrow_schema, dictionary_columns
from tidemark.formats.text import TextFormat
from tidemark.sources import KAFKA_SHAPE, KINESIS, KINESIS_SHAPE
from tidemark.staging.frames import DEAD_LETTER, NO_EVENT_TIME, RAW, Frame

STREAM = "click-stream"
SHARD = "shardId-000000000007"
SEQ_56 = 49590338271490256608559692538361571095921575989136588898  # a real sequence number's size
SEQ_129 = int("1" + "2345678901" * 12 + "12345678")  # the API's widest: 129 digits
ARRIVAL = 1_732_406_400_123  # 2024-11-24T00:00:00.123Z
KEY = "object/raw/click-stream/a.object"

JSON = RenderContext(STREAM, SHARD, object_key=KEY, source=KINESIS)
TEXT = RenderContext(STREAM, SHARD, "text", "text", "text", object_key=KEY, source=KINESIS)
BYTES = RenderContext(STREAM, SHARD, "bytes", "bytes", "text", object_key=KEY, source=KINESIS)
CONTEXTS = {"json": JSON, "text": TEXT, "bytes": BYTES}

COLUMNS = (
    "stream",
    "shard_id",
    "sequence_number",
    "approximate_arrival_timestamp",
    "event_time",
    "partition_key",
    "value",
)


def json_frames() -> list[Frame]:
    """A 56-digit and a 129-digit sequence number, arrival times with .123, .000 and .007
    seconds, unicode partition keys (never null: Kinesis requires one), no headers."""
    return [
        Frame(RAW, SEQ_56, ARRIVAL, EVENT, b"user-1", b'{"a":1,"big":123456789012345678901234567890}'),
        Frame(RAW, SEQ_56 + 2, ARRIVAL + 877, EVENT + 1, "cl\u00e9-\u2603".encode(), '{"s":"\u00e9"}'.encode()),
        Frame(RAW, SEQ_129, ARRIVAL + 884, EVENT + 2, b"k", b"[1,2.50,-0]"),
        Frame(RAW, SEQ_129 + 10**100, ARRIVAL + 60_000, EVENT + 3, b"", b'{"n":null}'),
    ]


def text_frames() -> list[Frame]:
    return [
        Frame(RAW, SEQ_56, ARRIVAL, EVENT, b"user-1", 'caf\u00e9, "x" and more'.encode()),
        Frame(RAW, SEQ_129, ARRIVAL + 1, EVENT + 1, "\u00e9".encode(), b""),
    ]


def bytes_frames() -> list[Frame]:
    return [
        Frame(RAW, SEQ_56, ARRIVAL, EVENT, b"user-1", bytes(range(256))),
        Frame(RAW, SEQ_129, ARRIVAL + 1, EVENT + 1, "p\u00e9".encode(), b'\n,"\r'),
        Frame(RAW, SEQ_129 + 1, ARRIVAL + 2, EVENT + 2, b"k", random.Random(3).randbytes(4_096)),
    ]


FRAMES = {"json": json_frames, "text": text_frames, "bytes": bytes_frames}


def dead_letter() -> Frame:
    return Frame(
        DEAD_LETTER, SEQ_129, ARRIVAL + 5, NO_EVENT_TIME, b"user-9", b"not json", (), "invalid_value_encoding: x"
    )


def envelopes(frames: list[Frame], context: RenderContext) -> list[ArchivedEnvelope]:
    """What a format that keeps the whole envelope reads back: the stream, the shard id, the
    sequence number as an int, arrival time in epoch ms, ``()`` headers (Kinesis has none)."""
    return [
        ArchivedEnvelope(STREAM, SHARD, f.offset, f.timestamp_ms, f.event_time_ms, f.key, f.value, ()) for f in frames
    ]


def read(type_: str, codec: str, body: bytes, context: RenderContext) -> list[ArchivedEnvelope]:
    return list(format_for(type_, codec).read(body, context))


# -- every format x codec ----------------------------------------------------------------------


@pytest.mark.parametrize(("type_", "codec"), ALL_CODECS)
@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_rendering_twice_gives_identical_bytes_and_reads_back(type_: str, codec: str, encoding: str) -> None:
    frames, context = FRAMES[encoding](), CONTEXTS[encoding]
    first = render(format_for(type_, codec), frames, context)
    again = render(format_for(type_, codec), FRAMES[encoding](), dataclasses.replace(context))
    assert first == again
    found = read(type_, codec, first, context)
    if type_ == "text":  # values only
        assert [envelope.value for envelope in found] == [frame.value for frame in frames]
        assert {(envelope.topic, envelope.partition, envelope.offset) for envelope in found} == {(None, None, None)}
    else:
        assert found == envelopes(frames, context)


@pytest.mark.parametrize(("type_", "codec"), ALL_CODECS)
def test_the_spec_renders_kinesis_envelopes(type_: str, codec: str) -> None:
    spec = RenderSpec(type_, codec, 6, STREAM, "text", "json", "text", source=KINESIS)
    assert RenderSpec.decode(spec.encode()) == spec
    context = spec.context(SHARD, KEY)
    assert context == dataclasses.replace(JSON, object_key=KEY)
    body = render(format_of(spec), json_frames(), context)
    assert body == render(format_for(type_, codec), json_frames(), JSON)


@pytest.mark.parametrize(("type_", "codec"), ALL_CODECS)
def test_no_frames_still_make_a_readable_object(type_: str, codec: str) -> None:
    body = render(format_for(type_, codec), [], JSON)
    assert body == render(format_for(type_, codec), [], JSON)
    assert read(type_, codec, body, JSON) == []


@pytest.mark.parametrize(
    ("type_", "codec"), [(t, c) for t, c in ALL_CODECS if t in ("jsonl", "parquet", "avro", "csv")]
)
def test_headers_have_no_place_in_a_kinesis_envelope(type_: str, codec: str) -> None:
    frame = Frame(RAW, SEQ_56, ARRIVAL, EVENT, b"k", b"{}", (("h", b"v"),))
    with pytest.raises(ValueError, match="no headers"):
        render(format_for(type_, codec), [frame], JSON)


@pytest.mark.parametrize(("type_", "codec"), [(t, c) for t, c in ALL_CODECS if t != "jsonl"])
def test_dead_letters_only_reach_json_lines(type_: str, codec: str) -> None:
    with pytest.raises(ValueError, match="dead letters"):
        render(format_for(type_, codec), [*json_frames(), dead_letter()], JSON)


# -- JSON Lines --------------------------------------------------------------------------------


def jsonl_lines(body: bytes, codec: str = "none") -> list[bytes]:
    text = plain(body, codec)
    assert text.endswith(b"\n")
    return text.split(b"\n")[:-1]


@pytest.mark.parametrize("codec", ["gzip", "zstd", "none"])
def test_jsonl_archived_envelopes(codec: str) -> None:
    frames = json_frames()
    lines = jsonl_lines(render(JsonLinesFormat(codec), frames, JSON), codec)
    assert [orjson.loads(line) for line in lines] == [
        {
            "stream": STREAM,
            "shard_id": SHARD,
            "sequence_number": str(frame.offset),
            "approximate_arrival_timestamp": frame.timestamp_ms / 1000,
            "event_time": iso_utc(frame.event_time_ms),
            "partition_key": frame.key.decode() if frame.key is not None else None,
            "value": orjson.loads(frame.value),
        }
        for frame in frames
    ]
    for line in lines:
        envelope = json.loads(line)
        assert isinstance(envelope["sequence_number"], str)
        assert "headers" not in envelope and not any(name.startswith("header") for name in envelope)
    assert json.loads(lines[2])["sequence_number"] == str(SEQ_129) and len(str(SEQ_129)) == 129
    assert [line.split(b'"approximate_arrival_timestamp":')[1].split(b",")[0] for line in lines] == [
        b"1732406400.123",
        b"1732406401.000",
        b"1732406401.007",
        b"1732406460.123",
    ]


def test_jsonl_whole_line() -> None:
    (line,) = jsonl_lines(render(JsonLinesFormat("none"), json_frames()[:1], JSON))
    assert line == (
        b'{"stream":"click-stream","shard_id":"shardId-000000000007",'
        b'"sequence_number":"49590338271490256608559692538361571095921575989136588898",'
        b'"approximate_arrival_timestamp":1732406400.123,"event_time":"2026-11-21T07:12:33.123Z",'
        b'"partition_key":"user-1","value":{"a":1,"big":123456789012345678901234567890}}'
    )


@pytest.mark.parametrize("value_encoding", ["json", "text", "bytes"])
@pytest.mark.parametrize("key_encoding", ["text", "bytes"])
def test_jsonl_byte_template_equals_the_envelope_serialised_by_orjson(key_encoding: str, value_encoding: str) -> None:
    context = RenderContext('st"re\\am', SHARD, key_encoding, value_encoding, source=KINESIS)
    key = 'k"\\\n\u00e9\u2028'.encode()
    value = b'{"s":"a\\"b\\\\c\\u0001","n":[1,2.50,-0]}' if value_encoding == "json" else 'v"\\\t\u00fc'.encode()
    frame = Frame(RAW, SEQ_129, ARRIVAL, EVENT, key, value)
    (line,) = JsonLinesFormat("none").lines([frame], context)

    def as_string(data: bytes, encoding: str) -> str:
        return data.decode() if encoding == "text" else base64.b64encode(data).decode()

    expected_value: Any = orjson.Fragment(value) if value_encoding == "json" else as_string(value, value_encoding)
    envelope = {
        "stream": context.topic,
        "shard_id": SHARD,
        "sequence_number": str(SEQ_129),
        "approximate_arrival_timestamp": orjson.Fragment(b"1732406400.123"),
        "event_time": "2026-11-21T07:12:33.123Z",
        "partition_key": as_string(key, key_encoding),
        "value": expected_value,
    }
    assert line == orjson.dumps(envelope, option=orjson.OPT_APPEND_NEWLINE)


def test_jsonl_dead_letter_envelope() -> None:
    (line,) = jsonl_lines(render(JsonLinesFormat("none"), [dead_letter()], JSON))
    assert orjson.loads(line) == {
        "stream": STREAM,
        "shard_id": SHARD,
        "sequence_number": str(SEQ_129),
        "approximate_arrival_timestamp": (ARRIVAL + 5) / 1000,
        "error": "invalid_value_encoding: x",
        "partition_key_base64": base64.b64encode(b"user-9").decode(),
        "value_base64": base64.b64encode(b"not json").decode(),
    }
    assert b'"approximate_arrival_timestamp":1732406400.128,' in line
    assert list(orjson.loads(line)) == [
        "stream",
        "shard_id",
        "sequence_number",
        "approximate_arrival_timestamp",
        "error",
        "partition_key_base64",
        "value_base64",
    ]


@pytest.mark.parametrize("codec", ["gzip", "zstd", "none"])
def test_jsonl_reads_back_archived_records_and_dead_letters(codec: str) -> None:
    value = b'{\n  "big": 123456789012345678901234567890, "f": 1.0e+2\r\n}'
    frames = [*json_frames(), dead_letter(), Frame(RAW, SEQ_129 + 7, ARRIVAL, EVENT, b"p", value)]
    fmt = JsonLinesFormat(codec)
    assert list(fmt.read(render(fmt, frames, JSON), JSON)) == [
        *envelopes(json_frames(), JSON),
        ArchivedEnvelope(
            STREAM, SHARD, SEQ_129, ARRIVAL + 5, None, b"user-9", b"not json", (), error="invalid_value_encoding: x"
        ),
        ArchivedEnvelope(
            STREAM,
            SHARD,
            SEQ_129 + 7,
            ARRIVAL,
            EVENT,
            b"p",
            value.replace(b"\r", b" ").replace(b"\n", b" "),  # every token as produced
            (),
        ),
    ]


def test_jsonl_bytes_key_encoding() -> None:
    frames = bytes_frames()
    lines = jsonl_lines(render(JsonLinesFormat("none"), frames, BYTES))
    parsed = [json.loads(line) for line in lines]
    assert [item["partition_key"] for item in parsed] == [base64.b64encode(f.key or b"").decode() for f in frames]
    assert [base64.b64decode(item["value"]) for item in parsed] == [f.value for f in frames]
    assert list(parsed[0]) == list(COLUMNS)


def test_jsonl_read_of_a_line_not_written_by_the_template_re_serialises_the_value() -> None:
    line = b'{"shard_id":"shardId-1","stream":"s","sequence_number":"12","approximate_arrival_timestamp":5.1,'
    line += b'"event_time":"1970-01-01T00:00:00.007Z","partition_key":"p","value":{"a": 1}}\n'
    (envelope,) = JsonLinesFormat("none").read(line, JSON)
    assert envelope == ArchivedEnvelope("s", "shardId-1", 12, 5_100, 7, b"p", b'{"a":1}', ())


def test_kafka_line_template_is_unchanged() -> None:
    assert line_template(KAFKA_SHAPE.envelope) == (
        b'%b"offset":%d,"timestamp":%d,"event_time":"%b","key":%b,"value":%b,"headers":%b}\n'
    )
    assert line_template(KINESIS_SHAPE.envelope) == (
        b'%b"sequence_number":"%d","approximate_arrival_timestamp":%b,"event_time":"%b",'
        b'"partition_key":%b,"value":%b}\n'
    )


@pytest.mark.parametrize(
    ("ms", "text"),
    [(ARRIVAL, "1732406400.123"), (0, "0.000"), (7, "0.007"), (1_000, "1.000"), (-1, "-0.001"), (-1_500, "-1.500")],
)
def test_seconds_with_three_decimals(ms: int, text: str) -> None:
    assert seconds_text(ms) == text
    assert ms_of_seconds(text) == ms
    assert ms_of_seconds(float(text)) == ms
    assert ms_of_seconds(orjson.loads(text)) == ms


def test_seconds_round_trip_through_a_json_double_to_the_millisecond() -> None:
    rng = random.Random(5)
    for ms in [rng.randrange(0, 4_102_444_800_000) for _ in range(20_000)] + [2**53 // 1000 - 1]:
        assert ms_of_seconds(orjson.loads(seconds_text(ms))) == ms
        assert ms_of_seconds(json.loads(seconds_text(ms))) == ms


# -- Parquet -----------------------------------------------------------------------------------


def kinesis_schema(key: pa.DataType, value: pa.DataType) -> pa.Schema:
    return pa.schema(
        [
            pa.field("stream", pa.string(), nullable=False),
            pa.field("shard_id", pa.string(), nullable=False),
            pa.field("sequence_number", pa.string(), nullable=False),
            pa.field("approximate_arrival_timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
            pa.field("event_time", pa.timestamp("ms", tz="UTC"), nullable=False),
            pa.field("partition_key", key),
            pa.field("value", value, nullable=False),
        ]
    )


@pytest.mark.parametrize("codec", ["snappy", "zstd", "gzip", "none"])
@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_parquet_schema_and_rows_with_pyarrow(codec: str, encoding: str) -> None:
    frames, context = FRAMES[encoding](), CONTEXTS[encoding]
    body = render(ParquetFormat(codec), frames, context)
    key = pa.binary() if context.key_encoding == "bytes" else pa.string()
    value = pa.binary() if context.value_encoding == "bytes" else pa.string()
    expected = kinesis_schema(key, value)
    assert arrow_schema(context) == expected
    assert pq.read_schema(io.BytesIO(body)).remove_metadata() == expected
    assert pq.read_table(io.BytesIO(body)).to_pylist() == expected_kinesis_envelopes(frames, context)
    assert set(pq.ParquetFile(io.BytesIO(body)).metadata.metadata) == {b"ARROW:schema"}


def test_parquet_sequence_numbers_are_strings_and_arrival_a_timestamp() -> None:
    table = pq.read_table(io.BytesIO(render(ParquetFormat(), json_frames(), JSON)))
    assert table.column("sequence_number").to_pylist() == [str(f.offset) for f in json_frames()]
    assert table.column("approximate_arrival_timestamp").to_pylist()[0] == datetime(2024, 11, 24, 0, 0, 0, 123_000, UTC)
    assert "headers" not in table.column_names


def test_parquet_dictionary_for_the_repeated_kinesis_columns() -> None:
    body = render(ParquetFormat(), json_frames(), JSON)
    metadata = pq.ParquetFile(io.BytesIO(body)).metadata
    group = metadata.row_group(0)
    encodings = {group.column(i).path_in_schema: group.column(i).encodings for i in range(metadata.num_columns)}
    assert {path for path, kinds in encodings.items() if "RLE_DICTIONARY" in kinds} == {
        "stream",
        "shard_id",
        "partition_key",
    }
    assert dictionary_columns(arrow_schema(JSON), JSON.envelope) == ["stream", "shard_id", "partition_key"]


@pytest.mark.parametrize("type_", ["parquet", "avro"])
def test_declared_value_schema_gives_typed_fields(type_: str) -> None:
    context = dataclasses.replace(JSON, value_schema=SCHEMA)
    frames = [frame._replace(offset=SEQ_56 + index, timestamp_ms=ARRIVAL) for index, frame in enumerate(TYPED_FRAMES)]
    fmt = format_for(type_, "snappy")
    body = render(fmt, frames, context)
    found = list(fmt.read(body, context))
    assert [envelope.fields for envelope in found] == TYPED_FIELDS
    assert [(e.topic, e.partition, e.offset, e.timestamp_ms, e.value, e.headers) for e in found] == [
        (STREAM, SHARD, SEQ_56 + index, ARRIVAL, None, ()) for index in range(len(frames))
    ]
    assert render(fmt, frames, context) == body


# -- Avro --------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["deflate", "snappy", "zstandard", "null"])
@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_avro_writer_schema_and_records_with_fastavro(codec: str, encoding: str) -> None:
    frames, context = FRAMES[encoding](), CONTEXTS[encoding]
    body = render(AvroFormat(codec), frames, context)
    reader = fastavro.reader(io.BytesIO(body))
    records = list(reader)
    assert records == expected_kinesis_envelopes(frames, context)
    schema = json.loads(reader.metadata["avro.schema"])
    assert (schema["name"], schema.get("namespace")) in (("tidemark.Envelope", None), ("Envelope", "tidemark"))
    timestamp = {"type": "long", "logicalType": "timestamp-millis"}
    key = "bytes" if context.key_encoding == "bytes" else "string"
    value = "bytes" if context.value_encoding == "bytes" else "string"
    assert [(field["name"], field["type"]) for field in schema["fields"]] == [
        ("stream", "string"),
        ("shard_id", "string"),
        ("sequence_number", "string"),
        ("approximate_arrival_timestamp", timestamp),
        ("event_time", timestamp),
        ("partition_key", ["null", key]),
        ("value", value),
    ]
    assert set(reader.metadata) == {"avro.schema", "avro.codec"}


def test_avro_sequence_numbers_are_strings() -> None:
    records: list[Any] = list(fastavro.reader(io.BytesIO(render(AvroFormat(), json_frames(), JSON))))
    assert [record["sequence_number"] for record in records] == [str(f.offset) for f in json_frames()]
    assert all("headers" not in record for record in records)


# -- CSV ---------------------------------------------------------------------------------------


def csv_rows(body: bytes, codec: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(plain(body, codec).decode("utf-8"), newline="")))


@pytest.mark.parametrize("codec", ["gzip", "zstd", "none"])
def test_csv_default_columns_are_kinesis_envelope_fields(codec: str) -> None:
    frames = json_frames()
    rows = csv_rows(render(CsvFormat(codec), frames, JSON), codec)
    assert rows[0] == list(COLUMNS) == list(JSON.envelope.columns)
    assert rows[1:] == [
        [
            STREAM,
            SHARD,
            str(frame.offset),
            seconds_text(frame.timestamp_ms),
            iso_utc(frame.event_time_ms),
            (frame.key or b"").decode(),
            frame.value.decode(),
        ]
        for frame in frames
    ]
    assert rows[3][2] == str(SEQ_129) and rows[2][3] == "1732406401.000"


def test_csv_chosen_columns_with_value_paths_and_bytes_keys() -> None:
    context = dataclasses.replace(
        BYTES, value_encoding="json", columns=("sequence_number", "partition_key", "value.a", "shard_id")
    )
    frames = json_frames()[:1]
    body = render(CsvFormat("none"), frames, context)
    assert csv_rows(body, "none") == [
        ["sequence_number", "partition_key", "value.a", "shard_id"],
        [str(SEQ_56), base64.b64encode(b"user-1").decode(), "1", SHARD],
    ]
    (envelope,) = CsvFormat("none").read(body, context)
    assert envelope == ArchivedEnvelope(None, SHARD, SEQ_56, None, None, b"user-1", None, (), {"a": "1"})


@pytest.mark.parametrize("column", ["offset", "topic", "partition", "timestamp", "key", "headers"])
def test_csv_refuses_kafka_columns_in_a_kinesis_object(column: str) -> None:
    with pytest.raises(ValueError, match=f"unknown csv column '{column}'"):
        render(CsvFormat("none"), json_frames(), dataclasses.replace(JSON, columns=("value", column)))


# -- text --------------------------------------------------------------------------------------


def test_text_is_values_only_as_for_kafka() -> None:
    frames = json_frames()
    kafka = [frame._replace(offset=index) for index, frame in enumerate(frames)]
    assert render(TextFormat("none"), frames, JSON) == render(TextFormat("none"), kafka, JSON_CONTEXT)


# -- bytes -------------------------------------------------------------------------------------


def parse_bytes(data: bytes) -> tuple[str, str, list[Frame]]:
    """The documented version 2 layout, decoded independently of the module."""
    magic, version, partition_len = struct.unpack_from(">4sHH", data, 0)
    assert (magic, version) == (b"TMRB", 2)
    pos = 8
    partition = data[pos : pos + partition_len].decode()
    pos += partition_len
    (topic_len,) = struct.unpack_from(">H", data, pos)
    topic = data[pos + 2 : pos + 2 + topic_len].decode()
    pos += 2 + topic_len
    frames = []
    while pos < len(data):
        digits = data[pos]
        position = int(data[pos + 1 : pos + 1 + digits].decode("ascii"))
        pos += 1 + digits
        timestamp, event_time, key_len = struct.unpack_from(">qqi", data, pos)
        pos += 20
        key = None if key_len == -1 else data[pos : pos + key_len]
        pos += max(key_len, 0)
        (value_len,) = struct.unpack_from(">I", data, pos)
        value = data[pos + 4 : pos + 4 + value_len]
        pos += 4 + value_len
        (count,) = struct.unpack_from(">I", data, pos)
        pos += 4
        assert count == 0
        frames.append(Frame(RAW, position, timestamp, event_time, key, value))
    assert pos == len(data)
    return topic, partition, frames


@pytest.mark.parametrize("codec", ["gzip", "zstd", "none"])
@pytest.mark.parametrize("encoding", ["json", "bytes"])
def test_bytes_version_2_round_trips_big_positions_and_shard_ids(codec: str, encoding: str) -> None:
    frames, context = FRAMES[encoding](), CONTEXTS[encoding]
    body = render(BytesFormat(codec), frames, context)
    assert parse_bytes(plain(body, codec)) == (STREAM, SHARD, frames)
    # the object says its version: it reads back whatever the context's source kind
    assert list(BytesFormat(codec).read(body, JSON_CONTEXT)) == envelopes(frames, context)


def test_bytes_version_2_file_header() -> None:
    data = render(BytesFormat("none"), [], RenderContext("s\u00f6", "shardId-1", source=KINESIS))
    assert data == b"TMRB\x00\x02\x00\x09shardId-1\x00\x03s\xc3\xb6"
    frame = Frame(RAW, SEQ_129, ARRIVAL, EVENT, b"k", b"v")
    data = render(BytesFormat("none"), [frame], RenderContext("s", "shardId-1", source=KINESIS))
    assert data == b"TMRB\x00\x02\x00\x09shardId-1\x00\x01s" + (
        bytes([129])
        + str(SEQ_129).encode()  # the position: its digits, length-prefixed
        + struct.pack(">qqi", ARRIVAL, EVENT, 1)
        + b"k"  # as in version 1 from here on
        + b"\x00\x00\x00\x01v"
        + b"\x00\x00\x00\x00"  # no headers
    )


def test_kafka_bytes_objects_are_version_3() -> None:
    """Kafka objects hold tombstones (version 3: version 1 with nulls); Kinesis's stay version 2."""
    data = render(BytesFormat("none"), [Frame(RAW, 5, ARRIVAL, EVENT, b"k", b"v")], JSON_CONTEXT)
    assert data[:6] == b"TMRB\x00\x03"
    with pytest.raises(struct.error):  # a Kafka offset is 64 bits: a sequence number does not fit
        render(BytesFormat("none"), [Frame(RAW, SEQ_56, ARRIVAL, EVENT, b"k", b"v")], JSON_CONTEXT)


def test_damaged_version_2_objects_are_refused() -> None:
    body = render(BytesFormat("none"), json_frames(), JSON)
    with pytest.raises(ValueError, match="truncated or corrupt"):
        list(BytesFormat("none").read(body[:-3], JSON))
    with pytest.raises(ValueError, match="truncated or corrupt"):
        list(BytesFormat("none").read(body[:40], JSON))
    with pytest.raises(ValueError, match="not a tidemark bytes object"):
        list(BytesFormat("none").read(b"TMRB\x00\x04" + body[6:], JSON))
