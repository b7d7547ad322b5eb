"""Pure DataFrame -> DataFrame steps of the aggregation job (no I/O beyond what Spark reads).

Records are ``hour, epoch, partition, offset, event_time`` and the value's fields, with the
identity typed by the stream's source kind (``jobs.aggregation.reader.envelope_fields``):
Kafka ``partition`` int / ``offset`` bigint; Kinesis ``partition`` string (the shard id) /
``offset`` string (the sequence number's digits, never a number). The transforms below treat
both alike: a record is ``(epoch, partition, offset)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from jobs.aggregation.native import plan_reads, read_native
from jobs.aggregation.reader import OBJECTS_SCHEMA, fetch_objects, records_schema
from tidemark.config.model import AggregationConfig
from tidemark.sources import KAFKA

# One stream per run: (epoch, partition, offset) is the record (see DESIGN.md, "Position epochs").
IDENTITY = ["epoch", "partition", "offset"]


class Records(NamedTuple):
    frame: DataFrame
    readers: dict[str, int]  # objects per read path: "arrow", "spark-parquet", "spark-json", "spark-csv"


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
    fetched by executor tasks and read with Arrow."""
    plan = plan_reads(objects, native)
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


def aggregate(records: DataFrame, aggregation: AggregationConfig) -> DataFrame:
    """The configured metrics per event hour and group: ``hour, <group_by...>, <metric...>``."""
    metrics = [F.expr(expression).alias(name) for name, expression in aggregation.metrics.items()]
    groups = [F.col(column).alias(column) for column in aggregation.group_by]  # keeps "meta.region" whole
    return records.groupBy("hour", *groups).agg(*metrics)
