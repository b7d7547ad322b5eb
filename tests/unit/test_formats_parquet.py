"""tidemark.formats.parquet: the envelope as typed Parquet columns, read back with pyarrow."""

from __future__ import annotations

import base64
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.independent import expected_envelopes
from tests.unit.test_formats_registry import (
    CONTEXTS,
    EVENT,
    JSON_CONTEXT,
    TS,
    envelopes,
    frames_for,
    render,
)
from tidemark.formats import format_for
from tidemark.formats.base import RenderContext, ValueColumn
from tidemark.formats.parquet import ParquetFormat, arrow_schema
from tidemark.staging.frames import RAW, Frame

CODECS = {"snappy": "SNAPPY", "zstd": "ZSTD", "gzip": "GZIP", "none": "UNCOMPRESSED"}


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_every_record_reads_back_with_pyarrow(codec: str, encoding: str) -> None:
    frames, context = frames_for(encoding), CONTEXTS[encoding]
    body = render(format_for("parquet", codec), frames, context)
    assert body[:4] == b"PAR1" and body[-4:] == b"PAR1"
    table = pq.read_table(io.BytesIO(body))
    assert table.to_pylist() == expected_envelopes(frames, context)
    metadata = pq.ParquetFile(io.BytesIO(body)).metadata
    assert metadata.format_version == "2.6"
    assert {metadata.row_group(0).column(i).compression for i in range(metadata.num_columns)} == {CODECS[codec]}
    assert list(ParquetFormat(codec).read(body, context)) == envelopes(frames, context)


@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_schema_types(encoding: str) -> None:
    context = CONTEXTS[encoding]
    kind = pa.binary() if encoding == "bytes" else pa.string()
    header = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", kind)])  # null: a null header
    expected = pa.schema(
        [
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.int64(), nullable=False),
            pa.field("event_time", pa.timestamp("ms", tz="UTC"), nullable=False),
            pa.field("key", kind),
            pa.field("value", kind),  # null: a tombstone
            pa.field("headers", pa.list_(pa.field("element", header, nullable=False)), nullable=False),
        ]
    )
    assert arrow_schema(context) == expected
    body = render(ParquetFormat(), frames_for(encoding), context)
    assert pq.read_schema(io.BytesIO(body)).remove_metadata() == expected
    assert set(pq.ParquetFile(io.BytesIO(body)).metadata.metadata) == {b"ARROW:schema"}  # nothing else


def test_the_json_value_keeps_its_original_text() -> None:
    frames = frames_for("json")
    table = pq.read_table(io.BytesIO(render(ParquetFormat(), frames, JSON_CONTEXT)))
    assert [value.encode() for value in table.column("value").to_pylist()] == [frame.value for frame in frames]
    assert table.column("timestamp").to_pylist()[1] == -1
    assert table.column("event_time").cast(pa.int64()).to_pylist()[0] == EVENT


def test_non_utf8_headers_and_keys_survive_as_binary() -> None:
    frames = frames_for("bytes")
    table = pq.read_table(io.BytesIO(render(ParquetFormat(), frames, CONTEXTS["bytes"])))
    assert table.column("key").to_pylist()[0] == b"\xff\x00k"
    assert table.column("headers").to_pylist()[0] == [
        {"key": "bin", "value": b"\xff\xfe\x00"},
        {"key": "", "value": b""},
    ]
    assert base64.b64encode(table.column("value").to_pylist()[3]) == base64.b64encode(frames[3].value)


SCHEMA = (
    ValueColumn("order_id", "string", False),
    ValueColumn("price", "double", False),
    ValueColumn("quantity", "long", False),
    ValueColumn("paid", "boolean", True),
    ValueColumn("note", "string", True),
)
TYPED_CONTEXT = RenderContext("orders", 3, value_schema=SCHEMA)
TYPED_FRAMES = [
    Frame(RAW, 1, TS, EVENT, b"o-1", b'{"order_id":"o-1","price":12,"quantity":2,"paid":true,"note":"a"}'),
    Frame(RAW, 2, TS, EVENT, b"o-2", b'{"order_id":"o-2","price":12.5,"quantity":-9007199254740993}'),
    Frame(RAW, 3, TS, EVENT, None, b'{"note":null,"paid":false,"quantity":0,"price":1e3,"order_id":"\\u00e9"}'),
    Frame(RAW, 4, TS, EVENT, b"o-4", b'{"order_id":"o-4","price":9007199254740993,"quantity":1,"paid":null}'),
]
TYPED_FIELDS = [
    {"order_id": "o-1", "price": 12.0, "quantity": 2, "paid": True, "note": "a"},
    {"order_id": "o-2", "price": 12.5, "quantity": -9007199254740993, "paid": None, "note": None},
    {"order_id": "\u00e9", "price": 1000.0, "quantity": 0, "paid": False, "note": None},
    {"order_id": "o-4", "price": 9007199254740992.0, "quantity": 1, "paid": None, "note": None},
]


