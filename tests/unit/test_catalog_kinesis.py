"""tidemark.catalog for Kinesis streams: the Glue columns are the Kinesis envelope's (``stream``,
``shard_id``, ``sequence_number`` as text, ``approximate_arrival_timestamp`` as each format
writes it, ``partition_key``, no headers), checked against what the format writers write;
Kafka tables are exactly what they were."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pytest

from tidemark.catalog import Column, TableDescription, avro_schema, csv_column_name, describe_table
from tidemark.clock import ManualClock
from tidemark.config.model import ArchiveSettings, StreamConfig
from tidemark.formats import RenderSpec, format_of
from tidemark.formats.parquet import arrow_schema
from tidemark.staging.frames import RAW, Frame
from tidemark.writer.stream import StreamContext

SHARD = "shardId-000000000007"
SEQUENCE = 49590338271490256608559692538361571095921575989136588898
ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/{}"
ORDER_FIELDS = [
    {"name": "order_id", "type": "string"},
    {"name": "price", "type": "double"},
    {"name": "quantity", "type": "long", "nullable": True},
]
ORDER_STRUCT = "struct<order_id:string,price:double,quantity:bigint>"
KINESIS_HEAD = [("stream", "string"), ("shard_id", "string"), ("sequence_number", "string")]


def kinesis(name: str, **sections: Any) -> StreamConfig:
    return StreamConfig.model_validate(
        {"name": name, "source": {"kind": "kinesis", "stream_arn": ARN.format(name)}, **sections}
    )


def kafka(name: str, **sections: Any) -> StreamConfig:
    return StreamConfig.model_validate(
        {"name": name, "source": {"kind": "kafka", "topic": f"t.{name}", "bootstrap_servers": ["b:9092"]}, **sections}
    )


def table(stream: StreamConfig) -> TableDescription:
    described = describe_table(stream, bucket="bucket", raw_prefix="raw")
    assert described is not None
    return described


def types(stream: StreamConfig) -> list[tuple[str, str]]:
    return [(column.name, column.type) for column in table(stream).columns]


def writer_spec(stream: StreamConfig) -> RenderSpec:
    """What the archiver renders the stream's objects with."""
    return RenderSpec.decode(StreamContext.build(stream, ArchiveSettings(), ManualClock()).spec)


def rendered(stream: StreamConfig) -> bytes:
    """One record of the stream, as the archiver writes it."""
    spec = writer_spec(stream)
    frame = Frame(RAW, SEQUENCE, 1_732_406_400_123, 1_795_245_153_123, b"user-1", b'{"order_id":"o","price":1.5}')
    out = io.BytesIO()
    format_of(spec).write(iter([frame]), spec.context(SHARD, "raw/x.object"), out)
    return out.getvalue()


def hive_type(kind: pa.DataType) -> str:
    """A Parquet column's Arrow type as the Hive type that reads it."""
    if pa.types.is_struct(kind):
        return "struct<{}>".format(",".join(f"{field.name}:{hive_type(field.type)}" for field in kind))
    if pa.types.is_list(kind):
        return f"array<{hive_type(kind.value_type)}>"
    if pa.types.is_timestamp(kind):
        return "timestamp"
    simple = {pa.string(): "string", pa.binary(): "binary", pa.int32(): "int", pa.int64(): "bigint"}
    return simple.get(kind) or {pa.float64(): "double", pa.bool_(): "boolean"}[kind]


# -- Kinesis -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_parquet_and_avro_tables_hold_kinesis_positions_as_text_and_arrival_as_a_timestamp(fmt: str) -> None:
    assert types(kinesis("clicks", format={"type": fmt})) == [
        *KINESIS_HEAD,
        ("approximate_arrival_timestamp", "timestamp"),
        ("event_time", "timestamp"),
        ("partition_key", "string"),
        ("value", "string"),
    ]
    typed = kinesis("orders", format={"type": fmt, "value_schema": {"fields": ORDER_FIELDS}})
    assert types(typed)[-1] == ("value", ORDER_STRUCT)
    raw = kinesis("blobs", encoding={"key": "bytes", "value": "bytes"}, format={"type": fmt})
    assert dict(types(raw))["partition_key"] == dict(types(raw))["value"] == "binary"


@pytest.mark.parametrize(
    "stream",
    [
        kinesis("clicks", format={"type": "parquet"}),
        kinesis("raw", encoding={"key": "bytes", "value": "bytes"}, format={"type": "parquet"}),
        kinesis("orders", format={"type": "parquet", "value_schema": {"fields": ORDER_FIELDS}}),
        kafka("kafka-orders", format={"type": "parquet", "value_schema": {"fields": ORDER_FIELDS}}),
        kafka("kafka-raw", encoding={"key": "bytes", "headers": "bytes"}, format={"type": "parquet"}),
    ],
    ids=["kinesis-json", "kinesis-bytes", "kinesis-typed", "kafka-typed", "kafka-bytes"],
)
def test_parquet_columns_are_what_the_writer_writes(stream: StreamConfig) -> None:
    spec = writer_spec(stream)
    schema = arrow_schema(spec.context(SHARD if spec.source == "kinesis" else 0))
    assert types(stream) == [(field.name, hive_type(field.type)) for field in schema]


