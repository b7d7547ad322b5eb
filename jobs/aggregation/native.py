"""Spark's own readers for the formats Spark reads here: Parquet, JSON Lines and CSV.

Used when the job is given ``--archive-root`` (``s3://bucket`` on EMR, where EMRFS serves
``s3://``; ``file:///dir`` locally). The committed objects' files are read with
``spark.read.parquet`` / ``.json`` / ``.csv`` -- file paths from the ledger's object list, never
a listing -- into exactly the columns and types of the Arrow reader
(:func:`jobs.aggregation.reader.records_schema`), so the two paths give equal records:

* ``partition`` and ``offset`` are the source kind's (the stream's: one per run): Kafka's
  ``partition`` and ``offset`` as int and long; Kinesis's ``shard_id`` and
  ``sequence_number`` as strings, read as strings from every format (JSON strings, Parquet
  string columns, CSV cells) and never cast -- a sequence number has up to 129 digits, Spark's
  decimals 38 --, each checked (a shard id of the API's characters, a sequence number of
  canonical digits) as the Arrow reader checks them; a file of the other source kind fails
  the query;
* ``hour`` and ``epoch`` come from the ledger's object list, joined (broadcast) on the path of
  the file each row was read from (``input_file_name()`` without its scheme and authority);
  a row of a file the run did not plan fails the query;
* ``event_time`` is the ISO-8601 text JSON Lines holds (``2026-11-21T07:12:33.123Z``): as
  written in JSON and CSV, formatted from Parquet's timestamp with time-zone-free arithmetic;
* value fields take the value schema of the objects' hours (inferred from every object of the
  hour; the job reads hours of one schema together): a Parquet struct ``value`` (a declared
  value schema) by its fields, a JSON value parsed into that schema directly, a string value
  (Parquet, CSV ``value``) with ``from_json``, CSV ``value.<path>`` columns cast and nested as
  :func:`jobs.aggregation.values.nest_paths` does. Parsing is checked and casts are checked:
  a value that cannot take its type fails the run, as in the Arrow reader. A value that is no
  JSON object (an array, a scalar, ``null``: the archiver accepts them) is a record whose every
  field is null, as in the Arrow reader: JSON Lines are read PERMISSIVE, and a line that does
  not fit is let through only when its value is no object (its first character after
  ``,"value":``) and its envelope parsed; a string value is parsed only when it is an object;
* tombstones (a null value) are skipped, as by the Arrow reader: JSON Lines lines marked
  ``"tombstone": true``, a null Parquet ``value``, a CSV ``value`` cell that is empty and
  unquoted (null; the quoted empty string reads as the ``emptyValue`` marker).

Not read natively (they go through the Arrow reader, from the same root): Avro (no spark-avro
jar here), zstd objects (no native zstd codec in Hadoop here), bytes, and any key holding a
character a Hadoop path would escape (partition-by folders with ``%``-escapes). Parquet
objects whose schemas cannot be merged (a ``value`` that is a string in some and a struct in
others: a value schema declared between them) go through the Arrow reader too. CSV objects of
one run must share their header (Spark takes it from one file and checks the others against
it: a run mixing column lists fails; run it without ``--archive-root``).

A file is read from ``<root>/<key>``, or from where ``paths`` says (a copy of the archive
under other names: a Kinesis object's name, two 129-digit positions long, does not fit a local
file system's 255 bytes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import reduce
from typing import NamedTuple
from urllib.parse import urlsplit

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    IntegerType,
    IntegralType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jobs.aggregation.formats import VALUE_PREFIX, kind_of_key
from jobs.aggregation.reader import ENVELOPE_NAMES, records_schema
from tidemark.objects.keys import epoch_of_key
from tidemark.sources import KAFKA, SEQUENCE_NUMBER, SHARD_ID, EnvelopeNames, shape_of

#: (format, codec) -> Spark's reader for it
NATIVE_READERS = {
    ("parquet", "inside"): "parquet",
    ("jsonl", "gzip"): "json",
    ("jsonl", "none"): "json",
    ("csv", "gzip"): "csv",
    ("csv", "none"): "csv",
}
_PATH_SAFE = re.compile(r"^[A-Za-z0-9/._=+~-]+$")  # nothing a Hadoop path or URI would escape
_SCHEME_AND_AUTHORITY = r"^[A-Za-z][A-Za-z0-9+.\-]*:(//[^/]*)?"
FILE = "_tidemark_file"
TOMBSTONE = "tombstone"  # JSON Lines' marker on a tombstone's line (tidemark.formats.jsonl)
#: what an empty quoted CSV cell (the empty string) reads as, told apart from an empty unquoted one (null)
_EMPTY = "\u0000tidemark-empty\u0000"
_UNFIT = "_tidemark_unfit"  # a JSON Lines line whose fields did not all fit the read schema
#: a line's value starts after the first ``,"value":`` (the key before it is a JSON string or null,
#: and no JSON string holds an unescaped quote)
_VALUE_OPENING = r',"value":\s*(\S)'

Objects = Sequence[tuple[str, str]]  # (key, hour)


def native_reader(key: str) -> str | None:
    """``parquet``, ``json`` or ``csv``: the Spark reader for the object; None for the Arrow reader."""
    if not _PATH_SAFE.fullmatch(key):
        return None
    try:
        kind = kind_of_key(key)
    except ValueError:
        return None
    return NATIVE_READERS.get((kind.format, kind.codec))


class ReadPlan(NamedTuple):
    native: dict[str, list[tuple[str, str]]]  # Spark reader -> its objects
    arrow: list[tuple[str, str]]


def plan_reads(objects: Objects, native: bool) -> ReadPlan:
    """Which objects Spark's readers take (only with ``native``), and which the Arrow reader does."""
    groups: dict[str, list[tuple[str, str]]] = {}
    rest: list[tuple[str, str]] = []
    for key, hour in objects:
        reader = native_reader(key) if native else None
        if reader is None:
            rest.append((key, hour))
        else:
            groups.setdefault(reader, []).append((key, hour))
    return ReadPlan(groups, rest)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def iso_of_millis(ms: Column) -> Column:
    """Epoch milliseconds as ``iso_utc`` text, by integer arithmetic (no session time zone)."""
    day_ms = F.pmod(ms, F.lit(86_400_000))
    day = F.date_from_unix_date(((ms - day_ms) / 86_400_000).cast("int")).cast("string")
    return F.format_string(
        "%sT%02d:%02d:%02d.%03dZ",
        day,
        (day_ms / 3_600_000).cast("int"),
        (F.pmod(ms, F.lit(3_600_000)) / 60_000).cast("int"),
        (F.pmod(ms, F.lit(60_000)) / 1_000).cast("int"),
        F.pmod(ms, F.lit(1_000)).cast("int"),
    )


