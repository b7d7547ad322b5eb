"""The aggregation job over Kinesis archives, in Spark local mode: records are ``partition`` the
shard id and ``offset`` the sequence number's exact decimal digits, both strings (above 2**64,
above 10**38 -- Spark's decimals --, 129 digits), deduped by (epoch, shard, sequence number) and
aggregated per hour, compared as whole DataFrames with what was archived.

* every format through the Arrow reader (objects in moto under their 129-digit keys), one read
  for all of them: each format archived under its own position epoch;
* Parquet, JSON Lines and CSV through Spark's own readers (objects on disk: a Kinesis key's
  object name is longer than a local file system allows, so the files get short names and
  ``read_native`` is told where each key's file is);
* the job itself (``run_aggregation``) over a Kinesis stream the archiver wrote, with an
  object copied under a second key.

Objects are rendered by tests/unit/test_aggregation_kinesis.py's helpers (the real format
writers, a Kinesis ``RenderSpec``, ``object_key(..., digits=129)``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from pyspark.sql import DataFrame

from jobs.aggregation.job import run_aggregation
from jobs.aggregation.native import plan_reads, read_native
from jobs.aggregation.reader import ObjectStore, value_schema
from jobs.aggregation.sink import AggregateSink, aggregates_table_schema
from jobs.aggregation.transforms import aggregate, dedupe, duplicate_count, read_records
from tests.integration.test_aggregate_job import assert_same, expected_aggregates, flush_all, table_aggregates
from tests.support.events import kinesis_event
from tests.support.format_objects import VARIANTS, make_archived_orders
from tests.support.harness import small_config
from tests.support.workload import make_orders
from tests.unit.test_aggregation_kinesis import ARCHIVE, KINESIS_VARIANTS, expected_records
from tidemark.archiver import Archiver
from tidemark.config.model import AggregationConfig
from tidemark.ledger.dynamodb import _serialize, marks_pk, object_to_item
from tidemark.sources import KINESIS, KINESIS_POSITION_DIGITS

EPOCHS = {name: index + 1 for index, name in enumerate(KINESIS_VARIANTS)}
#: what Spark's readers read, in two runs: CSV objects of one run share their header
NATIVE_RUNS = (("jsonl-gzip", "jsonl-none", "parquet", "csv-gzip"), ("parquet-typed", "csv-paths-gzip"))
RECORDS = (
    "hour string, epoch int, partition string, offset string, event_time string, order_id string, "
    "customer_id string, product_id string, price double, quantity bigint, created_at string, gift boolean, "
    "note string"
)
BY_PRODUCT = AggregationConfig(
    name="by_product",
    group_by=["epoch", "product_id"],
    metrics={
        "orders": "count(*)",
        "revenue": "round(sum(price * quantity), 6)",
        "distinct_customers": "count(distinct customer_id)",
        "shards": "count(distinct partition)",
        "first_event": "min(event_time)",
        # sequence numbers are text: in numeric order by (digits, text)
        "last_sequence": "max(named_struct('digits', length(offset), 'text', offset)).text",
    },
)
AGGREGATES = (
    "hour string, epoch int, product_id string, orders bigint, revenue double, distinct_customers bigint, "
    "shards bigint, first_event string, last_sequence string"
)


@pytest.fixture(scope="module")
def archived() -> dict[str, list[tuple[str, str, bytes]]]:
    """Every format's objects (one repeating records of another), each under its own epoch."""
    return {name: ARCHIVE.objects(variant, epoch=EPOCHS[name]) for name, variant in KINESIS_VARIANTS.items()}


def assert_frames_equal(found: DataFrame, expected: DataFrame) -> None:
    """Same columns and types, same rows (as a multiset: order is not part of a DataFrame)."""
    assert found.schema.simpleString() == expected.schema.simpleString()
    assert Counter(found.collect()) == Counter(expected.collect())


def expected_frame(spark: Any, names: list[str]) -> DataFrame:
    """The records of the named formats' epochs, each once."""
    return spark.createDataFrame([row for name in names for row in expected_records(ARCHIVE, EPOCHS[name])], RECORDS)


def expected_aggregates_frame(spark: Any, names: list[str]) -> DataFrame:
    """BY_PRODUCT computed in plain Python from what was archived."""
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = defaultdict(list)
    for name in names:
        for row in expected_records(ARCHIVE, EPOCHS[name]):
            groups[(row[0], row[1], row[7])].append(row)
    rows = [
        (
            hour,
            epoch,
            product,
            len(items),
            round(sum(row[8] * row[9] for row in items), 6),
            len({row[6] for row in items}),
            len({row[2] for row in items}),
            min(row[4] for row in items),
            str(max(int(row[3]) for row in items)),
        )
        for (hour, epoch, product), items in groups.items()
    ]
    return spark.createDataFrame(rows, AGGREGATES)


