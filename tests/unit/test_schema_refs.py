"""Schema references: read from events and wire formats, staged, rendered by every format that keeps them."""

from __future__ import annotations

import io
import json
import struct
import zlib
from dataclasses import replace
from typing import Any

import pytest

from tests.support.events import load_event
from tidemark.config import parse_config
from tidemark.exceptions import ConfigError
from tidemark.formats import RenderSpec, format_of
from tidemark.objects.content import ContentDigest
from tidemark.records.kafka import parse_kafka_event
from tidemark.records.model import SchemaRef
from tidemark.staging.frames import DEAD_LETTER, RAW, Frame, TornFrameError, decode_meta, encode_meta
from tidemark.staging.segment import REFS_MAGIC, SEGMENT_MAGIC, decode_segment, is_segment_v2, segment_of_frames
from tidemark.wireformat import detector, schema_id

AVRO_VALUE = (SchemaRef("value", "AVRO", "1234"),)
BOTH = (SchemaRef("key", "", "9"), SchemaRef("value", "PROTOBUF", "5f0c-uuid"))


# -- the event ------------------------------------------------------------------------------


def test_the_mappings_schema_metadata_becomes_the_records_references() -> None:
    event = load_event("msk-schema-registry")
    records = [record for batch in parse_kafka_event(event) for record in batch.records]
    assert [record.schemas for record in records] == [
        (SchemaRef("key", "AVRO", "1234"), SchemaRef("value", "AVRO", "1234")),
        (SchemaRef("value", "JSON", "5678"),),
        (),
    ]


@pytest.mark.parametrize(
    "meta",
    [
        None,
        {"dataFormat": "AVRO"},
        {"dataFormat": "AVRO", "schemaId": None},
        {"schemaId": 12},
        "AVRO",
        [],
        {"schemaId": "\ud800"},
    ],
)
def test_metadata_that_names_no_schema_id_is_no_reference(meta: Any) -> None:
    """Metadata, never a reason to fail a batch (which would hold the partition up)."""
    event = load_event("msk-schema-registry")
    first = next(iter(event["records"].values()))[0]
    first.pop("keySchemaMetadata")
    first["valueSchemaMetadata"] = meta
    [batch] = parse_kafka_event(event)
    assert batch.records[0].schemas == ()


def test_a_reference_without_a_format_keeps_its_id() -> None:
    event = load_event("msk-schema-registry")
    first = next(iter(event["records"].values()))[0]
    first["valueSchemaMetadata"] = {"dataFormat": None, "schemaId": "42"}
    [batch] = parse_kafka_event(event)
    assert batch.records[0].schemas[-1] == SchemaRef("value", "", "42")


# -- the wire format ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "found"),
    [
        (b"\x00\x00\x00\x04\xd2avro", "1234"),
        (b"\x00\x00\x00\x00\x01", "1"),  # an empty payload still names its schema
        (b"\x00\x00\x00\x01", None),  # too short for the header
        (b"\x01\x00\x00\x00\x01x", None),  # another magic byte
        (b"", None),
        (None, None),
    ],
)
def test_schema_id_reads_confluents_header(data: bytes | None, found: str | None) -> None:
    assert schema_id(data) == found


def test_the_detector_reads_only_the_parts_kept_as_bytes() -> None:
    header = b"\x00\x00\x00\x00\x07"
    assert detector("none", key=True, value=True) is None
    assert detector("confluent", key=False, value=False) is None
    values_only = detector("confluent", key=False, value=True)
    both = detector("confluent", key=True, value=True)
    assert values_only is not None and both is not None
    assert values_only(header + b"k", header + b"v") == (SchemaRef("value", "", "7"),)
    assert both(header, header + b"v") == (SchemaRef("key", "", "7"), SchemaRef("value", "", "7"))
    assert both(None, b"{}") == ()


# -- staging --------------------------------------------------------------------------------


def test_metadata_without_references_is_what_it_was() -> None:
    """Segments staged before references existed, and records without any, encode alike."""
    headers = (("h", b"v"),)
    assert encode_meta("r", headers) == encode_meta("r", headers, ())
    assert decode_meta(encode_meta("r", headers)) == ("r", headers, ())


@pytest.mark.parametrize("refs", [AVRO_VALUE, BOTH])
def test_references_survive_a_segment(refs: tuple[SchemaRef, ...]) -> None:
    frames = [
        Frame(RAW, 1, 10, 20, b"k", b"v", (), "", refs),
        Frame(RAW, 2, 10, 20, None, b"v", (("h", b"x"),)),
        Frame(DEAD_LETTER, 3, 10, -1, None, b"\x00", (("h", b"x"),), "bad: why", refs),
    ]
    assert decode_segment(segment_of_frames(frames)) == frames


