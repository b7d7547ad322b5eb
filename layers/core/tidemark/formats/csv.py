"""CSV (pyarrow's writer): a header row, then one row per record, in offset order.

Columns are the stream's ``format.columns`` or, when none are set, every envelope field of the
source kind (``RenderContext.envelope.columns``): for Kafka ``topic, partition, offset,
timestamp, event_time, key, value, headers``, for Kinesis ``stream, shard_id,
sequence_number, approximate_arrival_timestamp, event_time, partition_key, value`` (Kinesis
records have no headers). Cells:

=================================== =======================================================
``topic`` / ``stream``              the topic / the stream's name
``partition`` / ``shard_id``        the partition number / the shard id
``offset`` / ``sequence_number``    the offset / the sequence number, its decimal digits
``timestamp``                       Kafka record timestamp, epoch ms (-1 when unset)
``approximate_arrival_timestamp``   Kinesis arrival time, epoch seconds with exactly three
                                    decimals, ``1732406400.123`` (as in JSON Lines)
``event_time``                      ISO-8601 UTC with milliseconds, ``2026-11-21T07:12:33.123Z``
``key`` / ``partition_key``         the key (text), base64 for key_encoding bytes; empty when null
``value``                           the value as text: the JSON text (json) or the text (text);
                                    base64 for bytes; empty when null (a Kafka tombstone)
``headers``                         JSON ``[{"key": .., "value": ..}]``, values base64 for
                                    header_encoding bytes, a null value ``null``
``key_schema`` / ``value_schema``   the schema the key / value was written with, as JSON
                                    ``{"format": "AVRO", "id": "42"}``; empty when none (a
                                    stream whose records may carry them has them by default)
``value.<path>``                    the field at that dotted path of the JSON value: strings as
                                    they are, numbers and booleans as their JSON text, objects
                                    and arrays as JSON text; empty when missing or null
=================================== =======================================================

Each column is mapped to the record by the envelope's names, so a column of another source
kind's envelope (``offset`` in a Kinesis stream's object) is refused as unknown.

Every column is written as a string, so the header and the cells never depend on type
inference. Quoting is pyarrow's ``needed`` style (RFC 4180): every non-null cell is quoted,
quotes inside doubled, commas and line breaks kept inside the quotes; a null (a null key, a
tombstone's value, a missing ``value.<path>``) is an empty, unquoted cell, so it reads back as
null while an empty string (``""``) reads back as an empty string. (Python's ``csv`` module
cannot write that distinction before 3.12's ``QUOTE_NOTNULL``; pyarrow's writer does.) Lines
end with ``\\n``. Compression ``zstd`` (a stream's default), ``gzip`` or ``none``.

Who reads the distinction: this module's reader, the archive checker and the Spark job
(Spark's CSV reader gives null for an empty unquoted cell, and the quoted empty string as its
``emptyValue``, which the job sets to a marker to tell them apart). The Glue table's OpenCSV
SerDe reads both as the empty string: in Athena a tombstone's ``value`` is ``''``, like an empty
value's -- for a json stream that is only ever a tombstone (an empty value is not JSON, so it
is dead-lettered), for a text or bytes stream it is either. A tombstone's ``value.<path>``
cells are all empty.

pyarrow ships in the formats layer, not the core one: this module is imported only for
streams that write CSV.
"""

from __future__ import annotations

import csv as pycsv
import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO

import orjson
import pyarrow as pa
import pyarrow.csv as pacsv

from tidemark.eventtime import iso_utc
from tidemark.formats import schema_refs
from tidemark.formats.base import ArchivedEnvelope, RenderContext
from tidemark.formats.compression import ZSTD_LEVEL, chunked, compressed, decompress, extension
from tidemark.formats.jsonl import DECODE_STRING, ENCODE_STRING, ms_of_iso, ms_of_seconds, seconds_text
from tidemark.records.model import Headers, Schemas
from tidemark.staging.frames import Frame
from tidemark.valuepath import cell

CHUNK_ROWS = 16_384
CHUNK_BYTES = 16 * 1024 * 1024
# Lines end in "\n", pyarrow's default: the Lambda layer's pyarrow 20 has no ``eol`` option.
_WRITE_OPTIONS: dict[str, Any] = {"delimiter": ",", "quoting_style": "needed"}


