"""Every archive format read into the same envelope columns, for the job's Arrow reader.

An object's format and codec are told by its key's extension (``.jsonl[.gz|.zst]``,
``.parquet``, ``.avro``, ``.csv[.gz|.zst]``, ``.txt[.gz|.zst]``, ``.bin[.gz|.zst]``), as in
``tidemark.verify.spec_of_key``; each file describes itself beyond that (Parquet and Avro carry
their schema, CSV its header), so the reader needs nothing from the stream's configuration but
its source kind (``kafka`` or ``kinesis``, :mod:`tidemark.sources`: what the envelope's fields
are called), and reads objects written under an older configuration alike. Each reader returns
:class:`Envelopes`: the record's ``partition`` and ``offset``, ``event_time`` ISO-8601 UTC text
exactly as ``tidemark.eventtime.iso_utc`` renders it (``2026-11-21T07:12:33.123Z``, what JSON
Lines holds, so dedupe and aggregates agree across formats), and the value's fields as a table.

Positions per source kind (:func:`position_types`):

=========== ======================================= ==========================================
source      ``partition``                           ``offset``
=========== ======================================= ==========================================
kafka       int32, from ``partition``               int64, from ``offset``
kinesis     string, the shard id from ``shard_id``  string, the sequence number from
            (``shardId-000000000007``)              ``sequence_number``: its decimal digits,
                                                    canonical (no sign, no leading zero), never
                                                    a number -- up to 129 digits, beyond int64
                                                    and Spark's 38-digit decimals
=========== ======================================= ==========================================

Kinesis positions are checked (a shard id of the API's characters, a sequence number of
canonical digits: the same record has the same text in every format, so it dedupes); an
object of the other source kind (a Kafka object in a Kinesis run, or the reverse) is an
:class:`~jobs.aggregation.values.EnvelopeError`, never a row of nulls. The formats:

=========== ================================================================================
jsonl       lines split at the envelope's byte template (values are not parsed twice), values
            parsed by Arrow's JSON reader (:func:`jobs.aggregation.values.parse_values`);
            Kafka lines end with ``,"headers":[..]}``, Kinesis lines (no headers) with the
            value and ``}``
parquet     ``pyarrow.parquet`` straight to Arrow: a string ``value`` column goes through the
            same JSON reader without leaving Arrow, a struct ``value`` (a declared value
            schema) is flattened to its fields; ``event_time`` (timestamp ms UTC) is formatted
            by Arrow
avro        fastavro, record by record (its only reader): a string ``value`` as JSON text, a
            ``Value`` record's fields typed by the writer schema
csv         ``pyarrow.csv``, every cell text; the partition and position columns cast (Kafka)
            or checked (Kinesis) -- an object without them is an error: the job dedupes on
            them --, ``event_time`` as written. Fields come from the ``value`` column (JSON,
            as jsonl) when the object has one, else from its ``value.<path>`` columns
            (:func:`jobs.aggregation.values.infer_text` types them,
            :func:`jobs.aggregation.values.nest_paths` nests ``a.b`` into ``a``)
bytes       ``tidemark.formats.bytes``' reader (version 3 for Kafka -- 1 before tombstones were
            archived --, 2 for Kinesis), values as JSON text
text        refused: it keeps no positions (the configuration refuses aggregations for it)
=========== ================================================================================

gzip and zstd (``zstandard``) are undone before the line formats are read.

Tombstones (Kafka records whose value is null: a compacted topic's or a CDC delete) have no
value to aggregate, so every reader skips them: a JSON Lines line marked ``"tombstone":true``, a
null ``value`` in Parquet, Avro, CSV (an empty unquoted cell) and bytes objects. A CSV object
without a ``value`` column cannot tell a tombstone from a record lacking every field: there it
is a row of nulls, as such a record is.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from jobs.aggregation.values import EnvelopeError, infer_text, nest_paths, parse_values
from tidemark import formats
from tidemark.eventtime import iso_utc
from tidemark.formats.base import ArchivedEnvelope, RenderContext
from tidemark.formats.compression import decompress
from tidemark.formats.jsonl import TOMBSTONE_FIELD
from tidemark.sources import KAFKA, SEQUENCE_NUMBER, SHARD_ID, PartitionId, shape_of


class ObjectKind(NamedTuple):
    format: str  # jsonl | parquet | avro | csv | text | bytes
    codec: str  # none | gzip | zstd for the line formats, "inside" for parquet and avro


def kind_of_key(key: str) -> ObjectKind:
    """``raw/orders/.../orders+3+...-....csv.zst`` -> ``ObjectKind("csv", "zstd")``."""
    try:
        fmt, codec = formats.kind_of_key(key)
    except ValueError as exc:
        raise EnvelopeError(str(exc)) from None
    return ObjectKind(fmt, codec or "inside")


def position_types(source: str = KAFKA) -> tuple[pa.DataType, pa.DataType]:
    """The Arrow types of the records' ``(partition, offset)`` for a source kind: Kafka's
    int32 and int64, Kinesis's shard id and sequence number as strings."""
    if shape_of(source).envelope.position_is_text:
        return pa.string(), pa.string()
    return pa.int32(), pa.int64()