def test_every_format_reads_dedupes_and_aggregates_through_the_arrow_reader(spark, archive, archived):
    objects = []
    for items in archived.values():
        for key, hour, body in items:
            archive.s3.put_object(Bucket=archive.bucket, Key=key, Body=body)
            objects.append((key, hour))
    root = f"s3://{archive.bucket}"
    values = value_schema(((key, ObjectStore(root).read(key)) for key, _hour in objects), source=KINESIS)

    read = read_records(spark, objects, root, tasks=4, values=values, source=KINESIS)
    records = read.frame.cache()

    assert read.readers == {"arrow": len(objects)}
    assert records.schema.simpleString() == spark.createDataFrame([], RECORDS).schema.simpleString()
    assert duplicate_count(records) == ARCHIVE.duplicates * len(archived)
    unique = dedupe(records)
    assert_frames_equal(unique, expected_frame(spark, list(archived)))  # offsets: the exact digits
    assert_frames_equal(aggregate(unique, BY_PRODUCT).frame, expected_aggregates_frame(spark, list(archived)))
    records.unpersist()


def test_spark_readers_read_kinesis_parquet_json_lines_and_csv_alike(spark, tmp_path: Path, archived):
    paths: dict[str, str] = {}
    frames = []
    for names in NATIVE_RUNS:
        objects = []
        for name in names:
            for index, (key, hour, body) in enumerate(archived[name]):
                # a key's object name (~300 bytes) is no file name: the file gets a short one
                path = tmp_path / f"{name}-{index}.{KINESIS_VARIANTS[name].extension}"
                path.write_bytes(body)
                paths[key] = f"file://{path}"
                objects.append((key, hour))
        plan = plan_reads(objects, native=True)
        assert plan.arrow == [] and sum(map(len, plan.native.values())) == len(objects)
        values = value_schema(((key, Path(paths[key][7:]).read_bytes()) for key, _hour in objects), source=KINESIS)
        frame, left = read_native(spark, plan.native, f"file://{tmp_path}", values, KINESIS, paths=paths)
        assert left == [] and frame is not None
        frames.append(frame)
    records = frames[0].unionByName(frames[1])

    names = [name for run in NATIVE_RUNS for name in run]
    unique = dedupe(records)
    assert_frames_equal(unique, expected_frame(spark, names))
    assert_frames_equal(aggregate(unique, BY_PRODUCT).frame, expected_aggregates_frame(spark, names))


def test_spark_refuses_a_kafka_object_in_a_kinesis_run(spark, tmp_path: Path):
    """A Kafka JSON Lines object has no shard_id or sequence_number: Spark's JSON reader would
    make them null; the run fails instead."""
    key, hour, body = make_archived_orders(partitions=1, hours=1, per_object=2).objects(VARIANTS["jsonl-none"])[0]
    path = tmp_path / "kafka.jsonl"
    path.write_bytes(body)
    values = value_schema([(key, body)])
    groups = {"json": [(key, hour)]}
    frame, _left = read_native(spark, groups, "file:///", values, KINESIS, paths={key: f"file://{path}"})
    assert frame is not None
    with pytest.raises(Exception, match="shard_id: null is not valid"):
        frame.collect()


@pytest.fixture
def aggregates(moto_endpoint, archive):
    resource = boto3.resource("dynamodb", endpoint_url=moto_endpoint)
    name = f"{archive.table}-aggregates"
    resource.meta.client.create_table(**aggregates_table_schema(name))
    return AggregateSink(name, resource=resource), resource.Table(name)


def test_the_job_aggregates_a_kinesis_stream_and_a_record_in_two_objects_counts_once(spark, archive, aggregates):
    """``run_aggregation`` over what the archiver wrote from Kinesis events (56-digit sequence
    numbers with random gaps, two shards), one object copied under a second key."""
    sink, table = aggregates
    config = small_config(max_records=60, kind=KINESIS)
    stream = config.streams[0]
    runtime = archive.runtime(config)
    orders = make_orders(partitions=2, per_partition=150, hours=2, late_share=0.0, bad_share=0.0, seed=7, kind=KINESIS)
    Archiver(runtime).handle(kinesis_event(orders.all_records()))
    flush_all(archive, runtime, config, orders.records)
    hour = min(e.hour for e in orders.expected if e.hour)
    original = runtime.ledger.committed_objects(stream.name, hour)[0]
    first = f"+{original.first:0{KINESIS_POSITION_DIGITS}d}-"
    assert first in original.key
    planted_key = original.key.replace(first, f"+{original.first + 1:0{KINESIS_POSITION_DIGITS}d}-")
    archive.s3.copy_object(
        Bucket=archive.bucket, Key=planted_key, CopySource={"Bucket": archive.bucket, "Key": original.key}
    )
    planted = object_to_item(replace(original, key=planted_key, first=original.first + 1))
    archive.dynamodb.put_item(TableName=archive.table, Item=_serialize(planted))
    archive.dynamodb.update_item(
        TableName=archive.table,
        Key={"pk": {"S": marks_pk(stream.name)}, "sk": {"S": hour}},
        UpdateExpression="ADD commits :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )

    report = run_aggregation(spark, stream, ledger=runtime.ledger, bucket=archive.bucket, sink=sink, tasks=3)

    assert report.duplicates == original.records
    assert report.records == sum(1 for e in orders.expected if e.hour)
    assert report.still_dirty == [] and report.readers == {"arrow": len(report.objects)}
    assert_same(table_aggregates(table), expected_aggregates(orders.expected))
