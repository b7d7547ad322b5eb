"""Tombstones (a null value) and null header values through staging and every object format:
kept null, never the empty value, and read back as they were."""

from __future__ import annotations

import gzip
import io
import struct
import zlib

import fastavro
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.legacy_segments import decode_segment_before_tombstones
from tests.unit.test_formats_registry import EVENT, TS, render
from tidemark.exceptions import UnsupportedSegmentError
from tidemark.formats import RenderContext, ValueColumn, format_for
from tidemark.formats.csv import read_table
from tidemark.objects.content import ContentDigest
from tidemark.records.model import Record, SchemaRef
from tidemark.resets import fingerprint
from tidemark.sources import KINESIS
from tidemark.staging.frames import DEAD_LETTER, NO_EVENT_TIME, RAW, Frame, TornFrameError, encode_meta
from tidemark.staging.segment import (
    NULLS_MAGIC,
    REFS_MAGIC,
    SEGMENT_MAGIC,
    decode_segment,
    encode_segment,
    segment_of_frames,
)

ORDER = b'{"order_id":"o-1","price":12.5}'
#: a tombstone with a header, an empty value, an order with a null header value, a tombstone
#: without a key, and a json value that is the JSON text null (not a tombstone)
FRAMES = [
    Frame(RAW, 10, TS, EVENT, b"o-1", None, (("op", b"d"),)),
    Frame(RAW, 11, TS + 1, EVENT + 1, b"o-2", b""),
    Frame(RAW, 12, TS + 2, EVENT + 2, b"o-3", ORDER, (("trace", None), ("empty", b""))),
    Frame(RAW, 13, TS + 3, EVENT + 3, None, None),
]
JSON_FRAMES = [FRAMES[0], FRAMES[2], FRAMES[3], Frame(RAW, 14, TS + 4, EVENT + 4, b"o-5", b"null")]
CONTEXT = RenderContext("orders", 3, "text", "text", "text", object_key="raw/orders/a.object")
JSON_CONTEXT = RenderContext("orders", 3, object_key="raw/orders/a.object")


# -- staging segments ----------------------------------------------------------------------------


def test_a_segment_with_a_null_value_or_header_is_version_4_and_reads_back_whole() -> None:
    data = segment_of_frames(FRAMES)
    assert data[:4] == NULLS_MAGIC
    assert decode_segment(data) == FRAMES
    headers_only = [FRAMES[2]]
    assert segment_of_frames(headers_only)[:4] == NULLS_MAGIC
    assert decode_segment(segment_of_frames(headers_only)) == headers_only


def test_a_segment_without_nulls_is_what_it_always_was() -> None:
    """Version 2 (or 3 with schema references) byte for byte: no null, no new version."""
    plain = [FRAMES[1], FRAMES[2]._replace(headers=(("trace", b""),))]
    data = segment_of_frames(plain)
    assert data[:4] == SEGMENT_MAGIC
    assert data == encode_segment(
        [RAW, RAW], [11, 12], [TS + 1, TS + 2], [EVENT + 1, EVENT + 2], [b"o-2", b"o-3"], [b"", ORDER],
        [b"", encode_meta("", (("trace", b""),))],
    )  # fmt: skip
    with_refs = [plain[1]._replace(schemas=(SchemaRef("value", "AVRO", "7"),))]
    assert segment_of_frames(with_refs)[:4] == REFS_MAGIC
    both = [FRAMES[0]._replace(schemas=(SchemaRef("key", "", "9"),))]
    assert segment_of_frames(both)[:4] == NULLS_MAGIC and decode_segment(segment_of_frames(both)) == both


def test_a_null_value_takes_no_bytes_and_is_never_the_empty_value() -> None:
    tombstone, empty = segment_of_frames([FRAMES[3]]), segment_of_frames([Frame(RAW, 13, TS + 3, EVENT + 3, None, b"")])
    assert len(tombstone) == len(empty)  # both hold no value bytes: only the index says which
    assert decode_segment(tombstone)[0].value is None and decode_segment(empty)[0].value == b""


def test_a_damaged_version_4_segment_is_torn() -> None:
    data = segment_of_frames(FRAMES)
    for position in range(0, len(data), 7):
        damaged = bytearray(data)
        damaged[position] ^= 0x10
        with pytest.raises(TornFrameError):  # the trailer's CRC covers every byte, the version too
            decode_segment(bytes(damaged))
    with pytest.raises(TornFrameError):
        decode_segment(data[:-1])


