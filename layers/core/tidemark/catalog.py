"""The Glue Data Catalog table of a stream: what Athena needs to query its archive with no crawler.

Pure (no AWS calls): ``describe_table`` turns a ``StreamConfig`` into a ``TableDescription``
(columns, partition keys, storage descriptor, table parameters) that ``stacks/catalog.py`` puts
into an ``AWS::Glue::Table``. The description follows what the format writers put in each object
(``tidemark.formats``) and where ``tidemark.objects.keys`` puts the objects:

* **columns**, per format, named as the stream's source kind names the envelope
  (``stream.source.shape.envelope``, :mod:`tidemark.sources`). Parquet and Avro keep their
  types (Kafka: ``partition int``, ``offset bigint``, ``timestamp bigint``; Kinesis:
  ``shard_id string``, ``sequence_number string`` -- up to 129 digits, beyond every integer
  and decimal type --, ``approximate_arrival_timestamp timestamp``; both: ``event_time
  timestamp``, ``key``/``partition_key`` and ``value`` ``string`` or ``binary`` by encoding,
  ``value`` a ``struct`` of the declared fields under ``format.value_schema``; Kafka's
  ``headers`` an array of key/value structs, Kinesis records have none). JSON Lines declares a
  json ``value`` as ``string``: Athena's OpenX JSON SerDe gives an object or array in a
  ``string`` column as its JSON text (query it with ``json_extract_scalar``); bytes keys, values
  and headers are base64 ``string``s there; Kinesis's ``sequence_number`` is a JSON string and
  ``approximate_arrival_timestamp`` a JSON number of epoch seconds with three decimals, a
  ``double`` (``from_unixtime`` makes it a timestamp). A Kafka stream's JSON Lines table also
  has ``tombstone boolean``: true on a tombstone's line (a null value), null on every other,
  since ``value`` is null for a tombstone and for a json value that is the JSON text ``null``
  alike (Parquet and Avro tell them apart in ``value`` itself: ``NULL`` is a tombstone,
  ``'null'`` the JSON text). CSV columns are all ``string`` (the OpenCSV SerDe reads nothing
  else), ``value.<path>`` columns named ``value_<path with _>``; that SerDe reads an empty cell
  as ``''`` whether it was null (a tombstone's value) or the empty string. Text has one ``value
  string`` column (a tombstone's line is empty).
* **partition keys**: the ``partition_by`` names (``injected`` projection: Athena then needs an
  equality filter -- ``=`` or ``IN`` with literals -- on each of them in every query, and the
  values are the folder names, percent-encoded as ``tidemark.partitioning`` writes them,
  ``__missing__`` for a missing value), then ``year``, ``month``, ``day``, ``hour`` (``integer``
  projection, zero-padded: ``month = '07'``), all ``string``, in the stream's
  ``event_time.timezone``.
* **partition projection**: ``storage.location.template`` spells the stream's folders exactly as
  the archive writes them (``values`` or ``keys_and_values`` partition folders, ``plain`` or
  ``hive`` hour folders), so a new hour is queryable the moment its first object lands.

Streams with ``format: bytes`` get no table (``describe_table`` returns ``None``): their objects
are a binary container of raw records no SerDe reads. Dead letters (``errors/``) are not in any
table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidemark.config.model import StreamConfig, ValueField
from tidemark.formats.avro_schema import avro_schema as writer_schema
from tidemark.formats.base import RenderContext, ValueColumn
from tidemark.objects.keys import hour_folders
from tidemark.sources import KAFKA, KINESIS, EnvelopeNames

#: formats that get no table (nothing in Athena reads them)
NO_TABLE_FORMATS = ("bytes",)
HOUR_KEYS = ("year", "month", "day", "hour")
#: (first, last, digits) of each hour key's integer projection; the year's bounds are settings
_HOUR_RANGES = {"month": (1, 12, 2), "day": (1, 31, 2), "hour": (0, 23, 2)}
_SAMPLE_HOUR = "1999-12-30T23"  # hour_folders() of it, its values replaced by ${year}/${month}/...
_SAMPLE_VALUES = ("1999", "12", "30", "23")

TEXT_INPUT = "org.apache.hadoop.mapred.TextInputFormat"
TEXT_OUTPUT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
PARQUET_INPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
PARQUET_OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
AVRO_INPUT = "org.apache.hadoop.hive.ql.io.avro.AvroContainerInputFormat"
AVRO_OUTPUT = "org.apache.hadoop.hive.ql.io.avro.AvroContainerOutputFormat"
AVRO_SERDE = "org.apache.hadoop.hive.serde2.avro.AvroSerDe"
JSON_SERDE = "org.openx.data.jsonserde.JsonSerDe"
CSV_SERDE = "org.apache.hadoop.hive.serde2.OpenCSVSerde"
TEXT_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"

_VALUE_TYPES = {"string": "string", "long": "bigint", "double": "double", "boolean": "boolean"}
_CSV_NAME = re.compile(r"[^a-z0-9_]")


class CatalogError(ValueError):
    """The stream cannot be described as a Glue table (a name clash, say)."""


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # Hive / Glue type string: string, bigint, struct<...>, array<struct<...>>
    comment: str = ""


@dataclass(frozen=True, slots=True)
class TableDescription:
    """One stream's Glue table (``AWS::Glue::Table`` ``TableInput``, in plain values)."""

    name: str
    stream: str
    format: str
    columns: tuple[Column, ...]
    partition_keys: tuple[Column, ...]
    location: str
    input_format: str
    output_format: str
    serde: str
    serde_parameters: Mapping[str, str]
    parameters: Mapping[str, str]
    description: str = ""
    injected: tuple[str, ...] = field(default=())  # partition keys Athena needs an equality filter on

    @property
    def location_template(self) -> str:
        return self.parameters["storage.location.template"]