@dataclass(frozen=True)
class Envelopes:
    """The records of one object, column-wise: what the aggregation reads of each."""

    partition: pa.Array  # int32 (Kafka) | string: the shard id (Kinesis)
    offset: pa.Array  # int64 (Kafka) | string: the sequence number's digits (Kinesis)
    event_time: pa.Array  # string, ISO-8601 UTC with milliseconds
    values: pa.Table  # the value's fields

    @property
    def rows(self) -> int:
        return len(self.offset)


def checked_text_positions(partitions: pa.Array, offsets: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Kinesis shard ids and sequence numbers as strings, every one checked (RE2, in Arrow):
    a sequence number with a sign, a leading zero or anything but digits would be another
    text for the same record and defeat dedupe; a null one has no identity."""
    checked = []
    for column, pattern, what in ((partitions, SHARD_ID, "shard id"), (offsets, SEQUENCE_NUMBER, "sequence number")):
        text = column.cast(pa.string())
        valid = pc.fill_null(pc.match_substring_regex(text, pattern.pattern), False)
        if not pc.all(valid).as_py():
            bad = text.filter(pc.invert(valid))[0].as_py()
            raise EnvelopeError(f"not a Kinesis {what}: {bad!r}")
        checked.append(text)
    return checked[0], checked[1]


def _envelopes(partitions: Any, offsets: Any, times: Any, values: pa.Table, source: str = KAFKA) -> Envelopes:
    """Envelopes from lists or arrays: typed per source kind, Kinesis positions checked."""
    partition_type, offset_type = position_types(source)
    partitions = pa.array(partitions, partition_type) if isinstance(partitions, list) else partitions
    offsets = pa.array(offsets, offset_type) if isinstance(offsets, list) else offsets
    if pa.types.is_string(offset_type):
        partitions, offsets = checked_text_positions(partitions, offsets)
    return Envelopes(partitions, offsets, pa.array(times, pa.string()) if isinstance(times, list) else times, values)


# -- JSON Lines ----------------------------------------------------------------------------------

_HEAD = re.compile(
    rb'^\{"topic":"[A-Za-z0-9._-]*","partition":(\d+),"offset":(\d+),"timestamp":-?\d+,"event_time":"([^"]*)","key":'
)
#: a Kinesis line's head, ``tidemark.formats.jsonl.line_template`` of the Kinesis envelope
_KINESIS_HEAD = re.compile(
    rb'^\{"stream":"[A-Za-z0-9._-]*","shard_id":"([A-Za-z0-9_.-]{1,128})","sequence_number":"(0|[1-9][0-9]{0,128})",'
    rb'"approximate_arrival_timestamp":-?\d+\.\d{3},"event_time":"([^"]*)","partition_key":'
)
_VALUE = b',"value":'
_HEADERS = b',"headers":['
_NULL = b"null"


def split_envelope(line: bytes) -> tuple[int, int, str, bytes]:
    """``(partition, offset, event_time, value bytes)`` of one raw Kafka archive envelope: the
    archive renders envelopes from a fixed byte template (``tidemark.formats.jsonl``), so the
    value is the bytes between ``,"value":`` and the last ``,"headers":[``."""
    head = _HEAD.match(line)
    if head is None:
        raise EnvelopeError(f"not a Kafka archive envelope: {line[:120]!r}")
    start = line.find(_VALUE, head.end())
    end = line.rfind(_HEADERS)
    if start < 0 or end < start:
        raise EnvelopeError(f"envelope without value/headers: {line[:120]!r}")
    return int(head.group(1)), int(head.group(2)), head.group(3).decode("ascii"), line[start + len(_VALUE) : end]


def split_kinesis_envelope(line: bytes) -> tuple[str, str, str, bytes]:
    """``(shard id, sequence number digits, event_time, value bytes)`` of one raw Kinesis
    archive envelope: no headers, so the value is the bytes between ``,"value":`` (the first
    after the partition key, a JSON string that cannot hold an unescaped quote) and the
    line's closing ``}``."""
    head = _KINESIS_HEAD.match(line)
    if head is None:
        raise EnvelopeError(f"not a Kinesis archive envelope: {line[:120]!r}")
    start = line.find(_VALUE, head.end())
    if start < 0 or not line.endswith(b"}"):
        raise EnvelopeError(f"envelope without value: {line[:120]!r}")
    shard, sequence, event_time = (group.decode("ascii") for group in head.groups())
    return shard, sequence, event_time, line[start + len(_VALUE) : -1]


_SPLITTERS: dict[bool, Callable[[bytes], tuple[PartitionId, int | str, str, bytes]]] = {
    False: split_envelope,
    True: split_kinesis_envelope,
}


def is_tombstone_line(line: bytes, value: bytes) -> bool:
    """Whether a Kafka line (whose value ``split_envelope`` gave) is a tombstone's: its value
    ``null`` and the marker after its headers (a value's own ``"tombstone"`` field is before
    them; the headers, JSON strings, cannot hold an unescaped quote)."""
    return value == _NULL and TOMBSTONE_FIELD in line[line.rfind(_HEADERS) :]


def read_jsonl(
    data: bytes, limit: int | None = None, *, source: str = KAFKA, run: pa.Schema | None = None
) -> Envelopes:
    """The envelopes of uncompressed JSON Lines (the first ``limit`` records, if given), without
    its tombstones (``limit`` counts lines, tombstones included)."""
    split = _SPLITTERS[shape_of(source).envelope.position_is_text]
    partitions: list[PartitionId] = []
    offsets: list[int | str] = []
    times: list[str] = []
    values: list[bytes] = []
    for line in data.splitlines()[:limit]:
        if not line:
            continue
        partition, offset, event_time, value = split(line)
        if value == _NULL and is_tombstone_line(line, value):
            continue
        partitions.append(partition)
        offsets.append(offset)
        times.append(event_time)
        values.append(value)
    return _envelopes(partitions, offsets, times, parse_values(values, run), source)


# -- Parquet -------------------------------------------------------------------------------------


def iso_of_timestamps(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Timestamps (or epoch ms) as ``iso_utc`` text, formatted by Arrow: ``%S`` of a
    millisecond timestamp carries the three fraction digits."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_integer(column.type):
        column = column.cast(pa.int64()).cast(pa.timestamp("ms"))
    naive = column.cast(pa.timestamp("ms"), safe=False)  # the UTC wall clock; no time zone database needed
    return pc.strftime(naive, format="%Y-%m-%dT%H:%M:%SZ")


def value_fields(column: pa.Array | pa.ChunkedArray, run: pa.Schema | None = None) -> pa.Table:
    """A ``value`` column's fields: a struct flattened, JSON text parsed."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_struct(column.type):
        return pa.Table.from_arrays(column.flatten(), names=[field.name for field in column.type])
    return parse_values(column, run)


def read_parquet(
    body: bytes, limit: int | None = None, *, source: str = KAFKA, run: pa.Schema | None = None
) -> Envelopes:
    import pyarrow.parquet as pq

    names = shape_of(source).envelope
    columns = [names.partition, names.position, "event_time", "value"]
    try:
        parquet = pq.ParquetFile(pa.BufferReader(body))
        missing = [name for name in columns if name not in parquet.schema_arrow.names]
        if missing:
            raise KeyError(f"no {missing} columns (a {shape_of(source).kind} object has them)")
        if limit is None:
            table = parquet.read(columns=columns)
        else:
            first = next(parquet.iter_batches(batch_size=limit, columns=columns), None)
            table = pa.Table.from_batches([first]) if first is not None else parquet.schema_arrow.empty_table()
    except (pa.ArrowInvalid, KeyError) as exc:
        raise EnvelopeError(f"not an archive Parquet object: {exc}") from None
    if table.column("value").null_count:  # tombstones: nothing to aggregate
        table = table.filter(pc.is_valid(table.column("value")))
    partitions = table.column(names.partition).combine_chunks()
    offsets = table.column(names.position).combine_chunks()
    if not names.position_is_text:
        partitions, offsets = partitions.cast(pa.int32()), offsets.cast(pa.int64())
    return _envelopes(
        partitions,
        offsets,
        iso_of_timestamps(table.column("event_time")),
        value_fields(table.column("value"), run),
        source,
    )


# -- Avro ----------------------------------------------------------------------------------------

_AVRO_TYPES = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int64(),
    "double": pa.float64(),
    "float": pa.float64(),
    "boolean": pa.bool_(),
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def _avro_value_record(schema: Any) -> list[tuple[str, pa.DataType]] | None:
    """The fields of the writer schema's ``value`` when it is a record (a declared value
    schema), None when it is a string or bytes."""
    value = next((field["type"] for field in schema["fields"] if field["name"] == "value"), None)
    if isinstance(value, list):  # ["null", T]: nullable for tombstones
        value = next((part for part in value if part != "null"), None)
    if not isinstance(value, dict) or value.get("type") != "record":
        return None
    fields = []
    for field in value["fields"]:
        kind = field["type"]
        if isinstance(kind, list):  # ["null", T]
            kind = next((part for part in kind if part != "null"), "string")
        if isinstance(kind, dict):
            kind = kind.get("type", "string")
        fields.append((field["name"], _AVRO_TYPES.get(str(kind), pa.string())))
    return fields


def _ms(event_time: Any) -> int:
    return (event_time - _EPOCH) // _MILLISECOND if isinstance(event_time, datetime) else int(event_time)


def read_avro(body: bytes, limit: int | None = None, *, source: str = KAFKA, run: pa.Schema | None = None) -> Envelopes:
    import fastavro

    import tidemark.formats.avro  # noqa: F401  (registers the zstandard codec it writes with)

    names = shape_of(source).envelope
    try:
        reader = fastavro.reader(io.BytesIO(body))
        writer_schema: Any = reader.writer_schema
        typed = _avro_value_record(writer_schema)
        fields = {field["name"] for field in writer_schema["fields"]}
        missing = [name for name in (names.partition, names.position, "event_time", "value") if name not in fields]
        if missing:
            raise KeyError(f"no {missing} fields (a {shape_of(source).kind} object has them)")
        read: list[Any] = list(islice(reader, limit))
    except (ValueError, KeyError, EOFError) as exc:
        raise EnvelopeError(f"not an archive Avro object: {exc}") from None
    records = [record for record in read if record["value"] is not None]  # tombstones: nothing to aggregate
    values: pa.Table
    if typed is not None:
        values = pa.Table.from_arrays(
            [pa.array([record["value"].get(name) for record in records], kind) for name, kind in typed],
            names=[name for name, _kind in typed],
        )
    else:
        items = [record["value"] for record in records]
        texts = pa.array(items, pa.binary() if items and isinstance(items[0], bytes) else pa.string())
        values = parse_values(texts, run)
    return _envelopes(
        [record[names.partition] for record in records],
        [record[names.position] for record in records],
        [iso_utc(_ms(record["event_time"])) for record in records],
        values,
        source,
    )


# -- CSV -----------------------------------------------------------------------------------------

VALUE_PREFIX = "value."


def csv_table(data: bytes) -> pa.Table:
    """Uncompressed CSV as the CSV format writes it (``tidemark.formats.csv``): a header row,
    every cell text, an empty unquoted cell null and a quoted one the empty string."""
    from tidemark.formats.csv import read_table

    try:
        return read_table(data)
    except pa.ArrowInvalid as exc:
        raise EnvelopeError(f"not an archive CSV object: {exc}") from None


def _position_column(table: pa.Table, name: str, kind: pa.DataType) -> pa.Array:
    """A CSV position column: cast to Kafka's integers, kept as text for Kinesis (checked by
    :func:`checked_text_positions`)."""
    if name not in table.column_names:
        raise EnvelopeError(f"a CSV object without a {name!r} column cannot be aggregated (records dedupe on it)")
    try:
        return table.column(name).combine_chunks().cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise EnvelopeError(f"CSV column {name!r} is not integers: {exc}") from None


def csv_values(table: pa.Table, run: pa.Schema | None = None) -> pa.Table:
    """The value's fields of a CSV table: from ``value`` (JSON) when present, else from the
    ``value.<path>`` columns, typed by their text and nested by their paths."""
    if "value" in table.column_names:
        return parse_values(table.column("value"), run)
    paths = {
        name[len(VALUE_PREFIX) :]: infer_text(table.column(name))
        for name in table.column_names
        if name.startswith(VALUE_PREFIX)
    }
    return nest_paths(paths)


def read_csv(data: bytes, limit: int | None = None, *, source: str = KAFKA, run: pa.Schema | None = None) -> Envelopes:
    names = shape_of(source).envelope
    partition_type, offset_type = position_types(source)
    table = csv_table(data)
    if limit is not None:
        table = table.slice(0, limit)
    if "value" in table.column_names and table.column("value").null_count:  # tombstones
        table = table.filter(pc.is_valid(table.column("value")))
    times = (
        table.column("event_time").combine_chunks().cast(pa.string())
        if "event_time" in table.column_names
        else pa.nulls(table.num_rows, pa.string())
    )
    return _envelopes(
        _position_column(table, names.partition, partition_type),
        _position_column(table, names.position, offset_type),
        times,
        csv_values(table, run),
        source,
    )


# -- bytes ---------------------------------------------------------------------------------------


def read_bytes(
    body: bytes, codec: str, limit: int | None = None, *, source: str = KAFKA, run: pa.Schema | None = None
) -> Envelopes:
    from tidemark.formats.bytes import TEXT_POSITIONS_VERSION, VERSIONS, BytesFormat

    text = shape_of(source).envelope.position_is_text
    data = uncompressed(body, codec)
    version = int.from_bytes(data[4:6], "big") if len(data) >= 6 else None
    if version in VERSIONS and (version == TEXT_POSITIONS_VERSION) != text:
        raise EnvelopeError(f"a version {version} bytes object is not a {shape_of(source).kind} object")
    envelopes: Iterator[ArchivedEnvelope] = BytesFormat("none").read(data, RenderContext(topic="", partition=0))
    try:
        records = [record for record in islice(envelopes, limit) if not record.tombstone]
    except ValueError as exc:
        raise EnvelopeError(f"not an archive bytes object: {exc}") from None
    return _envelopes(
        [record.partition for record in records],
        [None if record.offset is None else str(record.offset) for record in records]
        if text
        else [record.offset for record in records],
        [None if record.event_time_ms is None else iso_utc(record.event_time_ms) for record in records],
        parse_values(pa.array([record.value for record in records], pa.binary()), run),
        source,
    )


# -- any -----------------------------------------------------------------------------------------


def uncompressed(body: bytes, codec: str) -> bytes:
    """The bytes of a line format's object (or a bytes object), its codec undone."""
    errors: tuple[type[Exception], ...] = (OSError, EOFError, ValueError)  # gzip.BadGzipFile is an OSError
    if codec == "zstd":
        import zstandard

        errors += (zstandard.ZstdError,)
    try:
        return decompress(body, codec)  # a truncated zstd frame is a ValueError there
    except errors as exc:
        raise EnvelopeError(f"cannot decompress a {codec} object: {exc}") from None


def read_envelopes(
    key: str, body: bytes, limit: int | None = None, *, source: str = KAFKA, run: pa.Schema | None = None
) -> Envelopes:
    """The envelopes of the object stored under ``key`` (its first ``limit`` records, if given),
    an object of a ``source`` kind stream (``kafka``/``msk``, or ``kinesis``); ``run``, the
    run's value schema, says which fields are text (their numbers then kept as their JSON
    tokens)."""
    kind = kind_of_key(key)
    if kind.format == "parquet":
        return read_parquet(body, limit, source=source, run=run)
    if kind.format == "avro":
        return read_avro(body, limit, source=source, run=run)
    if kind.format == "bytes":
        return read_bytes(body, kind.codec, limit, source=source, run=run)
    if kind.format == "text":
        raise EnvelopeError(f"text objects keep no partition or offset; they cannot be aggregated: {key!r}")
    data = uncompressed(body, kind.codec)
    if kind.format == "jsonl":
        return read_jsonl(data, limit, source=source, run=run)
    return read_csv(data, limit, source=source, run=run)
