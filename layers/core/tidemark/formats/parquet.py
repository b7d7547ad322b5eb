"""Apache Parquet (pyarrow): one row per record, in offset order.

The columns are named by the source kind (``RenderContext.envelope``, :mod:`tidemark.sources`).
Kafka schema (every column required unless marked nullable)::

    topic       string
    partition   int32
    offset      int64
    timestamp   int64                       Kafka record timestamp, epoch ms (-1 when unset)
    event_time  timestamp[ms, tz=UTC]
    key         string | binary, nullable   string for key_encoding text, binary for bytes
    value       string | binary | struct,   string: the JSON text (value_encoding json) or the
                nullable (Kafka)            text (text); binary for bytes; with a declared
                                            value_schema a struct of its fields: string,
                                            int64 (long), double, bool (boolean); nullable
                                            fields nullable, a missing field null. Null for a
                                            Kafka tombstone (a null value; a JSON value that is
                                            the text ``null`` is the string ``"null"``)
    headers     list<element: struct<key: string, value: string | binary (nullable)>>, [] when
                none; a header's value null when the record's header value is
    key_schema    struct<format: string, id: string>, nullable   only with schema references
    value_schema  struct<format: string, id: string>, nullable   (``RenderSpec.schema_refs``):
                                                the schema the key / value was written with
                                                (``format`` null when only the id is known)

Kinesis schema (no headers column: Kinesis records have none)::

    stream                          string
    shard_id                        string      shardId-000000000007
    sequence_number                 string      the decimal digits (up to 129: beyond int64 and
                                                Spark's 38-digit decimals, so never a number)
    approximate_arrival_timestamp   timestamp[ms, tz=UTC]   always set, so a timestamp (Kafka's
                                                            ``timestamp`` may be -1: an int64)
    event_time                      timestamp[ms, tz=UTC]
    partition_key                   string | binary, nullable   as Kafka's ``key``
    value                           as Kafka's ``value``, typed value columns included

A Kafka object's value and header values are nullable (``SourceShape.tombstones``; written
before tombstones were archived they were required: a reader merging schemas takes required
as nullable, and a resumed flush re-rendered so is adopted by its content digest,
``tidemark.objects``). Kinesis and RabbitMQ records are never null: their columns stay required.

What decides the types is the envelope, not the source's name: positions and partition ids
are strings when ``position_is_text``, the record timestamp a timestamp when the source writes
it as an instant (``timestamp_in_seconds``), and there is a headers column when the source has
headers.

Codecs: ``snappy`` (default), ``zstd`` (the stream's ``zstd_level``), ``gzip`` (the stream's
``gzip_level``), ``none``. Every writer setting that shapes the bytes is pinned here, so the
same frames give the same file for a given pyarrow version: a row group every
:data:`ROW_GROUP_ROWS` records or :data:`ROW_GROUP_BYTES` of keys and values, whichever comes
first (memory stays bounded whatever the buffer's size), format version 2.6, data pages of
:data:`DATA_PAGE_SIZE`, dictionary encoding for the columns that repeat
(:func:`dictionary_columns`), statistics on, the Arrow schema stored and no other metadata.
(The footer names the writing library's version, ``parquet-cpp-arrow version X``: a pyarrow
upgrade between a flush and its retry may change an object's bytes, as any codec library's
would.)

pyarrow ships in the formats layer, not the core one: this module is imported only for
streams that write Parquet.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import Any, BinaryIO

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from tidemark.formats import schema_refs
from tidemark.formats.base import ArchivedEnvelope, RenderContext, ValueColumn
from tidemark.formats.compression import ZSTD_LEVEL, PositionedSink, chunked
from tidemark.records.model import Headers, Schemas
from tidemark.sources import KAFKA_SHAPE, EnvelopeNames, shape_of
from tidemark.staging.frames import Frame

CODECS = ("snappy", "zstd", "gzip", "none")
ROW_GROUP_ROWS = 131_072
ROW_GROUP_BYTES = 32 * 1024 * 1024
DATA_PAGE_SIZE = 1024 * 1024
FORMAT_VERSION = "2.6"

_VALUE_TYPES = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_()}
_TIMESTAMP = pa.timestamp("ms", tz="UTC")
#: a schema reference column's type (``tidemark.formats.schema_refs``)
SCHEMA_REF = pa.struct([pa.field("format", pa.string(), nullable=True), pa.field("id", pa.string(), nullable=False)])


def _string_or_binary(encoding: str) -> pa.DataType:
    return pa.binary() if encoding == "bytes" else pa.string()


def arrow_schema(context: RenderContext) -> pa.Schema:
    """The Arrow schema of a stream's Parquet objects (also what the readers expect)."""
    if context.value_schema:
        if context.value_encoding != "json":
            raise ValueError("a value schema needs value_encoding json")
        value = pa.struct([pa.field(c.name, _VALUE_TYPES[c.type], nullable=c.nullable) for c in context.value_schema])
    else:
        value = _string_or_binary(context.value_encoding)
    names = context.envelope
    nulls = shape_of(context.source).tombstones  # Kafka: a tombstone's value, a null header value
    fields = [
        pa.field(names.source, pa.string(), nullable=False),
        pa.field(names.partition, pa.string() if names.position_is_text else pa.int32(), nullable=False),
        pa.field(names.position, pa.string() if names.position_is_text else pa.int64(), nullable=False),
        pa.field(names.timestamp, _TIMESTAMP if names.timestamp_in_seconds else pa.int64(), nullable=False),
        pa.field("event_time", _TIMESTAMP, nullable=False),
        pa.field(names.key, _string_or_binary(context.key_encoding), nullable=True),
        pa.field("value", value, nullable=nulls),
    ]
    if names.headers is not None:
        header = pa.struct(
            [
                pa.field("key", pa.string(), nullable=False),
                pa.field("value", _string_or_binary(context.header_encoding), nullable=nulls),
            ]
        )
        fields.append(pa.field(names.headers, pa.list_(pa.field("element", header, nullable=False)), nullable=False))
    if context.schema_refs:
        fields += [pa.field(name, SCHEMA_REF, nullable=True) for name in schema_refs.FIELDS]
    return pa.schema(fields)