def table_name(stream: str) -> str:
    """``order-events`` -> ``order_events`` (Athena reads names of letters, digits and ``_``)."""
    return stream.replace("-", "_")


def envelope_types(stream: StreamConfig) -> dict[str, str]:
    """The Hive type of each envelope column as Parquet and Avro objects hold it, in the
    archive's order, named by the stream's source kind: Kafka ``topic, partition int, offset
    bigint, timestamp bigint, event_time, key, value, headers``; Kinesis ``stream, shard_id
    string, sequence_number string, approximate_arrival_timestamp timestamp, event_time,
    partition_key, value``."""
    names = stream.source.shape.envelope
    binary_key = stream.encoding.key == "bytes"
    binary_header = stream.encoding.headers == "bytes"
    schema = stream.format.value_schema
    if schema is not None:
        value = struct_type(schema.fields)
    else:
        value = "binary" if stream.encoding.value == "bytes" else "string"
    types = {
        names.source: "string",
        names.partition: "string" if names.position_is_text else "int",
        names.position: "string" if names.position_is_text else "bigint",
        names.timestamp: "timestamp" if names.timestamp_in_seconds else "bigint",
        "event_time": "timestamp",
        names.key: "binary" if binary_key else "string",
        "value": value,
    }
    if names.headers is not None:
        types[names.headers] = f"array<struct<key:string,value:{'binary' if binary_header else 'string'}>>"
    if stream.schema_refs:  # tidemark.formats.schema_refs
        types.update(dict.fromkeys(("key_schema", "value_schema"), "struct<format:string,id:string>"))
    return types


def struct_type(fields: Sequence[ValueField]) -> str:
    return "struct<{}>".format(",".join(f"{item.name}:{_VALUE_TYPES[item.type]}" for item in fields))


