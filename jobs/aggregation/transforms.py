"""Pure DataFrame -> DataFrame steps of the aggregation job (no I/O beyond what Spark reads)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from jobs.aggregation.reader import OBJECTS_SCHEMA, RECORDS_SCHEMA, fetch_objects
from tidemark.config.model import AggregationConfig

IDENTITY = ["partition", "offset"]  # one stream per run: (stream, partition, offset) is the record


def read_records(spark: SparkSession, objects: Sequence[tuple[str, str]], bucket: str, tasks: int) -> DataFrame:
    """Records of exactly these objects (``(key, hour)`` pairs), fetched by executor tasks."""
    listing = spark.createDataFrame(list(objects), OBJECTS_SCHEMA)
    return listing.repartition(max(1, min(tasks, len(objects)))).mapInArrow(fetch_objects(bucket), RECORDS_SCHEMA)


def dedupe(records: DataFrame) -> DataFrame:
    """One row per (partition, offset): defence in depth against an object written twice."""
    return records.dropDuplicates(IDENTITY)


def value_schema(spark: SparkSession, records: DataFrame, sample: int = 5_000) -> StructType:
    """The values' JSON schema, inferred by Spark's JSON reader from a sample of them (types
    widen across the sample: a price seen as 12 and as 12.5 becomes a double)."""
    values = [row.value for row in records.select("value").limit(sample).collect()]
    return spark.read.json(spark.sparkContext.parallelize(values, 1)).schema


def parse_values(records: DataFrame, schema: StructType) -> DataFrame:
    """The value's fields as columns, next to the record's hour and identity."""
    return records.withColumn("v", F.from_json("value", schema)).select("hour", *IDENTITY, "event_time", "v.*")


def aggregate(records: DataFrame, aggregation: AggregationConfig) -> DataFrame:
    """The configured metrics per event hour and group: ``hour, <group_by...>, <metric...>``."""
    metrics = [F.expr(expression).alias(name) for name, expression in aggregation.metrics.items()]
    return records.groupBy("hour", *aggregation.group_by).agg(*metrics)