def checked_cast(column: Column, kind: DataType, what: str) -> Column:
    """``column`` (text) cast to ``kind``, failing the query where a cell does not convert
    (Spark's cast would make it null)."""
    if isinstance(kind, StringType):
        return column
    cast = column.cast(kind)
    bad = column.isNotNull() & cast.isNull()
    if isinstance(kind, IntegralType) or (isinstance(kind, DecimalType) and kind.scale == 0):  # '12.5' -> 12
        bad = column.isNotNull() & (cast.isNull() | ~column.rlike(r"^\s*[+-]?[0-9]+\s*$"))
    message = F.concat(F.lit(f"{what}: "), column, F.lit(f" is not {kind.simpleString()}"))
    return F.when(bad, F.raise_error(message)).otherwise(cast)


def checked_text(column: Column, pattern: str, what: str) -> Column:
    """``column`` (text) as it is, failing the query where a cell is null or does not match
    ``pattern`` (a Java regex)."""
    bad = column.isNull() | ~column.rlike(pattern)
    message = F.concat(F.lit(f"{what}: "), F.coalesce(column, F.lit("null")), F.lit(" is not valid"))
    return F.when(bad, F.raise_error(message)).otherwise(column)


def _positions(names: EnvelopeNames, *, text_cells: bool = False) -> list[Column]:
    """The record's ``partition`` and ``offset`` columns of a frame holding the envelope's
    fields: Kinesis shard ids and sequence numbers checked text; Kafka's numbers as read, or
    cast with checks from ``text_cells`` (CSV)."""
    partition, position = F.col(_quoted(names.partition)), F.col(_quoted(names.position))
    if names.position_is_text:
        partition = checked_text(partition, SHARD_ID.pattern, names.partition)
        position = checked_text(position, SEQUENCE_NUMBER.pattern, names.position)
    elif text_cells:
        partition = checked_cast(partition, IntegerType(), names.partition)
        position = checked_cast(position, LongType(), names.position)
    return [partition.alias("partition"), position.alias("offset")]