_COMMENTS = {
    "topic": "Kafka topic",
    "partition": "Kafka partition",
    "offset": "Kafka offset",
    "timestamp": "Kafka record timestamp (epoch ms)",
    "event_time": "event time (UTC) the record is filed under",
    "key": "Kafka record key",
    "value": "Kafka record value",
    "headers": "Kafka record headers",
    "tombstone": "true for a tombstone (a null value), null otherwise",
    "key_schema": "the schema the key was written with (registry format and id), null when unknown",
    "value_schema": "the schema the value was written with (registry format and id), null when unknown",
}
_KINESIS_COMMENTS = {
    "stream": "Kinesis stream name",
    "shard_id": "Kinesis shard id",
    "sequence_number": "Kinesis sequence number (its decimal digits, up to 129: text)",
    "approximate_arrival_timestamp": "Kinesis approximate arrival timestamp (UTC)",
    "event_time": _COMMENTS["event_time"],
    "partition_key": "Kinesis partition key",
    "value": "Kinesis record value",
}
_SOURCE_COMMENTS = {KAFKA: _COMMENTS, KINESIS: _KINESIS_COMMENTS}
#: a record timestamp written as epoch seconds with a fraction (JSON Lines, CSV)
_SECONDS_COMMENT = "Kinesis approximate arrival timestamp (epoch seconds with 3 decimals)"


def _comments(stream: StreamConfig, *, text_formats: bool = False) -> dict[str, str]:
    """Each envelope column's comment for the stream's source kind; ``text_formats``: as JSON
    Lines and CSV write the record timestamp."""
    shape = stream.source.shape
    comments = dict(_SOURCE_COMMENTS[shape.kind])
    if text_formats and shape.envelope.timestamp_in_seconds:
        comments[shape.envelope.timestamp] = _SECONDS_COMMENT
    return comments


def _source_label(stream: StreamConfig) -> str:
    return "Kinesis" if stream.source.shape.kind == KINESIS else "Kafka"


def _envelope_columns(types: Mapping[str, str], comments: Mapping[str, str]) -> tuple[Column, ...]:
    return tuple(Column(name, kind, comments[name]) for name, kind in types.items())


def _jsonl_columns(stream: StreamConfig) -> tuple[Column, ...]:
    names: EnvelopeNames = stream.source.shape.envelope
    types = envelope_types(stream)
    # JSON has no binary: bytes are base64 text; a json value (object, array, number...) is read
    # as its JSON text by the OpenX SerDe when the column is a string.
    types.update({names.key: "string", "value": "string"})
    if names.headers is not None:
        types[names.headers] = "array<struct<key:string,value:string>>"
    if names.timestamp_in_seconds:  # a JSON number of epoch seconds with three decimals
        types[names.timestamp] = "double"
    if stream.source.shape.tombstones:  # the marker on a tombstone's line (tidemark.formats.jsonl)
        types["tombstone"] = "boolean"
    return _envelope_columns(types, _comments(stream, text_formats=True))


def csv_column_name(column: str) -> str:
    """A ``format.columns`` entry's table column: ``value.customer.id`` -> ``value_customer_id``."""
    return _CSV_NAME.sub("_", column.lower().replace(".", "_"))


def _csv_columns(stream: StreamConfig) -> tuple[Column, ...]:
    columns: list[Column] = []
    seen: dict[str, str] = {}
    comments = _comments(stream, text_formats=True)
    for source in stream.csv_columns:
        name = csv_column_name(source)
        if name in seen:
            raise CatalogError(
                f"stream {stream.name}: csv columns {seen[name]!r} and {source!r} would both be table column {name!r}"
            )
        seen[name] = source
        comment = comments.get(source, f"JSON value field {source.removeprefix('value.')} (as text)")
        columns.append(Column(name, "string", comment))
    return tuple(columns)


def avro_schema(stream: StreamConfig) -> dict[str, Any]:
    """The Avro schema the table reads with (``avro.schema.literal``): the writer schema of
    ``tidemark.formats.avro`` itself (``tidemark.formats.avro_schema`` needs no Avro library),
    with the envelope of the stream's source kind."""
    fields = stream.format.value_schema.fields if stream.format.value_schema is not None else []
    context = RenderContext(
        stream.source.topic,
        0,  # no part of the schema: every partition's (or shard's) objects share it
        stream.encoding.key,
        stream.encoding.value,
        stream.encoding.headers,
        tuple(ValueColumn(field.name, field.type, field.nullable) for field in fields),
        source=stream.source.shape.kind,
        schema_refs=stream.schema_refs,
    )
    return writer_schema(context)


