"""tidemark.formats.avro: the envelope as Avro records, read back with fastavro."""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any

import fastavro
import pytest
import zstandard

from tests.support.independent import expected_envelopes
from tests.unit.test_formats_parquet import SCHEMA, TYPED_CONTEXT, TYPED_FIELDS, TYPED_FRAMES
from tests.unit.test_formats_registry import CONTEXTS, JSON_CONTEXT, TS, envelopes, frames_for, render
from tidemark.formats import format_for
from tidemark.formats.avro import SYNC_INTERVAL, AvroFormat, avro_schema, sync_marker
from tidemark.formats.base import RenderContext
from tidemark.staging.frames import RAW, Frame

CODECS = ("deflate", "snappy", "zstandard", "null")


def read_all(body: bytes) -> tuple[Any, list[Any]]:
    reader = fastavro.reader(io.BytesIO(body))
    return reader, list(reader)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_every_record_reads_back_with_fastavro(codec: str, encoding: str) -> None:
    frames, context = frames_for(encoding), CONTEXTS[encoding]
    body = render(format_for("avro", codec, 9), frames, context)
    assert body[:4] == b"Obj\x01"
    reader, records = read_all(body)
    assert records == expected_envelopes(frames, context)
    assert reader.codec == codec
    assert set(reader.metadata) == {"avro.schema", "avro.codec"}
    assert list(AvroFormat(codec).read(body, context)) == envelopes(frames, context)


def test_writer_schema() -> None:
    body = render(AvroFormat(), frames_for("bytes"), CONTEXTS["bytes"])
    schema = json.loads(read_all(body)[0].metadata["avro.schema"])
    assert schema["name"] == "tidemark.Envelope" or (schema["name"], schema.get("namespace")) == (
        "Envelope",
        "tidemark",
    )
    types = {field["name"]: field["type"] for field in schema["fields"]}
    assert types["topic"] == "string"
    assert types["partition"] == "int"
    assert types["offset"] == types["timestamp"] == "long"
    assert types["event_time"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert types["key"] == ["null", "bytes"]
    assert types["value"] == ["null", "bytes"]  # null: a tombstone
    assert types["headers"]["type"] == "array"
    header = types["headers"]["items"]
    assert [(field["name"], field["type"]) for field in header["fields"]] == [
        ("key", "string"),
        ("value", ["null", "bytes"]),
    ]
    text = avro_schema(CONTEXTS["text"])
    assert [field["type"] for field in text["fields"] if field["name"] in ("key", "value")] == [
        ["null", "string"],
        ["null", "string"],
    ]


def test_sync_marker_comes_from_the_object_key() -> None:
    frames = frames_for("json")
    first = render(AvroFormat(), frames, RenderContext("orders", 3, object_key="raw/a.avro"))
    second = render(AvroFormat(), frames, RenderContext("orders", 3, object_key="raw/b.avro"))
    assert first != second
    assert sync_marker("raw/a.avro") == hashlib.sha256(b"raw/a.avro").digest()[:16]
    assert first[-16:] == sync_marker("raw/a.avro") and second[-16:] == sync_marker("raw/b.avro")
    assert read_all(first)[1] == read_all(second)[1]
    assert render(AvroFormat(), frames, RenderContext("orders", 3, object_key="raw/a.avro")) == first


def test_deflate_level_follows_gzip_level() -> None:
    frames = [Frame(RAW, i, TS, TS, None, b'{"i":%d,"pad":"%s"}' % (i, b"ab" * 50)) for i in range(2_000)]
    fast, best = (
        render(AvroFormat("deflate", 1), frames, JSON_CONTEXT),
        render(AvroFormat("deflate", 9), frames, JSON_CONTEXT),
    )
    assert fast != best
    assert read_all(fast)[1] == read_all(best)[1]


def _blocks(body: bytes) -> list[tuple[int, bytes]]:
    """(record count, block data) of every block, parsed by hand (no fastavro codec involved)."""
    stream = io.BytesIO(body)
    assert stream.read(4) == b"Obj\x01"

    def long() -> int:
        shift = result = 0
        while True:
            byte = stream.read(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7

    while (count := long()) != 0:  # header metadata map
        for _ in range(abs(count)):
            stream.read(long())
            stream.read(long())
    sync = stream.read(16)
    blocks = []
    while stream.tell() < len(body):
        records = long()
        blocks.append((records, stream.read(long())))
        assert stream.read(16) == sync
    return blocks


def test_zstandard_blocks_are_plain_zstd_frames() -> None:
    frames = [Frame(RAW, i, TS, TS, b"k", b'{"i":%d,"pad":"%s"}' % (i, b"x" * 200)) for i in range(5_000)]
    body = render(AvroFormat("zstandard"), frames, JSON_CONTEXT)
    blocks = _blocks(body)
    assert len(blocks) > 1  # a block per SYNC_INTERVAL
    assert sum(count for count, _ in blocks) == len(frames)
    raw = b"".join(zstandard.ZstdDecompressor().decompressobj().decompress(data) for _, data in blocks)
    assert len(raw) > SYNC_INTERVAL
    null_blocks = _blocks(render(AvroFormat("null"), frames, JSON_CONTEXT))
    assert raw == b"".join(data for _, data in null_blocks)


@pytest.mark.parametrize("codec", CODECS)
def test_declared_value_schema_gives_a_value_record(codec: str) -> None:
    body = render(AvroFormat(codec), TYPED_FRAMES, TYPED_CONTEXT)
    reader, records = read_all(body)
    schema = json.loads(reader.metadata["avro.schema"])
    nullable, value = next(field["type"] for field in schema["fields"] if field["name"] == "value")
    assert nullable == "null"  # a tombstone's value
    assert value["type"] == "record" and value["name"].rsplit(".", 1)[-1] == "Value"
    assert [(field["name"], field["type"]) for field in value["fields"]] == [
        ("order_id", "string"),
        ("price", "double"),
        ("quantity", "long"),
        ("paid", ["null", "boolean"]),
        ("note", ["null", "string"]),
    ]
    assert [record["value"] for record in records] == TYPED_FIELDS
    assert isinstance(records[0]["value"]["price"], float)
    read = list(AvroFormat(codec).read(body, TYPED_CONTEXT))
    assert [envelope.fields for envelope in read] == TYPED_FIELDS
    assert {envelope.value for envelope in read} == {None}
    assert [envelope.key for envelope in read] == [b"o-1", b"o-2", None, b"o-4"]
    assert len(SCHEMA) == 5