def _fields_of_struct(value: Column, present: StructType | None, run: StructType, names: Sequence[str]) -> list[Column]:
    """The run's value fields out of a struct column; ``present`` is the struct's own type when
    it may differ from the run's (a Parquet struct): fields cast, missing ones null."""
    columns = []
    for name in names:
        kind = run[name].dataType
        if present is None:
            column = value.getField(name)
        elif name in present.fieldNames():
            column = value.getField(name).cast(kind)
        else:
            column = F.lit(None).cast(kind)
        columns.append(column.alias(name))
    return columns


def _json_values(text: Column, run: StructType, names: Sequence[str]) -> list[Column]:
    """The value fields of JSON text values: an object parsed (FAILFAST: a field that cannot
    take its type fails the query), any other value (an array, a scalar, ``null``) a record
    whose every field is null, as the Arrow reader reads it."""
    parsed = F.when(text.rlike(r"^\s*\{"), F.from_json(text, run, {"mode": "FAILFAST"}))
    return [parsed.getField(name).alias(name) for name in names]


def _path_value(columns: set[str], path: str, kind: DataType) -> Column:
    """A field built from CSV ``value.<path>`` columns: a struct from its children's paths."""
    if isinstance(kind, StructType):
        children = [_path_value(columns, f"{path}.{field.name}", field.dataType).alias(field.name) for field in kind]
        return F.struct(*children)
    name = VALUE_PREFIX + path
    if name not in columns:
        return F.lit(None).cast(kind)
    cell = F.col(_quoted(name))
    text = F.when(cell == _EMPTY, F.lit("")).otherwise(cell)
    return checked_cast(text, kind, name)


def _with_file(frame: DataFrame) -> DataFrame:
    return frame.withColumn(FILE, F.regexp_replace(F.input_file_name(), _SCHEME_AND_AUTHORITY, ""))


