"""Pure DataFrame -> DataFrame steps of the aggregation job (no I/O beyond what Spark reads).

Records are ``hour, epoch, partition, offset, event_time`` and the value's fields, with the
identity typed by the stream's source kind (``jobs.aggregation.reader.envelope_fields``):
Kafka ``partition`` int / ``offset`` bigint; Kinesis ``partition`` string (the shard id) /
``offset`` string (the sequence number's digits, never a number). The transforms below treat
both alike: a record is ``(epoch, partition, offset)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import reduce
from typing import NamedTuple

import pyarrow as pa
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import DataType, StructType

from jobs.aggregation.exact_sums import guard_sums
from jobs.aggregation.native import plan_reads, read_native
from jobs.aggregation.reader import (
    ENVELOPE_NAMES,
    OBJECTS_SCHEMA,
    SCHEMAS_SCHEMA,
    fetch_objects,
    infer_object_schemas,
    records_schema,
)
from jobs.aggregation.values import complete, mixed_fields, unify
from tidemark.config.model import AggregationConfig
from tidemark.exceptions import ConfigError
from tidemark.sources import KAFKA

# One stream per run: (epoch, partition, offset) is the record (see DESIGN.md, "Position epochs").
IDENTITY = ["epoch", "partition", "offset"]


class Records(NamedTuple):
    frame: DataFrame
    readers: dict[str, int]  # objects per read path: "arrow", "spark-parquet", "spark-json", "spark-csv"


class ValueSchemas(NamedTuple):
    """The value schema of each hour of a run, and the hours whose objects cannot be read."""

    hours: dict[str, pa.Schema]  # hour -> its value schema (:func:`jobs.aggregation.values.complete`)
    failed: dict[str, str]  # hour -> why (the first of its objects that cannot be read)

    @property
    def run(self) -> pa.Schema:
        """Every field any hour has (the names aggregations may use)."""
        return unify(self.hours.values())

    def groups(self) -> list[tuple[pa.Schema, list[str]]]:
        """The hours in groups of one value schema each (most runs: one group), read together."""
        found: dict[bytes, tuple[pa.Schema, list[str]]] = {}
        for hour, schema in self.hours.items():
            found.setdefault(schema.serialize().to_pybytes(), (schema, []))[1].append(hour)
        return list(found.values())


def infer_value_schemas(
    spark: SparkSession, objects: Sequence[tuple[str, str]], root: str, tasks: int, *, source: str = KAFKA
) -> ValueSchemas:
    """Each hour's value schema from every object of that hour (a first pass over the run's
    objects, in ``tasks`` tasks: each object's value schema, unified per hour on the driver), so
    a field that changes type in any object is widened rather than failing the read, and an
    hour is typed by its own records only -- its figures and item keys are the same whichever
    other hours share the run (the fields only other hours have are added as nulls, so every
    aggregation resolves in every hour). An object that cannot be read fails its hour (left
    out of the run, reported), not the run."""
    order = {key: index for index, (key, _hour) in enumerate(objects)}
    listing = spark.createDataFrame(list(objects), OBJECTS_SCHEMA)
    tasks = max(1, min(tasks, len(objects)))
    found = listing.repartition(tasks).mapInArrow(infer_object_schemas(root, source), SCHEMAS_SCHEMA).collect()
    rows = sorted(found, key=lambda row: order[row["key"]])
    failed: dict[str, str] = {}
    for row in rows:
        if row["error"] is not None:
            failed.setdefault(row["hour"], f"{row['key']}: {row['error']}")
    by_hour: dict[str, list[pa.Schema]] = {}
    for row in rows:
        if row["hour"] not in failed:
            by_hour.setdefault(row["hour"], []).append(pa.ipc.read_schema(pa.py_buffer(bytes(row["schema"]))))
    own = {hour: unify(schemas, settled=False) for hour, schemas in by_hour.items()}
    run = unify(own.values())
    return ValueSchemas({hour: complete(schema, run) for hour, schema in own.items()}, failed)


def read_records(
    spark: SparkSession,
    objects: Sequence[tuple[str, str]],
    root: str,
    tasks: int,
    values: pa.Schema,
    *,
    native: bool = False,
    source: str = KAFKA,
) -> Records:
    """Records of exactly these objects (``(key, hour)`` pairs, a ``source`` kind stream's)
    under the archive ``root`` (``s3://bucket``, or what ``--archive-root`` names): ``hour,
    epoch, partition, offset, event_time`` and the value's fields as columns. With ``native``,
    Parquet, JSON Lines and CSV objects are read by Spark's own readers
    (``jobs.aggregation.native``); everything else -- every object, without ``native`` -- is
    fetched by executor tasks and read with Arrow. ``values`` is the value schema of every
    hour of ``objects`` (the job reads each group of hours of one schema apart)."""
    # a mixed field's numbers are their JSON tokens as text: Spark's readers would render them
    # as Java doubles (1.0E22), so hours of such a schema are read with the Arrow reader
    plan = plan_reads(objects, native and not mixed_fields(values))
    frames: list[DataFrame] = []
    readers: dict[str, int] = {}
    arrow = list(plan.arrow)
    if plan.native:
        frame, left = read_native(spark, plan.native, root, values, source)
        arrow += left
        if frame is not None:
            frames.append(frame)
        taken = {key for key, _hour in left}
        for reader, group in plan.native.items():
            count = sum(1 for key, _hour in group if key not in taken)
            if count:
                readers[f"spark-{reader}"] = count
    if arrow or not frames:
        listing = spark.createDataFrame(arrow, OBJECTS_SCHEMA)
        schema = from_arrow_schema(records_schema(values, source))
        tasks = max(1, min(tasks, len(arrow)))
        frames.append(listing.repartition(tasks).mapInArrow(fetch_objects(root, values, source), schema))
        if arrow:
            readers["arrow"] = len(arrow)
    return Records(reduce(DataFrame.unionByName, frames), readers)


def dedupe(records: DataFrame) -> DataFrame:
    """One row per (epoch, partition, offset) -- a Kafka offset, or a Kinesis shard's sequence
    number as text --: defence in depth against an object written twice."""
    return records.dropDuplicates(IDENTITY)


def duplicate_count(records: DataFrame) -> int:
    """How many rows ``dedupe`` would drop, found by shuffling only the record identities (a
    few bytes per row), so the common case -- none -- never moves the values around."""
    counts = records.groupBy(*IDENTITY).count().where("count > 1")
    extra = counts.agg(F.sum(F.col("count") - 1).alias("extra")).collect()[0]["extra"]
    return int(extra or 0)


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")  # SQL string literals


def _spellings(expression: str, name: str) -> set[str]:
    """How a Spark SQL expression spells the column ``name``, in any case (bare or in
    backquotes; not a field of a struct, ``meta.offset``, nor inside a string literal)."""
    code = _QUOTED.sub("''", expression)
    pattern = rf"(?<![\w.`])(?:({re.escape(name)})|`({re.escape(name)})`)(?![\w`])"
    return {match.group(1) or match.group(2) for match in re.finditer(pattern, code, re.IGNORECASE)}


def refuse_shadowed_fields(values: pa.Schema, aggregations: Sequence[AggregationConfig]) -> None:
    """Fail the run, loudly, when an aggregation names a column that is both a value field and
    one of the record's envelope columns (``hour``, ``epoch``, ``partition``, ``offset``,
    ``event_time``): the envelope's would silently be taken (the value's ``hour`` grouped as the
    event hour, ``sum(offset)`` of Kafka's offsets). A value field of such a name that no
    aggregation names is left out of the records, harmlessly. Names are case-sensitive
    (:data:`jobs.aggregation.session.JOB_CONF`): a value field ``Offset`` beside ``offset`` is
    a field of its own, which an aggregation may name; another spelling of a shadowed name that
    is no value field of its own (``OFFSET``) is refused too (it names no column)."""
    fields = set(values.names)
    shadowed = [name for name in values.names if name in ENVELOPE_NAMES]

    def refused(spelling: str, name: str) -> bool:
        return spelling == name or spelling not in fields

    for aggregation in aggregations:
        for name in shadowed:
            grouped = [
                column
                for column in aggregation.group_by
                if column.split(".")[0].lower() == name.lower() and refused(column.split(".")[0], name)
            ]
            metrics = [
                metric
                for metric, expression in aggregation.metrics.items()
                if any(refused(spelling, name) for spelling in _spellings(expression, name))
            ]
            if grouped or metrics:
                used = ", ".join([*(f"group_by {column}" for column in grouped), *(f"metric {m}" for m in metrics)])
                raise ConfigError(
                    f"aggregation {aggregation.name!r} names {name!r} ({used}), which is both a field of the "
                    f"stream's values and the record's envelope column {name!r}: it would silently be the "
                    f"envelope's; rename the value field or do not aggregate it"
                )


class AggregationError(Exception):
    """An aggregation Spark cannot compute over these records' types (an hour's, since hours of
    one value schema are aggregated together): the message names the aggregation, the metric or
    group column, and Spark's reason. It fails those hours, never the run."""