def dictionary_columns(schema: pa.Schema, names: EnvelopeNames = KAFKA_SHAPE.envelope) -> list[str]:
    """The columns written with dictionary encoding: the ones that repeat (topic or stream,
    partition or shard, keys, header names and values, typed string fields), not the unique
    ones (positions, times, whole values), where a dictionary only costs time and space."""
    columns = [names.source, names.partition, names.key]
    if names.headers is not None:
        columns += [f"{names.headers}.list.element.key", f"{names.headers}.list.element.value"]
    value_type = schema.field("value").type
    if pa.types.is_struct(value_type):
        columns += [f"value.{field.name}" for field in value_type if pa.types.is_string(field.type)]
    return columns


#: what a required field holds under a null struct (a tombstone's value): never read, since the
#: struct is null, but Arrow refuses a null in a required child whatever its parent
_PLACEHOLDER: dict[str, Any] = {"string": "", "long": 0, "double": 0.0, "boolean": False}


def typed_children(values: Sequence[bytes | None], columns: Sequence[ValueColumn]) -> list[list[Any]]:
    """Per declared field, its values across ``values`` (JSON objects validated against the
    schema upstream): missing -> None, JSON integers of a double field -> float. A tombstone
    (``None``) has a null struct: its fields are None, or a placeholder where required."""
    loads = orjson.loads
    parsed: list[dict[str, Any] | None] = [None if value is None else loads(value) for value in values]
    children: list[list[Any]] = []
    for column in columns:
        name = column.name
        absent = None if column.nullable else _PLACEHOLDER[column.type]
        items = [absent if item is None else item.get(name) for item in parsed]
        if column.type == "double":
            items = [float(item) if item.__class__ is int else item for item in items]
        children.append(items)
    return children


