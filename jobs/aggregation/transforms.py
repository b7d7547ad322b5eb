"""Pure DataFrame -> DataFrame steps of the aggregation job (no I/O beyond what Spark reads)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from jobs.aggregation.reader import OBJECTS_SCHEMA, fetch_objects, records_schema
from tidemark.config.model import AggregationConfig

# One stream per run: (epoch, partition, offset) is the record (see DESIGN.md, "Position epochs").
IDENTITY = ["epoch", "partition", "offset"]


def read_records(
    spark: SparkSession, objects: Sequence[tuple[str, str]], bucket: str, tasks: int, values: pa.Schema
) -> DataFrame:
    """Records of exactly these objects (``(key, hour)`` pairs), fetched by executor tasks:
    ``hour, epoch, partition, offset, event_time`` and the value's fields as columns."""
    listing = spark.createDataFrame(list(objects), OBJECTS_SCHEMA)
    schema = from_arrow_schema(records_schema(values))
    return listing.repartition(max(1, min(tasks, len(objects)))).mapInArrow(fetch_objects(bucket, values), schema)


def dedupe(records: DataFrame) -> DataFrame:
    """One row per (epoch, partition, offset): defence in depth against an object written twice."""
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