def location_template(stream: StreamConfig, bucket: str, raw_prefix: str) -> str:
    """``s3://<bucket>/<raw_prefix>/<stream>/<partition folders>/<hour folders>/``, every value
    a ``${name}`` placeholder: the folders exactly as ``tidemark.objects.keys.object_key`` writes
    them for the stream's ``partition_by`` style and ``hour_folders``."""
    by = stream.partition_by
    hive_values = by.style == "keys_and_values"
    levels = [f"{item.name}=${{{item.name}}}" if hive_values else f"${{{item.name}}}" for item in by.fields]
    hours = hour_folders(_SAMPLE_HOUR, by.hour_folders == "hive").split("/")
    for index, (level, value, name) in enumerate(zip(hours, _SAMPLE_VALUES, HOUR_KEYS, strict=True)):
        hours[index] = level.replace(value, f"${{{name}}}")
    return f"s3://{bucket}/{raw_prefix}/{stream.name}/{'/'.join([*levels, *hours])}/"


def projection_parameters(stream: StreamConfig, years: tuple[int, int]) -> dict[str, str]:
    """Athena partition projection of the partition keys (without the location template)."""
    first_year, last_year = years
    parameters = {"projection.enabled": "true"}
    for item in stream.partition_by.fields:
        parameters[f"projection.{item.name}.type"] = "injected"
    ranges = {"year": (first_year, last_year, 4), **_HOUR_RANGES}
    for name in HOUR_KEYS:
        first, last, digits = ranges[name]
        parameters[f"projection.{name}.type"] = "integer"
        parameters[f"projection.{name}.range"] = f"{first},{last}"
        parameters[f"projection.{name}.digits"] = str(digits)
    return parameters


def _partition_keys(stream: StreamConfig) -> tuple[Column, ...]:
    zone = stream.event_time.timezone
    keys = [
        Column(item.name, "string", f"partition_by {item.field} (folder value; query with = or IN)")
        for item in stream.partition_by.fields
    ]
    keys += [Column(name, "string", f"event-time {name} in {zone}, zero-padded") for name in HOUR_KEYS]
    return tuple(keys)


def _storage(stream: StreamConfig) -> tuple[tuple[Column, ...], str, str, str, dict[str, str], dict[str, str]]:
    """columns, input format, output format, SerDe, SerDe parameters, extra table parameters."""
    fmt = stream.format
    if fmt.type == "parquet":
        columns = _envelope_columns(envelope_types(stream), _comments(stream))
        return columns, PARQUET_INPUT, PARQUET_OUTPUT, PARQUET_SERDE, {"serialization.format": "1"}, {}
    if fmt.type == "avro":
        literal = json.dumps(avro_schema(stream), separators=(",", ":"))
        columns = _envelope_columns(envelope_types(stream), _comments(stream))
        # Athena takes the schema from either place; Glue's own Avro tables carry it in both.
        serde = {"avro.schema.literal": literal}
        return columns, AVRO_INPUT, AVRO_OUTPUT, AVRO_SERDE, serde, {"avro.schema.literal": literal}
    compression = {"compressionType": fmt.compression}
    if fmt.type == "jsonl":
        # Every archived line is a whole JSON object: a malformed one is damage and should fail
        # the query, not read as a row of nulls. The envelope's keys are lower case, as Glue's
        # column names are.
        serde = {"ignore.malformed.json": "FALSE", "dots.in.keys": "FALSE", "case.insensitive": "TRUE"}
        return _jsonl_columns(stream), TEXT_INPUT, TEXT_OUTPUT, JSON_SERDE, serde, compression
    if fmt.type == "csv":
        serde = csv_serde_parameters()
        extra = {**compression, "skip.header.line.count": "1"}
        return _csv_columns(stream), TEXT_INPUT, TEXT_OUTPUT, CSV_SERDE, serde, extra
    if fmt.type == "text":
        columns = (Column("value", "string", f"{_source_label(stream)} record value, one per line"),)
        return columns, TEXT_INPUT, TEXT_OUTPUT, TEXT_SERDE, {"serialization.format": "1"}, compression
    raise CatalogError(f"stream {stream.name}: format {fmt.type} has no table")