class CsvFormat:
    content_type = "text/csv"

    def __init__(self, compression: str = "gzip", gzip_level: int = 6, zstd_level: int = ZSTD_LEVEL) -> None:
        self.extension = extension("csv", compression)
        self.compression = compression
        self.gzip_level = gzip_level
        self.zstd_level = zstd_level

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        columns = context.columns or context.envelope.columns
        schema = pa.schema([pa.field(name, pa.string()) for name in columns])
        count = 0
        with compressed(out, self.compression, self.gzip_level, self.zstd_level) as sink:
            for chunk in chunked(frames, CHUNK_ROWS, CHUNK_BYTES):
                sink.write(_csv_bytes(_table(chunk, context, columns, schema), header=count == 0))
                count += len(chunk)
            if count == 0:
                sink.write(_csv_bytes(schema.empty_table(), header=True))
        return count

    def read(self, body: bytes, context: RenderContext) -> Iterator[ArchivedEnvelope]:
        """Every row back: envelope columns mapped to the envelope (positions to ints, Kafka
        partitions to ints, record timestamps to epoch ms, event time from ISO-8601, key, value
        and headers to bytes), ``value.<path>`` columns into ``fields`` keyed by the path
        (``None`` for an empty cell). A column not in the object reads back ``None``, headers
        ``()`` for a source without them."""
        names = context.envelope
        table = read_table(decompress(body, self.compression))
        cells = {name: table.column(name).to_pylist() for name in table.column_names}
        paths = [name for name in table.column_names if name.startswith("value.")]
        key_of = DECODE_STRING[context.key_encoding]
        header_of = DECODE_STRING[context.header_encoding]
        value_of = DECODE_STRING["bytes" if context.value_encoding == "bytes" else "text"]

        def column(name: str, convert: Callable[[str], Any]) -> list[Any]:
            if name not in cells:
                return [None] * table.num_rows
            return [None if cell is None else convert(cell) for cell in cells[name]]

        def headers_of(cell: str) -> Headers:
            return tuple(
                (item["key"], None if item["value"] is None else header_of(item["value"]))
                for item in orjson.loads(cell)
            )

        rows = zip(
            column(names.source, str),
            column(names.partition, str if names.position_is_text else int),
            column(names.position, int),
            column(names.timestamp, ms_of_seconds if names.timestamp_in_seconds else int),
            column("event_time", ms_of_iso),
            column(names.key, key_of),
            column("value", value_of),
            [()] * table.num_rows if names.headers is None else column(names.headers, headers_of),
            strict=True,
        )
        refs: list[Schemas | None] = [None] * table.num_rows
        if set(schema_refs.COLUMNS) <= set(cells):  # only both tell a record's references whole
            key_refs, value_refs = (column(name, orjson.loads) for name in schema_refs.COLUMNS)
            refs = [
                schema_refs.from_envelope({"key_schema": key, "value_schema": value})
                for key, value in zip(key_refs, value_refs, strict=True)
            ]
        has_value = "value" in cells  # without it, a tombstone cannot be told from a record lacking every field
        for index, (topic, partition, offset, timestamp, event_time, key, value, headers) in enumerate(rows):
            fields = {path[len("value.") :]: cells[path][index] for path in paths} if paths else None
            yield ArchivedEnvelope(
                topic,
                partition,
                offset,
                timestamp,
                event_time,
                key,
                value,
                headers,
                fields,
                schemas=refs[index],
                tombstone=has_value and value is None,
            )


def _csv_bytes(table: pa.Table, header: bool) -> memoryview:
    buffer = pa.BufferOutputStream()
    pacsv.write_csv(table, buffer, pacsv.WriteOptions(include_header=header, **_WRITE_OPTIONS))
    return memoryview(buffer.getvalue())


def _strings(encoding: str, items: Sequence[bytes | None]) -> pa.Array:
    if encoding == "text":  # UTF-8, validated when staged (and by the cast)
        return pa.array(items, pa.binary()).cast(pa.string())
    encode = ENCODE_STRING[encoding]
    return pa.array([None if item is None else encode(item) for item in items], pa.string())


def _table(chunk: list[Frame], context: RenderContext, columns: Sequence[str], schema: pa.Schema) -> pa.Table:
    n = len(chunk)
    _kinds, offsets, timestamps, event_times, keys, values, headers, _reasons, schemas = zip(*chunk, strict=True)
    parsed: list[Any] = []
    if context.value_encoding == "json" and any(name.startswith("value.") for name in columns):
        loads = orjson.loads
        parsed = [None if value is None else loads(value) for value in values]  # a tombstone: every path null
    names = context.envelope
    if names.headers is None and any(headers):
        raise ValueError("this source's envelope has no headers to keep them in")
    arrays: list[pa.Array] = []
    for name in columns:
        if name == names.source:
            arrays.append(pa.repeat(pa.scalar(context.topic, pa.string()), n))
        elif name == names.partition:
            arrays.append(pa.repeat(pa.scalar(str(context.partition), pa.string()), n))
        elif name == names.position:
            if names.position_is_text:  # beyond int64: Python's digits
                arrays.append(pa.array([str(offset) for offset in offsets], pa.string()))
            else:
                arrays.append(pa.array(offsets, pa.int64()).cast(pa.string()))
        elif name == names.timestamp:
            if names.timestamp_in_seconds:
                arrays.append(pa.array([seconds_text(ms) for ms in timestamps], pa.string()))
            else:
                arrays.append(pa.array(timestamps, pa.int64()).cast(pa.string()))
        elif name == "event_time":
            arrays.append(pa.array([iso_utc(ms) for ms in event_times], pa.string()))
        elif name == names.key:
            arrays.append(_strings(context.key_encoding, keys))
        elif name == "value":
            arrays.append(_strings("bytes" if context.value_encoding == "bytes" else "text", values))
        elif name == names.headers:
            encode = ENCODE_STRING[context.header_encoding]
            dumps = orjson.dumps
            arrays.append(
                pa.array(
                    [
                        dumps([{"key": key, "value": None if data is None else encode(data)} for key, data in items])
                        if items
                        else b"[]"
                        for items in headers
                    ],
                    pa.string(),
                )
            )
        elif name in schema_refs.FIELDS:
            part = schema_refs.COLUMNS.index(name)
            cells = [schema_refs.columns(refs)[part] for refs in schemas]
            arrays.append(pa.array([None if item is None else orjson.dumps(item) for item in cells], pa.string()))
        elif name.startswith("value."):
            path = name.split(".")[1:]
            arrays.append(pa.array([cell(item, path) for item in parsed] if parsed else [None] * n, pa.string()))
        else:
            raise ValueError(f"unknown csv column {name!r}")
    return pa.Table.from_arrays(arrays, schema=schema)


def read_table(data: bytes) -> pa.Table:
    """Uncompressed CSV as this format writes it, every cell text: an empty unquoted cell is
    null, a quoted one the empty string (the archive checker and the Spark job both read so)."""
    header_line = data.split(b"\n", 1)[0].decode("utf-8")
    names = next(pycsv.reader([header_line])) if header_line else []
    return pacsv.read_csv(
        io.BytesIO(data),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types={name: pa.string() for name in names},
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            null_values=[""],
        ),
    )