@pytest.mark.parametrize("tail", [b"\x00\x00\x00\x00", b"\x01\x00\x00\x00", b"\x01\x00\x00\x00\x05\x00\x00\x00ab"])
def test_damaged_references_are_refused(tail: bytes) -> None:
    """No references (a count of 0 written), or ones that run past the end: not metadata."""
    with pytest.raises((ValueError, struct.error)):
        decode_meta(encode_meta("", ()) + tail)


def test_the_content_digest_covers_references_only_when_there_are_some() -> None:
    plain = Frame(RAW, 1, 10, 20, b"k", b"v")

    def digest(frames: list[Frame]) -> str:
        content = ContentDigest()
        list(content.wrap(frames))
        return content.hexdigest()

    assert digest([plain]) == digest([plain._replace(schemas=())])
    assert digest([plain]) != digest([plain._replace(schemas=AVRO_VALUE)])
    assert digest([plain._replace(schemas=AVRO_VALUE)]) != digest([plain._replace(schemas=BOTH)])


# -- the render spec and the formats --------------------------------------------------------


def test_specs_without_references_encode_as_before() -> None:
    assert RenderSpec("jsonl", "zstd", 6, "orders", "text", "json", "text").encode() == (
        "jsonl|zstd|6|orders|text|json|text"
    )
    spec = RenderSpec("avro", "deflate", 6, "orders", "text", "bytes", "text", schema_refs=True)
    assert spec.encode() == "avro|deflate|6|orders|text|bytes|text|||kafka|3|schema_refs"
    assert RenderSpec.decode(spec.encode()) == spec
    with pytest.raises(ValueError, match="unknown render spec field"):
        RenderSpec.decode(spec.encode().replace("schema_refs", "other"))


FRAMES = [
    Frame(RAW, 1, 10, 1_000, b"k", b'{"a":1}', (), "", AVRO_VALUE),
    Frame(RAW, 2, 10, 1_000, None, b'{"a":2}', (("h", b"x"),), "", BOTH),
    Frame(RAW, 3, 10, 1_000, b"k", b'{"a":3}'),
]


@pytest.mark.parametrize(
    ("fmt", "codec"), [("jsonl", "none"), ("parquet", "snappy"), ("avro", "null"), ("csv", "none")]
)
def test_every_format_that_keeps_references_reads_them_back(fmt: str, codec: str) -> None:
    columns = "topic,partition,offset,timestamp,event_time,key,value,headers,key_schema,value_schema"
    spec = RenderSpec(fmt, codec, 6, "orders", "text", "json", "text", columns=columns if fmt == "csv" else "")
    spec = replace(spec, schema_refs=True)
    out = io.BytesIO()
    format_of(spec).write(FRAMES, spec.context(0, "raw/orders/k"), out)
    read = list(format_of(spec).read(out.getvalue(), spec.context(0, "raw/orders/k")))
    assert [envelope.schemas for envelope in read] == [AVRO_VALUE, BOTH, None]
    assert [envelope.value for envelope in read] == [frame.value for frame in FRAMES]