def test_a_null_length_in_an_older_version_is_damage_not_a_null() -> None:
    """Only version 4 may say "null": the same index under "TSG2" (CRC fixed) is refused."""
    data = segment_of_frames([FRAMES[3]])
    body = SEGMENT_MAGIC + data[4:-8]
    relabelled = body + struct.pack("<I4s", zlib.crc32(body), b"TSGE")
    with pytest.raises(TornFrameError):
        decode_segment(relabelled)


def test_the_reader_before_tombstones_meets_version_4_as_newer_never_as_damage() -> None:
    """A rollback past this version: its reader must wait for a version that reads the segment
    (the flush stays SEALED), never quarantine it (tests/integration/test_segment_upgrade.py
    runs it through a flush)."""
    data = segment_of_frames(FRAMES)
    with pytest.raises(UnsupportedSegmentError, match="newer than this version reads"):
        decode_segment_before_tombstones(data)
    damaged = bytearray(data)
    damaged[20] ^= 0x01
    with pytest.raises(TornFrameError):  # a damaged one is damage, to the old reader too
        decode_segment_before_tombstones(bytes(damaged))
    plain = segment_of_frames([FRAMES[1]])  # without nulls: the old reader reads it as before
    assert decode_segment_before_tombstones(plain) == [FRAMES[1]]


# -- content digest and fingerprints -------------------------------------------------------------


def _digest(frames: list[Frame]) -> str:
    digest = ContentDigest()
    for _ in digest.wrap(frames):
        pass
    return digest.hexdigest()


def test_the_content_digest_tells_a_tombstone_from_an_empty_value_and_is_fed_alike() -> None:
    assert _digest([FRAMES[3]]) != _digest([FRAMES[3]._replace(value=b"")])
    assert _digest([FRAMES[2]]) != _digest([FRAMES[2]._replace(headers=(("trace", b""), ("empty", b"")))])
    one_by_one = ContentDigest()
    for frame in FRAMES:
        one_by_one.update(frame)
    assert one_by_one.hexdigest() == _digest(FRAMES)


def test_a_fingerprint_tells_a_tombstone_from_an_empty_value() -> None:
    record = Record("orders", 0, 5, TS, None, b"k", (("h", None),))
    assert fingerprint(record) != fingerprint(record._replace(value=b""))
    assert fingerprint(record) != fingerprint(record._replace(headers=(("h", b""),)))
    assert fingerprint(record) == fingerprint(Record("orders", 0, 5, TS, None, b"k", (("h", None),)))


# -- object formats ------------------------------------------------------------------------------


def test_json_lines_archives_a_tombstone_as_a_null_value_marked_and_the_json_null_unmarked() -> None:
    body = render(format_for("jsonl", "none"), JSON_FRAMES, JSON_CONTEXT)
    lines = [orjson.loads(line) for line in body.splitlines()]
    assert [(line["value"], line.get("tombstone")) for line in lines] == [
        (None, True),
        ({"order_id": "o-1", "price": 12.5}, None),
        (None, True),
        (None, None),  # the JSON text null: a value, not a tombstone
    ]
    assert body.splitlines()[0].endswith(b',"headers":[{"key":"op","value":"d"}],"tombstone":true}')
    assert lines[1]["headers"] == [{"key": "trace", "value": None}, {"key": "empty", "value": ""}]
    read = list(format_for("jsonl", "none").read(body, JSON_CONTEXT))
    assert [(item.value, item.tombstone) for item in read] == [
        (None, True),
        (ORDER, False),
        (None, True),
        (b"null", False),
    ]
    assert read[1].headers == (("trace", None), ("empty", b""))


@pytest.mark.parametrize("encoding", ["text", "bytes"])
def test_json_lines_of_text_and_bytes_values(encoding: str) -> None:
    context = RenderContext("orders", 3, "text", encoding, encoding)
    body = render(format_for("jsonl", "gzip"), FRAMES, context)
    read = list(format_for("jsonl", "gzip").read(body, context))
    assert [item.value for item in read] == [frame.value for frame in FRAMES]
    assert [item.headers for item in read] == [frame.headers for frame in FRAMES]
    assert [orjson.loads(line).get("tombstone") for line in gzip.decompress(body).splitlines()] == [
        True,
        None,
        None,
        True,
    ]