class ParquetFormat:
    content_type = "application/vnd.apache.parquet"
    extension = "parquet"

    def __init__(self, compression: str = "snappy", gzip_level: int = 6, zstd_level: int = ZSTD_LEVEL) -> None:
        if compression not in CODECS:
            raise ValueError(f"unsupported compression {compression!r}")
        self.compression = compression
        self.gzip_level = gzip_level
        self.zstd_level = zstd_level

    def _writer_options(self, schema: pa.Schema, names: EnvelopeNames) -> dict[str, Any]:
        level = {"zstd": self.zstd_level, "gzip": self.gzip_level}.get(self.compression)
        return {
            "compression": self.compression,
            "compression_level": level,
            "version": FORMAT_VERSION,
            "use_dictionary": dictionary_columns(schema, names),
            "write_statistics": True,
            "data_page_size": DATA_PAGE_SIZE,
            "data_page_version": "1.0",
            "dictionary_pagesize_limit": DATA_PAGE_SIZE,
            "use_compliant_nested_type": True,
            "store_schema": True,
            "write_page_index": False,
            "write_batch_size": 1024,
        }

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        schema = arrow_schema(context)
        count = 0
        sink = PositionedSink(out)
        with pq.ParquetWriter(sink, schema, **self._writer_options(schema, context.envelope)) as writer:
            for chunk in chunked(frames, ROW_GROUP_ROWS, ROW_GROUP_BYTES):
                writer.write_table(self._table(chunk, context, schema), row_group_size=ROW_GROUP_ROWS)
                count += len(chunk)
        return count

    @staticmethod
    def _table(chunk: list[Frame], context: RenderContext, schema: pa.Schema) -> pa.Table:
        n = len(chunk)
        _kinds, offsets, timestamps, event_times, keys, values, headers, _reasons, schemas = zip(*chunk, strict=True)
        if context.value_schema:
            value_type = schema.field("value").type
            children = typed_children(values, context.value_schema)
            tombstones = pa.array([value is None for value in values], pa.bool_()) if None in values else None
            value = pa.StructArray.from_arrays(
                [pa.array(items, type=field.type) for items, field in zip(children, value_type, strict=True)],
                fields=list(value_type),
                mask=tombstones,
            )
        else:
            value = _byte_strings(values, schema.field("value").type)
        envelope = context.envelope
        if envelope.position_is_text:
            partition = pa.repeat(pa.scalar(str(context.partition), pa.string()), n)
            positions = pa.array([str(offset) for offset in offsets], pa.string())
        else:
            partition = pa.repeat(pa.scalar(context.partition, pa.int32()), n)
            positions = pa.array(offsets, pa.int64())
        stamps = pa.array(timestamps, pa.int64())
        columns = [
            pa.repeat(pa.scalar(context.topic, pa.string()), n),
            partition,
            positions,
            stamps.view(_TIMESTAMP) if envelope.timestamp_in_seconds else stamps,
            pa.array(event_times, pa.int64()).view(_TIMESTAMP),
            _byte_strings(keys, schema.field(envelope.key).type),
            value,
        ]
        if envelope.headers is not None:
            columns.append(_headers(headers, schema.field(envelope.headers).type, n))
        elif any(headers):
            raise ValueError("this source's envelope has no headers to keep them in")
        if context.schema_refs:  # (a spec without them has no columns for them: records keep none)
            cells = list(zip(*map(schema_refs.columns, schemas), strict=True))
            columns += [pa.array(column, SCHEMA_REF) for column in cells]
        return pa.Table.from_arrays(columns, schema=schema)

    def read(self, body: bytes, context: RenderContext) -> Iterator[ArchivedEnvelope]:
        """Every row back: ``value`` the value's bytes (JSON text for json), or ``fields`` the
        typed columns of a declared value schema; positions as ints, record timestamps as epoch
        ms, ``()`` headers for a source without them."""
        parquet = pq.ParquetFile(io.BytesIO(body))
        for batch in parquet.iter_batches(batch_size=ROW_GROUP_ROWS):
            yield from _envelopes(batch, context.envelope)