def test_json_lines_writes_references_after_the_headers_and_only_where_there_are_some() -> None:
    spec = RenderSpec("jsonl", "none", 6, "orders", "text", "json", "text")
    out = io.BytesIO()
    format_of(spec).write(FRAMES, spec.context(0), out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert list(lines[1])[-3:] == ["headers", "key_schema", "value_schema"]
    assert lines[1]["key_schema"] == {"format": None, "id": "9"}
    assert lines[0]["value_schema"] == {"format": "AVRO", "id": "1234"}
    assert "value_schema" not in lines[2] and "key_schema" not in lines[0]


@pytest.mark.parametrize(("fmt", "codec"), [("parquet", "snappy"), ("avro", "null")])
def test_a_columnar_spec_without_references_renders_records_with_some_without_them(fmt: str, codec: str) -> None:
    """Never a flush that cannot render (it would hold the partition up); the encoder stages no
    references for a stream that keeps none, so this is defence in depth."""
    spec = RenderSpec(fmt, codec, 6, "orders", "text", "json", "text")
    out = io.BytesIO()
    assert format_of(spec).write(FRAMES, spec.context(0, "k"), out) == len(FRAMES)
    assert [envelope.schemas for envelope in format_of(spec).read(out.getvalue(), spec.context(0, "k"))] == [None] * 3


# -- configuration --------------------------------------------------------------------------


def _stream(**changes: Any) -> dict[str, Any]:
    from tests.support.harness import example_config_data

    data = example_config_data()
    data["streams"][0].update(aggregations=[], event_time={"source": "record_timestamp"}, **changes)
    return data


def test_a_wire_format_needs_bytes_and_a_format_that_keeps_ids() -> None:
    config = parse_config(_stream(encoding={"value": "bytes", "wire_format": "confluent"}))
    assert config.streams[0].schema_refs
    with pytest.raises(ConfigError, match=r"set encoding.value \(or key\) to bytes"):
        parse_config(_stream(encoding={"value": "json", "wire_format": "confluent"}))
    with pytest.raises(ConfigError, match="format text keeps no schema ids"):
        parse_config(_stream(encoding={"value": "bytes", "wire_format": "confluent"}, format={"type": "text"}))
    csv = parse_config(_stream(encoding={"value": "bytes", "wire_format": "confluent"}, format={"type": "csv"}))
    assert csv.streams[0].csv_columns[-2:] == ("key_schema", "value_schema")  # by default
    with pytest.raises(ConfigError, match=r"format\.columns must include key_schema, value_schema"):
        parse_config(
            _stream(
                encoding={"value": "bytes", "wire_format": "confluent"},
                format={"type": "csv", "columns": ["partition", "offset", "value"]},
            )
        )
    together = _stream(format={"type": "csv", "columns": ["partition", "offset", "value", "value_schema"]})
    together["streams"][0]["source"]["schema_registry"] = {
        "kind": "glue",
        "registry_arn": "arn:aws:glue:us-east-1:123456789012:registry/orders",
    }
    together["streams"][0]["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 2}}
    with pytest.raises(ConfigError, match="key_schema and value_schema go together"):
        parse_config(together)
    with pytest.raises(ConfigError, match=r"they need source\.schema_registry or encoding\.wire_format"):
        parse_config(_stream(format={"type": "csv", "columns": ["partition", "offset", "key_schema", "value_schema"]}))
    registry = {
        "kind": "glue",
        "registry_arn": "arn:aws:glue:us-east-1:123456789012:registry/orders",
    }
    data = _stream(encoding={"value": "bytes", "wire_format": "confluent"})
    data["streams"][0]["source"]["schema_registry"] = registry
    data["streams"][0]["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 2}}
    with pytest.raises(ConfigError, match="the mapping strips the wire format"):
        parse_config(data)


@pytest.mark.parametrize("fmt", ["parquet", "avro", "jsonl", "csv"])
def test_the_glue_table_has_the_reference_columns(fmt: str) -> None:
    from tidemark.catalog import avro_schema, describe_table

    data = _stream(encoding={"value": "bytes", "wire_format": "confluent"}, format={"type": fmt})
    stream = parse_config(data).streams[0]
    table = describe_table(stream, bucket="archive", raw_prefix="raw")
    assert table is not None
    columns = {column.name: column.type for column in table.columns}
    kind = "string" if fmt == "csv" else "struct<format:string,id:string>"  # csv: the JSON text
    assert columns["key_schema"] == columns["value_schema"] == kind
    if fmt == "avro":
        assert [field["name"] for field in avro_schema(stream)["fields"]][-2:] == ["key_schema", "value_schema"]


def test_only_segments_with_references_are_version_3() -> None:
    """A version that predates references meets them as a newer version's segment (its flush
    waits), never as damage; every other segment stays version 2 byte for byte."""
    plain = [Frame(RAW, 1, 10, 20, b"k", b"v", (("h", b"x"),))]
    assert segment_of_frames(plain)[:4] == SEGMENT_MAGIC
    with_refs = segment_of_frames([*plain, Frame(RAW, 2, 10, 20, b"k", b"v", (), "", AVRO_VALUE)])
    assert with_refs[:4] == REFS_MAGIC and is_segment_v2(with_refs)


def test_references_in_a_version_2_segment_are_damage() -> None:
    data = segment_of_frames([Frame(RAW, 2, 10, 20, b"k", b"v", (), "", AVRO_VALUE)])
    body = SEGMENT_MAGIC + data[4:-8]
    forged = body + struct.pack("<I4s", zlib.crc32(body), b"TSGE")
    with pytest.raises(TornFrameError, match="schema references in a version-2 segment"):
        decode_segment(forged)