@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_json_lines_renders_a_chunk_with_tombstones_as_the_per_record_path_does(encoding: str) -> None:
    """The column-at-a-time renderer marks tombstones itself (the common CDC chunk holds some):
    the bytes of the per-record path, empty values never taken for tombstones."""
    fmt = format_for("jsonl", "none")
    context = RenderContext("orders", 3, "text", encoding, "text" if encoding == "json" else encoding)
    frames = (JSON_FRAMES if encoding == "json" else FRAMES) * 300  # several render chunks
    frames = [frame._replace(offset=index) for index, frame in enumerate(frames)]
    body = render(fmt, frames, context)
    assert body == b"".join(fmt.lines(frames, context))  # type: ignore[attr-defined]
    assert [item.value for item in fmt.read(body, context)] == [frame.value for frame in frames]


def test_a_dead_lettered_tombstone_keeps_its_null_value() -> None:
    dead = Frame(DEAD_LETTER, 20, TS, NO_EVENT_TIME, b"\xff", None, (("h", None),), "invalid_key_encoding: x")
    body = render(format_for("jsonl", "none"), [dead], JSON_CONTEXT)
    line = orjson.loads(body)
    assert (line["value_base64"], line["headers"]) == (None, [{"key": "h", "value_base64": None}])
    (read,) = format_for("jsonl", "none").read(body, JSON_CONTEXT)
    assert (read.value, read.tombstone, read.headers, read.error) == (None, True, (("h", None),), dead.reason)


@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_parquet_value_and_header_value_are_nullable_and_null_for_nulls(encoding: str) -> None:
    context = RenderContext("orders", 3, "text", encoding, encoding)
    frames = JSON_FRAMES if encoding == "json" else FRAMES
    body = render(format_for("parquet", "snappy"), frames, context)
    table = pq.read_table(io.BytesIO(body))
    assert table.schema.field("value").nullable
    assert table.schema.field("headers").type.value_type.field("value").nullable
    assert table.column("value").null_count == 2
    read = list(format_for("parquet", "snappy").read(body, context))
    assert [(item.value, item.tombstone) for item in read] == [(f.value, f.value is None) for f in frames]
    assert [item.headers for item in read] == [frame.headers for frame in frames]


def test_parquet_and_avro_typed_values_are_a_null_struct_for_a_tombstone() -> None:
    schema = ValueColumn.parse_all("order_id:string,price:double,note:string?")
    context = RenderContext("orders", 3, value_schema=schema, object_key="raw/orders/a.object")
    frames = [FRAMES[0], FRAMES[2]]
    parquet = render(format_for("parquet", "zstd"), frames, context)
    assert pq.read_table(io.BytesIO(parquet)).column("value").to_pylist() == [
        None,
        {"order_id": "o-1", "price": 12.5, "note": None},
    ]
    avro = render(format_for("avro", "deflate"), frames, context)
    assert [record["value"] for record in fastavro.reader(io.BytesIO(avro))] == [  # type: ignore[index]
        None,
        {"order_id": "o-1", "price": 12.5, "note": None},
    ]
    for fmt, body in (("parquet", parquet), ("avro", avro)):
        read = list(format_for(fmt, "zstd" if fmt == "parquet" else "deflate").read(body, context))
        assert [(item.value, item.fields, item.tombstone) for item in read] == [
            (None, None, True),
            (None, {"order_id": "o-1", "price": 12.5, "note": None}, False),
        ], fmt


@pytest.mark.parametrize("encoding", ["text", "bytes"])
def test_avro_value_and_header_value_are_unions_with_null(encoding: str) -> None:
    context = RenderContext("orders", 3, "text", encoding, encoding, object_key="raw/orders/a.object")
    body = render(format_for("avro", "snappy"), FRAMES, context)
    records = list(fastavro.reader(io.BytesIO(body)))
    assert [record["value"] is None for record in records] == [True, False, False, True]  # type: ignore[index]
    read = list(format_for("avro", "snappy").read(body, context))
    assert [(item.value, item.headers) for item in read] == [(frame.value, frame.headers) for frame in FRAMES]