@pytest.mark.parametrize("codec", list(CODECS))
def test_declared_value_schema_gives_typed_columns(codec: str) -> None:
    body = render(ParquetFormat(codec), TYPED_FRAMES, TYPED_CONTEXT)
    schema = pq.read_schema(io.BytesIO(body))
    value = schema.field("value").type
    assert [(field.name, field.type, field.nullable) for field in value] == [
        ("order_id", pa.string(), False),
        ("price", pa.float64(), False),
        ("quantity", pa.int64(), False),
        ("paid", pa.bool_(), True),
        ("note", pa.string(), True),
    ]
    table = pq.read_table(io.BytesIO(body))
    assert table.column("value").to_pylist() == TYPED_FIELDS
    assert table.flatten().column("value.price").type == pa.float64()
    assert [row["key"] for row in table.to_pylist()] == ["o-1", "o-2", None, "o-4"]
    read = list(ParquetFormat(codec).read(body, TYPED_CONTEXT))
    assert [envelope.fields for envelope in read] == TYPED_FIELDS
    assert {envelope.value for envelope in read} == {None}
    assert render(ParquetFormat(codec), TYPED_FRAMES, TYPED_CONTEXT) == body


def test_a_value_schema_needs_json_values() -> None:
    with pytest.raises(ValueError, match="value_encoding json"):
        render(ParquetFormat(), TYPED_FRAMES, RenderContext("t", 0, value_encoding="text", value_schema=SCHEMA))


def test_large_buffers_are_written_in_bounded_row_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tidemark.formats.parquet.ROW_GROUP_ROWS", 1_000)
    frames = [
        Frame(
            RAW,
            offset,
            TS + offset,
            EVENT,
            b"k%d" % offset,
            b'{"i":%d}' % offset,
            (("n", b"%d" % offset),) * (offset % 3),
        )
        for offset in range(4_500)
    ]
    body = render(ParquetFormat(), frames, JSON_CONTEXT)
    metadata = pq.ParquetFile(io.BytesIO(body)).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [1_000] * 4 + [500]
    table = pq.read_table(io.BytesIO(body))
    assert table.column("offset").to_pylist() == list(range(4_500))
    assert table.to_pylist() == expected_envelopes(frames, JSON_CONTEXT)
    assert list(ParquetFormat().read(body, JSON_CONTEXT)) == envelopes(frames, JSON_CONTEXT)
    monkeypatch.setattr("tidemark.formats.parquet.ROW_GROUP_BYTES", 10_000)
    metadata = pq.ParquetFile(io.BytesIO(render(ParquetFormat(), frames, JSON_CONTEXT))).metadata
    assert metadata.num_row_groups > 5


def _encodings(body: bytes) -> dict[str, tuple[str, ...]]:
    metadata = pq.ParquetFile(io.BytesIO(body)).metadata
    group = metadata.row_group(0)
    assert group.column(0).statistics is not None
    return {group.column(i).path_in_schema: group.column(i).encodings for i in range(metadata.num_columns)}


def test_dictionary_for_repeated_columns_plain_for_unique_ones() -> None:
    encodings = _encodings(render(ParquetFormat(), frames_for("json"), JSON_CONTEXT))
    dictionary = {path for path, kinds in encodings.items() if "RLE_DICTIONARY" in kinds}
    assert dictionary == {"topic", "partition", "key", "headers.list.element.key", "headers.list.element.value"}
    typed = _encodings(render(ParquetFormat(), TYPED_FRAMES, TYPED_CONTEXT))
    dictionary = {path for path, kinds in typed.items() if "RLE_DICTIONARY" in kinds}
    assert dictionary >= {"value.order_id", "value.note"}
    assert not dictionary & {"offset", "timestamp", "event_time", "value.price", "value.quantity", "value.paid"}