def test_the_avro_literal_is_the_kinesis_writer_schema() -> None:
    from tidemark.formats.avro import avro_schema as writer_schema  # fastavro: the formats layer

    for stream in (
        kinesis("clicks", format={"type": "avro"}),
        kinesis("orders", encoding={"key": "bytes"}, format={"type": "avro", "value_schema": {"fields": ORDER_FIELDS}}),
    ):
        literal = avro_schema(stream)
        assert literal == writer_schema(writer_spec(stream).context(SHARD))
        assert [field["name"] for field in literal["fields"]] == [name for name, _type in types(stream)]
        assert table(stream).serde_parameters["avro.schema.literal"] == json.dumps(literal, separators=(",", ":"))
        fields = {field["name"]: field["type"] for field in literal["fields"]}
        assert fields["sequence_number"] == fields["shard_id"] == "string"
        assert fields["approximate_arrival_timestamp"] == {"type": "long", "logicalType": "timestamp-millis"}


def test_the_jsonl_table_reads_kinesis_lines_as_written() -> None:
    """Positions are JSON strings, the arrival time a JSON number of epoch seconds (a double),
    keys of the table's columns in the line's order."""
    stream = kinesis("clicks", encoding={"key": "bytes"}, format={"type": "jsonl", "compression": "none"})
    assert types(stream) == [
        *KINESIS_HEAD,
        ("approximate_arrival_timestamp", "double"),
        ("event_time", "timestamp"),
        ("partition_key", "string"),
        ("value", "string"),
    ]
    line = json.loads(rendered(stream))
    assert list(line) == [name for name, _type in types(stream)]
    assert (line["shard_id"], line["sequence_number"]) == (SHARD, str(SEQUENCE))
    assert isinstance(line["approximate_arrival_timestamp"], float)
    comments = {column.name: column.comment for column in table(stream).columns}
    assert "epoch seconds" in comments["approximate_arrival_timestamp"]
    assert "129" in comments["sequence_number"]


def test_the_csv_table_has_the_kinesis_default_columns_or_the_configured_ones() -> None:
    default = kinesis("clicks", format={"type": "csv", "compression": "none"})
    header = rendered(default).split(b"\n", 1)[0].decode()
    assert header.replace('"', "").split(",") == list(default.csv_columns)
    assert types(default) == [
        *KINESIS_HEAD,
        ("approximate_arrival_timestamp", "string"),
        ("event_time", "string"),
        ("partition_key", "string"),
        ("value", "string"),
    ]
    chosen = kinesis("views", format={"type": "csv", "columns": ["sequence_number", "shard_id", "value.page.id"]})
    assert table(chosen).columns == (
        Column("sequence_number", "string", "Kinesis sequence number (its decimal digits, up to 129: text)"),
        Column("shard_id", "string", "Kinesis shard id"),
        Column(csv_column_name("value.page.id"), "string", "JSON value field page.id (as text)"),
    )
    comments = {column.name: column.comment for column in table(default).columns}
    assert "epoch seconds" in comments["approximate_arrival_timestamp"]


def test_the_text_table_and_the_description_name_the_kinesis_stream() -> None:
    text = kinesis("logs", encoding={"value": "text"}, format={"type": "text"})
    assert table(text).columns == (Column("value", "string", "Kinesis record value, one per line"),)
    assert table(text).description == "Tidemark archive of stream logs (Kinesis stream logs), text"
    assert describe_table(kinesis("blobs", format={"type": "bytes"}), bucket="b", raw_prefix="raw") is None


# -- Kafka, unchanged ----------------------------------------------------------------------------

KAFKA_COMMENTS = {
    "topic": "Kafka topic",
    "partition": "Kafka partition",
    "offset": "Kafka offset",
    "timestamp": "Kafka record timestamp (epoch ms)",
    "event_time": "event time (UTC) the record is filed under",
    "key": "Kafka record key",
    "value": "Kafka record value",
    "headers": "Kafka record headers",
    "tombstone": "true for a tombstone (a null value), null otherwise",
}


@pytest.mark.parametrize(
    ("fmt", "timestamp", "value", "headers"),
    [
        ("parquet", "bigint", "binary", "array<struct<key:string,value:binary>>"),
        ("avro", "bigint", "binary", "array<struct<key:string,value:binary>>"),
        ("jsonl", "bigint", "string", "array<struct<key:string,value:string>>"),
    ],
)
def test_kafka_tables_are_unchanged(fmt: str, timestamp: str, value: str, headers: str) -> None:
    stream = kafka("orders", encoding={"value": "bytes", "headers": "bytes"}, format={"type": fmt})
    expected = [
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", timestamp),
        ("event_time", "timestamp"),
        ("key", "string"),
        ("value", value),
        ("headers", headers),
    ]
    if fmt == "jsonl":  # the one column tombstones added: JSON Lines' marker
        expected.append(("tombstone", "boolean"))
    assert table(stream).columns == tuple(Column(name, kind, KAFKA_COMMENTS[name]) for name, kind in expected)
    assert table(stream).description == f"Tidemark archive of stream orders (topic t.orders), {fmt}"
    csv = kafka("shipments", format={"type": "csv"})
    assert table(csv).columns == tuple(
        Column(name, "string", comment) for name, comment in KAFKA_COMMENTS.items() if name != "tombstone"
    )
    text = kafka("logs", encoding={"value": "text"}, format={"type": "text"})
    assert table(text).columns == (Column("value", "string", "Kafka record value, one per line"),)