def _read_json(
    spark: SparkSession, paths: list[str], run: StructType, names: Sequence[str], envelope: EnvelopeNames
) -> DataFrame:
    text = envelope.position_is_text  # Kinesis: JSON strings, read as strings
    schema = StructType(
        [
            StructField(envelope.partition, StringType() if text else IntegerType()),
            StructField(envelope.position, StringType() if text else LongType()),
            StructField("event_time", StringType()),
            StructField("value", run),
            StructField(TOMBSTONE, BooleanType()),  # true on a tombstone's line, absent elsewhere
        ]
    )
    # PERMISSIVE keeps what the rest of a line holds when its value does not fit the struct: a
    # value that is no object (an array, a scalar) is a record whose every field is null, as the
    # Arrow reader reads it; anything else that does not fit fails the query, as FAILFAST would
    reader = spark.read.schema(StructType([*schema.fields, StructField(_UNFIT, StringType())]))
    frame = _with_file(reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", _UNFIT).json(paths))
    frame = frame.where(F.col(TOMBSTONE).isNull() | ~F.col(TOMBSTONE))
    unfit = F.col(_UNFIT)
    opening = F.regexp_extract(unfit, _VALUE_OPENING, 1)  # the value's first character on the line
    whole = F.from_json(unfit, "value string", {"mode": "FAILFAST"})  # a line that is no JSON fails here
    failed = unfit.isNotNull() & (
        whole.isNull()
        | (opening == "{")
        | (opening == "")
        | F.col(envelope.partition).isNull()
        | F.col(envelope.position).isNull()
    )
    message = F.concat(
        F.lit("a JSON Lines record that does not fit the hour's value schema: "), F.substring(unfit, 1, 300)
    )
    frame = frame.withColumn("value", F.when(failed, F.raise_error(message)).otherwise(F.col("value")))
    return frame.select(
        *_positions(envelope),
        F.col("event_time"),
        *_fields_of_struct(F.col("value"), None, run, names),
        F.col(FILE),
    )


def _read_parquet(
    spark: SparkSession, paths: list[str], run: StructType, names: Sequence[str], envelope: EnvelopeNames
) -> DataFrame:
    frame = _with_file(spark.read.option("mergeSchema", "true").parquet(*paths))
    missing = [name for name in (envelope.partition, envelope.position) if name not in frame.columns]
    if missing:
        raise ValueError(f"Parquet objects without {missing} columns cannot be aggregated (records dedupe on them)")
    frame = frame.where(F.col("value").isNotNull())  # tombstones: nothing to aggregate
    value_type = frame.schema["value"].dataType
    if isinstance(value_type, StructType):
        fields = _fields_of_struct(F.col("value"), value_type, run, names)
    else:
        text = F.col("value").cast("string") if isinstance(value_type, BinaryType) else F.col("value")
        fields = _json_values(text, run, names)
    stamp = F.col("event_time")
    ms = F.unix_millis(stamp) if isinstance(frame.schema["event_time"].dataType, TimestampType) else stamp.cast("long")
    return frame.select(*_positions(envelope), iso_of_millis(ms).alias("event_time"), *fields, F.col(FILE))


def _read_csv(
    spark: SparkSession, paths: list[str], run: StructType, names: Sequence[str], envelope: EnvelopeNames
) -> DataFrame:
    reader = (
        spark.read.option("header", True)
        .option("enforceSchema", False)  # every file's header is checked against the first's
        .option("multiLine", True)  # values may hold line breaks (inside quotes)
        .option("escape", '"')  # RFC 4180: a quote inside a cell is doubled
        .option("emptyValue", _EMPTY)
        .option("mode", "FAILFAST")
    )
    frame = _with_file(reader.csv(paths))
    columns = set(frame.columns)
    for required in (envelope.partition, envelope.position):
        if required not in columns:
            raise ValueError(f"CSV objects without a {required!r} column cannot be aggregated (records dedupe on it)")
    if "value" in columns:
        frame = frame.where(F.col("value").isNotNull())  # tombstones (an empty unquoted cell)
        fields = _json_values(F.col("value"), run, names)
    else:
        fields = [_path_value(columns, name, run[name].dataType).alias(name) for name in names]
    event_time = F.col("event_time") if "event_time" in columns else F.lit(None).cast("string")
    return frame.select(
        *_positions(envelope, text_cells=True),
        event_time.alias("event_time"),
        *fields,
        F.col(FILE),
    )


_READERS = {"json": _read_json, "parquet": _read_parquet, "csv": _read_csv}


def read_native(
    spark: SparkSession,
    groups: dict[str, list[tuple[str, str]]],
    root: str,
    values: pa.Schema,
    source: str = KAFKA,
    *,
    paths: Mapping[str, str] | None = None,
) -> tuple[DataFrame | None, list[tuple[str, str]]]:
    """Records of the grouped objects (a ``source`` kind stream's) read by Spark from ``root``
    (columns and types of ``records_schema(values, source)``), and the objects left to the
    Arrow reader (Parquet whose schemas Spark cannot merge). ``paths`` names the file of a key
    that is not at ``<root>/<key>``."""
    envelope = shape_of(source).envelope
    schema = from_arrow_schema(records_schema(values, source))
    run = from_arrow_schema(values)
    names = [field.name for field in schema.fields if field.name not in ENVELOPE_NAMES]
    base = root.rstrip("/")
    located = dict(paths or {})

    def location(key: str) -> str:
        return located.get(key) or f"{base}/{key}"

    frames: list[DataFrame] = []
    left: list[tuple[str, str]] = []
    planned: list[tuple[str, str, int]] = []
    for reader, objects in sorted(groups.items()):
        files = [location(key) for key, _hour in objects]
        try:
            frame = _READERS[reader](spark, files, run, names, envelope)
        except Exception as exc:
            if reader != "parquet" or "merg" not in str(exc).lower():
                raise
            left.extend(objects)  # string and struct values: the Arrow reader takes each as it is
            continue
        frames.append(frame)
        planned.extend((urlsplit(location(key)).path, hour, epoch_of_key(key)) for key, hour in objects)
    if not frames:
        return None, left
    listing = spark.createDataFrame(planned, f"{FILE} string, hour string, epoch int")
    rows = reduce(DataFrame.unionByName, frames).join(F.broadcast(listing), on=FILE, how="left")
    unplanned = F.concat(F.lit("read a file the run did not plan: "), F.col(FILE))
    hour = F.when(F.col("hour").isNull(), F.raise_error(unplanned)).otherwise(F.col("hour"))
    selected = [
        (hour if field.name == "hour" else F.col(_quoted(field.name))).cast(field.dataType).alias(field.name)
        for field in schema.fields
    ]
    return rows.select(*selected), left