class Aggregated(NamedTuple):
    frame: DataFrame  # hour, <group_by...>, <metric...>
    absent: list[str]  # fields the aggregation names that no record of the run has: read as null


#: how many absent fields one aggregation may name before the run stops taking them as null
MAX_ABSENT_FIELDS = 64


def one_line(exc: BaseException) -> str:
    """Spark's reason for ``exc`` on one line: ``[ERROR_CLASS] message`` where Spark gives one
    (also from the JVM's exception chain, or the Python worker's last traceback line)."""
    if isinstance(exc, Py4JJavaError):
        text = str(exc.java_exception)
    elif isinstance(exc, PythonException):
        lines = [line for line in str(exc).splitlines() if line.strip()]
        text = lines[-1] if lines else type(exc).__name__
    else:
        text = str(exc)
    found = re.search(r"\[[A-Z][A-Z0-9_.]+\][^\n]*", text)
    line = found.group(0) if found else (text.strip().splitlines() or [type(exc).__name__])[0]
    return line.strip()[:600]


def _quoted(name: str) -> Column:
    """The column named ``name`` exactly (dots and backquotes in names included)."""
    return F.col("`" + name.replace("`", "``") + "`")


def _name_parts(text: str) -> list[str]:
    """``"`meta`.`region`"`` (how Spark names a column in an error) -> ``["meta", "region"]``."""
    return [part.replace("``", "`") for part in re.findall(r"`((?:[^`]|``)*)`", text)]


