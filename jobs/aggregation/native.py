"""Spark's own readers for the formats Spark reads here: Parquet, JSON Lines and CSV.

Used when the job is given ``--archive-root`` (``s3://bucket`` on EMR, where EMRFS serves
``s3://``; ``file:///dir`` locally). The committed objects' files are read with
``spark.read.parquet`` / ``.json`` / ``.csv`` -- file paths from the ledger's object list, never
a listing -- into exactly the columns and types of the Arrow reader
(:func:`jobs.aggregation.reader.records_schema`), so the two paths give equal records:

* ``hour`` and ``epoch`` come from the ledger's object list, joined (broadcast) on the path of
  the file each row was read from (``input_file_name()`` without its scheme and authority);
  a row of a file the run did not plan fails the query;
* ``event_time`` is the ISO-8601 text JSON Lines holds (``2026-11-21T07:12:33.123Z``): as
  written in JSON and CSV, formatted from Parquet's timestamp with time-zone-free arithmetic;
* value fields take the run's sampled value schema: a Parquet struct ``value`` (a declared
  value schema) by its fields, a JSON value parsed into that schema directly, a string value
  (Parquet, CSV ``value``) with ``from_json``, CSV ``value.<path>`` columns cast and nested as
  :func:`jobs.aggregation.values.nest_paths` does. Parsing is FAILFAST and casts are checked:
  a value that cannot take the run's type fails the run, as in the Arrow reader.

Not read natively (they go through the Arrow reader, from the same root): Avro (no spark-avro
jar here), zstd objects (no native zstd codec in Hadoop here), bytes, and any key holding a
character a Hadoop path would escape (partition-by folders with ``%``-escapes). Parquet
objects whose schemas cannot be merged (a ``value`` that is a string in some and a struct in
others: a value schema declared between them) go through the Arrow reader too. CSV objects of
one run must share their header (Spark takes it from one file and checks the others against
it: a run mixing column lists fails; run it without ``--archive-root``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import reduce
from typing import NamedTuple
from urllib.parse import urlsplit

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    DataType,
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
#: what an empty quoted CSV cell (the empty string) reads as, told apart from an empty unquoted one (null)
_EMPTY = "\u0000tidemark-empty\u0000"

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
    if isinstance(kind, IntegralType):  # Spark casts '12.5' to 12
        bad = column.isNotNull() & (cast.isNull() | ~column.rlike(r"^\s*[+-]?[0-9]+\s*$"))
    message = F.concat(F.lit(f"{what}: "), column, F.lit(f" is not {kind.simpleString()}"))
    return F.when(bad, F.raise_error(message)).otherwise(cast)


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
    parsed = F.from_json(text, run, {"mode": "FAILFAST"})
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


def _read_json(spark: SparkSession, paths: list[str], run: StructType, names: Sequence[str]) -> DataFrame:
    envelope = StructType(
        [
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("event_time", StringType()),
            StructField("value", run),
        ]
    )
    frame = _with_file(spark.read.schema(envelope).option("mode", "FAILFAST").json(paths))
    return frame.select(
        F.col("partition"),
        F.col("offset"),
        F.col("event_time"),
        *_fields_of_struct(F.col("value"), None, run, names),
        F.col(FILE),
    )


def _read_parquet(spark: SparkSession, paths: list[str], run: StructType, names: Sequence[str]) -> DataFrame:
    frame = _with_file(spark.read.option("mergeSchema", "true").parquet(*paths))
    value_type = frame.schema["value"].dataType
    if isinstance(value_type, StructType):
        fields = _fields_of_struct(F.col("value"), value_type, run, names)
    else:
        text = F.col("value").cast("string") if isinstance(value_type, BinaryType) else F.col("value")
        fields = _json_values(text, run, names)
    stamp = F.col("event_time")
    ms = F.unix_millis(stamp) if isinstance(frame.schema["event_time"].dataType, TimestampType) else stamp.cast("long")
    return frame.select(
        F.col("partition"), F.col("offset"), iso_of_millis(ms).alias("event_time"), *fields, F.col(FILE)
    )


def _read_csv(spark: SparkSession, paths: list[str], run: StructType, names: Sequence[str]) -> DataFrame:
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
    for required in ("partition", "offset"):
        if required not in columns:
            raise ValueError(f"CSV objects without a {required!r} column cannot be aggregated (records dedupe on it)")
    if "value" in columns:
        fields = _json_values(F.col("value"), run, names)
    else:
        fields = [_path_value(columns, name, run[name].dataType).alias(name) for name in names]
    event_time = F.col("event_time") if "event_time" in columns else F.lit(None).cast("string")
    return frame.select(
        checked_cast(F.col("partition"), IntegerType(), "partition").alias("partition"),
        checked_cast(F.col("offset"), LongType(), "offset").alias("offset"),
        event_time.alias("event_time"),
        *fields,
        F.col(FILE),
    )


_READERS = {"json": _read_json, "parquet": _read_parquet, "csv": _read_csv}


def read_native(
    spark: SparkSession, groups: dict[str, list[tuple[str, str]]], root: str, values: pa.Schema
) -> tuple[DataFrame | None, list[tuple[str, str]]]:
    """Records of the grouped objects read by Spark from ``root`` (columns and types of
    ``records_schema(values)``), and the objects left to the Arrow reader (Parquet whose
    schemas Spark cannot merge)."""
    schema = from_arrow_schema(records_schema(values))
    run = from_arrow_schema(values)
    names = [field.name for field in schema.fields if field.name not in ENVELOPE_NAMES]
    base = root.rstrip("/")
    frames: list[DataFrame] = []
    left: list[tuple[str, str]] = []
    planned: list[tuple[str, str, int]] = []
    for reader, objects in sorted(groups.items()):
        paths = [f"{base}/{key}" for key, _hour in objects]
        try:
            frame = _READERS[reader](spark, paths, run, names)
        except Exception as exc:
            if reader != "parquet" or "merg" not in str(exc).lower():
                raise
            left.extend(objects)  # string and struct values: the Arrow reader takes each as it is
            continue
        frames.append(frame)
        planned.extend((key, hour, epoch_of_key(key)) for key, hour in objects)
    if not frames:
        return None, left
    prefix = urlsplit(base).path.rstrip("/")
    listing = spark.createDataFrame(
        [(f"{prefix}/{key}", hour, epoch) for key, hour, epoch in planned], f"{FILE} string, hour string, epoch int"
    )
    rows = reduce(DataFrame.unionByName, frames).join(F.broadcast(listing), on=FILE, how="left")
    unplanned = F.concat(F.lit("read a file the run did not plan: "), F.col(FILE))
    hour = F.when(F.col("hour").isNull(), F.raise_error(unplanned)).otherwise(F.col("hour"))
    selected = [
        (hour if field.name == "hour" else F.col(_quoted(field.name))).cast(field.dataType).alias(field.name)
        for field in schema.fields
    ]
    return rows.select(*selected), left