def _headers(headers: Sequence[Headers], header_type: pa.DataType, n: int) -> pa.Array:
    if any(headers):
        names = [name for items in headers if items for name, _ in items]
        data = [data for items in headers if items for _, data in items]
        element = header_type.value_type
        entries = pa.StructArray.from_arrays(
            [pa.array(names, pa.string()), _byte_strings(data, element.field("value").type)], fields=list(element)
        )
        ends = pa.array(list(accumulate(map(len, headers), initial=0)), pa.int32())
    else:
        entries = pa.array([], type=header_type.value_type)
        ends = pa.repeat(pa.scalar(0, pa.int32()), n + 1)
    return pa.ListArray.from_arrays(ends, entries, type=header_type)


def _byte_strings(items: Sequence[bytes | None], type_: pa.DataType) -> pa.Array:
    """Bytes as a binary or string column: a string column is built as binary and cast, which
    validates the UTF-8 in one pass (about twice as fast as converting item by item)."""
    array = pa.array(items, pa.binary())
    return array if pa.types.is_binary(type_) else array.cast(pa.string())


def _as_bytes(item: Any) -> Any:
    return item.encode("utf-8") if isinstance(item, str) else item


def _to_bytes(items: list[Any]) -> list[bytes | None]:
    return [_as_bytes(item) for item in items]


def _envelopes(batch: Any, names: EnvelopeNames) -> Iterator[ArchivedEnvelope]:
    """Rows of an Arrow record batch in the envelope schema of ``names``."""

    def column(name: str) -> Any:
        return batch.column(batch.schema.get_field_index(name))

    def epoch_ms(name: str) -> list[Any]:
        items = column(name)
        found: list[Any] = (items.cast(pa.int64()) if pa.types.is_timestamp(items.type) else items).to_pylist()
        return found

    values = column("value")
    typed = pa.types.is_struct(values.type)
    value_items: list[Any] = values.to_pylist() if typed else _to_bytes(values.to_pylist())
    if names.headers is None:
        headers: list[Headers] = [()] * batch.num_rows
    else:
        headers = [
            tuple((item["key"], _as_bytes(item["value"])) for item in row) for row in column(names.headers).to_pylist()
        ]
    positions = column(names.position).to_pylist()
    refs: list[Schemas | None] = [None] * batch.num_rows
    if batch.schema.get_field_index("value_schema") >= 0:  # key_schema too: one goes with the other
        refs = [
            schema_refs.from_envelope({"key_schema": key, "value_schema": value})
            for key, value in zip(column("key_schema").to_pylist(), column("value_schema").to_pylist(), strict=True)
        ]
    rows = zip(
        column(names.source).to_pylist(),
        column(names.partition).to_pylist(),
        [int(position) for position in positions] if names.position_is_text else positions,
        epoch_ms(names.timestamp),
        epoch_ms("event_time"),
        _to_bytes(column(names.key).to_pylist()),
        value_items,
        headers,
        refs,
        strict=True,
    )
    for topic, partition, offset, timestamp, event_time, key, value, header, ref in rows:
        tombstone = value is None
        if typed:
            yield ArchivedEnvelope(
                topic,
                partition,
                offset,
                timestamp,
                event_time,
                key,
                None,
                header,
                value,
                schemas=ref,
                tombstone=tombstone,
            )
        else:
            yield ArchivedEnvelope(
                topic, partition, offset, timestamp, event_time, key, value, header, schemas=ref, tombstone=tombstone
            )