def _struct_paths(kind: StructType, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], StructType]]:
    found = [(path, kind)] if path else []
    for field in kind.fields:
        if isinstance(field.dataType, StructType):
            found += _struct_paths(field.dataType, (*path, field.name))
    return found


def _with_absent(records: DataFrame, exc: AnalysisException, texts: Sequence[str]) -> tuple[DataFrame, str] | None:
    """``records`` with the field Spark could not resolve (``exc``) added as null, and its
    path -- when no record has it: a top-level name no column has, or a field of a struct
    that has no such field (named so in the aggregation's ``texts``). None for anything else."""
    error = exc.getErrorClass() or ""
    parameters = exc.getMessageParameters() or {}
    if error.startswith("UNRESOLVED_COLUMN"):
        parts = _name_parts(parameters.get("objectName", ""))
        if not parts or parts[0] in records.columns:
            return None
        value: Column = F.lit(None)
        for name in reversed(parts[1:]):
            value = F.struct(value.alias(name))
        return records.withColumn(parts[0], value), ".".join(parts)
    if error == "FIELD_NOT_FOUND":
        missing = _name_parts(parameters.get("fieldName", ""))
        fields = _name_parts(parameters.get("fields", ""))
        if len(missing) != 1 or any("." in name for name in [*missing, *fields]):
            return None
        plain = [text.replace("`", "") for text in texts]
        candidates = [
            path
            for path, kind in _struct_paths(records.schema)
            if kind.names == fields
            and not any("." in name for name in path)
            and any(".".join((*path, missing[0])) in text for text in plain)
        ]
        if len(candidates) != 1:
            return None
        path = candidates[0]
        nested = ".".join((*path[1:], missing[0]))
        return records.withColumn(path[0], _quoted(path[0]).withField(nested, F.lit(None))), ".".join(
            (*path, missing[0])
        )
    return None


def _type_of(records: DataFrame) -> Callable[[str], DataType | None]:
    def type_of(expression: str) -> DataType | None:
        try:
            return records.select(F.expr(expression)).schema[0].dataType
        except AnalysisException:
            return None

    return type_of


def _culprit(records: DataFrame, aggregation: AggregationConfig) -> str:
    """Which part of ``aggregation`` Spark cannot resolve over ``records``: its first group
    column or metric that fails alone."""
    for column in aggregation.group_by:
        try:
            records.select(F.col(column))
        except AnalysisException:
            return f"group_by {column}"
    for name, expression in aggregation.metrics.items():
        try:
            records.groupBy("hour").agg(F.expr(expression))
        except AnalysisException:
            return f"metric {name} = {expression}"
    return "its metrics together"


def aggregate(records: DataFrame, aggregation: AggregationConfig) -> Aggregated:
    """The configured metrics per event hour and group: ``hour, <group_by...>, <metric...>``.

    A field no record of the run has is read as null (reported in ``absent``): a rare field
    (``refund``) missing from every hour of one run must not fail it. Integer and decimal sums
    are guarded against overflow (:mod:`jobs.aggregation.exact_sums`). Anything else Spark
    cannot resolve raises :class:`AggregationError` naming the metric or group column."""
    absent: list[str] = []
    texts = [*aggregation.group_by, *aggregation.metrics.values()]
    while True:
        type_of = _type_of(records)
        metrics = [F.expr(guard_sums(text, type_of)).alias(name) for name, text in aggregation.metrics.items()]
        groups = [F.col(column).alias(column) for column in aggregation.group_by]  # keeps "meta.region" whole
        try:
            return Aggregated(records.groupBy("hour", *groups).agg(*metrics), absent)
        except AnalysisException as exc:
            found = _with_absent(records, exc, texts) if len(absent) < MAX_ABSENT_FIELDS else None
            if found is None:
                raise AggregationError(
                    f"aggregation {aggregation.name!r}, {_culprit(records, aggregation)}: {one_line(exc)}"
                ) from exc
            records, path = found
            absent.append(path)