#: The OpenCSV SerDe drops its escape character wherever it appears (and takes the next one
#: literally). The csv format escapes nothing -- RFC 4180: a quote inside a quoted cell is
#: doubled, which the SerDe reads as one quote -- so the escape character must be one no cell
#: holds: DEL, where the default backslash would eat every backslash of a JSON value.
CSV_ESCAPE = "\x7f"


def csv_serde_parameters() -> dict[str, str]:
    """The OpenCSV SerDe's reading of what the csv format writes (``,``-separated, every cell
    ``"``-quoted, quotes inside doubled)."""
    return {"separatorChar": ",", "quoteChar": '"', "escapeChar": CSV_ESCAPE}


_CLASSIFICATION = {"parquet": "parquet", "avro": "avro", "jsonl": "json", "csv": "csv"}


def describe_table(
    stream: StreamConfig, *, bucket: str, raw_prefix: str, years: tuple[int, int] = (2020, 2099)
) -> TableDescription | None:
    """The Glue table of ``stream``'s archive under ``s3://<bucket>/<raw_prefix>/``, or ``None``
    for a ``bytes`` stream (no SerDe reads it). ``bucket`` may be a CDK token."""
    if stream.format.type in NO_TABLE_FORMATS:
        return None
    columns, input_format, output_format, serde, serde_parameters, extra = _storage(stream)
    partition_keys = _partition_keys(stream)
    clash = {column.name for column in columns} & {key.name for key in partition_keys}
    if clash:
        raise CatalogError(f"stream {stream.name}: {sorted(clash)} would be both a column and a partition key")
    parameters = {"EXTERNAL": "TRUE", "typeOfData": "file"}
    if stream.format.type in _CLASSIFICATION:
        parameters["classification"] = _CLASSIFICATION[stream.format.type]
    parameters.update(extra)
    parameters.update(projection_parameters(stream, years))
    parameters["storage.location.template"] = location_template(stream, bucket, raw_prefix)
    return TableDescription(
        name=table_name(stream.name),
        stream=stream.name,
        format=stream.format.type,
        columns=columns,
        partition_keys=partition_keys,
        location=f"s3://{bucket}/{raw_prefix}/{stream.name}/",
        input_format=input_format,
        output_format=output_format,
        serde=serde,
        serde_parameters=serde_parameters,
        parameters=parameters,
        description=f"Tidemark archive of stream {stream.name} ({_log_of(stream)}), {stream.format.type}",
        injected=tuple(item.name for item in stream.partition_by.fields),
    )


def _log_of(stream: StreamConfig) -> str:
    """``topic orders`` or ``Kinesis stream clicks``: where the records come from."""
    kind = "Kinesis stream" if stream.source.shape.kind == KINESIS else "topic"
    return f"{kind} {stream.source.topic}"


def describe_tables(
    streams: Sequence[StreamConfig], *, bucket: str, raw_prefix: str, years: tuple[int, int] = (2020, 2099)
) -> list[TableDescription]:
    """Every stream's table (``bytes`` streams have none); refuses two streams one table name."""
    tables: dict[str, TableDescription] = {}
    for stream in streams:
        table = describe_table(stream, bucket=bucket, raw_prefix=raw_prefix, years=years)
        if table is None:
            continue
        if table.name in tables:
            raise CatalogError(
                f"streams {tables[table.name].stream} and {stream.name} would both be table {table.name}"
            )
        tables[table.name] = table
    return list(tables.values())