def test_kinesis_objects_keep_their_required_value_columns() -> None:
    """Kinesis has no tombstones: its Parquet and Avro schemas are what they were."""
    kinesis = RenderContext("clicks", "shardId-000000000001", source=KINESIS, object_key="raw/clicks/a.object")
    frame = Frame(RAW, 5, TS, EVENT, b"pk", b'{"n":1}')
    table = pq.read_table(io.BytesIO(render(format_for("parquet", "snappy"), [frame], kinesis)))
    assert not table.schema.field("value").nullable
    reader = fastavro.reader(io.BytesIO(render(format_for("avro", "null"), [frame], kinesis)))
    value = next(field for field in reader.writer_schema["fields"] if field["name"] == "value")  # type: ignore[index]
    assert value["type"] == "string"


def test_csv_writes_a_null_value_as_an_empty_unquoted_cell_and_the_empty_value_quoted() -> None:
    body = render(format_for("csv", "none"), FRAMES, CONTEXT)
    rows = body.decode().splitlines()
    assert rows[0] == '"topic","partition","offset","timestamp","event_time","key","value","headers"'
    cells = [row.split(",") for row in rows[1:]]
    assert cells[0][6] == "" and cells[1][6] == '""'  # null, then the empty string
    assert cells[3][5:7] == ["", ""]  # a null key and a null value
    assert '"[{""key"":""trace"",""value"":null}' in rows[3]
    table = read_table(body)
    assert table.column("value").to_pylist() == [None, "", ORDER.decode(), None]
    read = list(format_for("csv", "none").read(body, CONTEXT))
    assert [(item.value, item.tombstone) for item in read] == [(None, True), (b"", False), (ORDER, False), (None, True)]
    assert [item.headers for item in read] == [frame.headers for frame in FRAMES]


def test_csv_value_paths_of_a_tombstone_are_empty() -> None:
    context = RenderContext("orders", 3, columns=("offset", "value.order_id", "value.price"))
    body = render(format_for("csv", "none"), [FRAMES[0], FRAMES[2]], context)
    assert body.decode().splitlines()[1:] == ['"10",,', '"12","o-1","12.5"']


@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_text_writes_a_tombstone_as_an_empty_line(encoding: str) -> None:
    """One line per record; a json stream's empty line can only be a tombstone (an empty value
    is not JSON), a text or bytes stream's reads as the empty value it cannot be told from."""
    context = RenderContext("orders", 3, "text", encoding, encoding)
    frames = [FRAMES[0], Frame(RAW, 11, TS, EVENT, b"k", b'{"n":1}' if encoding == "json" else b"x")]
    body = render(format_for("text", "none"), frames, context)
    assert body.split(b"\n")[0] == b"" and body.count(b"\n") == 2
    read = list(format_for("text", "none").read(body, context))
    if encoding == "json":
        assert [(item.value, item.tombstone) for item in read] == [(None, True), (b'{"n":1}', False)]
    else:
        assert read[0].value == b"" and not read[0].tombstone


def test_the_bytes_container_reads_a_tombstone_back() -> None:
    body = render(format_for("bytes", "zstd"), FRAMES, CONTEXT)
    read = list(format_for("bytes", "zstd").read(body, CONTEXT))
    assert [(item.value, item.headers, item.tombstone) for item in read] == [
        (frame.value, frame.headers, frame.value is None) for frame in FRAMES
    ]


def test_a_kinesis_bytes_object_refuses_a_null_it_cannot_hold() -> None:
    kinesis = RenderContext("clicks", "shardId-000000000001", source=KINESIS)
    with pytest.raises(ValueError, match="null value"):
        render(format_for("bytes", "none"), [Frame(RAW, 5, TS, EVENT, b"pk", None)], kinesis)


def test_arrow_reads_every_nullable_column_of_a_tombstone() -> None:
    """pyarrow's own reader (what Spark's Parquet reader is to the job) sees the nulls."""
    body = render(format_for("parquet", "none"), FRAMES, CONTEXT)
    table = pq.read_table(io.BytesIO(body))
    assert table.column("value").is_null().to_pylist() == [True, False, False, True]
    headers = table.column("headers").combine_chunks().flatten()
    assert pa.compute.is_null(headers.field("value")).to_pylist() == [False, True, False]
