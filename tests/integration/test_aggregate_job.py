"""The Spark aggregation job, local[2] against moto server: aggregates equal a plain-Python
computation over the produced records; late data re-aggregates exactly the dirty hours; a
record duplicated across two objects counts once."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from typing import Any

import boto3
import orjson
import pytest
from botocore.exceptions import ClientError

from jobs.aggregation.job import run_aggregation
from jobs.aggregation.sink import AggregateSink, aggregates_table_schema
from tests.conftest import REPO
from tests.support.events import msk_event
from tests.support.harness import small_config
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.ledger.dynamodb import _serialize, marks_pk, object_to_item
from tidemark.verify import ExpectedRecord


def expected_aggregates(expected: list[ExpectedRecord]) -> dict[tuple[str, str], dict[str, Any]]:
    """orders_by_product, computed in plain Python from what was produced."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for item in expected:
        if item.hour is not None:
            order = orjson.loads(item.value)
            groups[(item.hour, order["product_id"])].append(order)
    return {
        key: {
            "order_count": len(orders),
            "revenue": sum(o["price"] * o["quantity"] for o in orders),
            "distinct_customers": len({o["customer_id"] for o in orders}),
        }
        for key, orders in groups.items()
    }


def table_aggregates(table) -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for item in table.scan(ConsistentRead=True)["Items"]:
        assert item["aggregation"] == "orders_by_product"
        metrics = item["metrics"]
        found[(item["hour"], item["group"]["product_id"])] = {
            "order_count": int(metrics["order_count"]),
            "revenue": float(metrics["revenue"]),
            "distinct_customers": int(metrics["distinct_customers"]),
        }
    return found


def assert_same(found, wanted) -> None:
    assert found.keys() == wanted.keys()
    for key, metrics in wanted.items():
        got = found[key]
        assert (got["order_count"], got["distinct_customers"]) == (
            metrics["order_count"],
            metrics["distinct_customers"],
        ), key
        assert math.isclose(got["revenue"], metrics["revenue"], rel_tol=1e-9), key  # float sums: order differs


def flush_all(archive, runtime, config, partitions) -> None:
    archive.clock.advance(minutes=16)
    for partition in partitions:
        runtime.writer(config.streams[0], partition).drain()


@pytest.fixture
def aggregates(moto_endpoint, archive):
    resource = boto3.resource("dynamodb", endpoint_url=moto_endpoint)
    name = f"{archive.table}-aggregates"
    resource.meta.client.create_table(**aggregates_table_schema(name))
    return AggregateSink(name, resource=resource), resource.Table(name)


def test_aggregates_equal_a_plain_computation_and_only_dirty_hours_are_redone(spark, archive, aggregates):
    sink, table = aggregates
    config = small_config(max_records=120)
    stream = config.streams[0]
    runtime = archive.runtime(config)
    orders = make_orders(partitions=3, per_partition=400, hours=3, late_share=0.08, seed=5)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    flush_all(archive, runtime, config, orders.records)

    first = run_aggregation(spark, stream, ledger=runtime.ledger, bucket=archive.bucket, sink=sink, tasks=3)

    assert first.duplicates == 0 and first.records == sum(1 for e in orders.expected if e.hour)
    assert first.readers == {"arrow": len(first.objects)}
    hours_with_data = {e.hour for e in orders.expected if e.hour}
    assert hours_with_data <= set(first.hours)  # (plus hours holding dead letters only)
    assert first.still_dirty == [] and sorted(first.cleared) == sorted(first.hours)
    assert_same(table_aggregates(table), expected_aggregates(orders.expected))

    # Late records for an hour that was already aggregated arrive and are archived.
    late = make_orders(partitions=1, per_partition=60, hours=1, late_share=0.0, bad_share=0.0, seed=9, start_offset=400)
    Archiver(runtime).handle(msk_event(late.all_records()))
    flush_all(archive, runtime, config, [0])
    late_hours = sorted({e.hour for e in late.expected if e.hour})
    before = {(i["pk"], i["sk"]): i for i in table.scan(ConsistentRead=True)["Items"]}

    second = run_aggregation(spark, stream, ledger=runtime.ledger, bucket=archive.bucket, sink=sink, tasks=3)

    assert sorted(second.hours) == late_hours  # exactly the hours that changed
    assert_same(table_aggregates(table), expected_aggregates(orders.expected + late.expected))
    after = {(i["pk"], i["sk"]): i for i in table.scan(ConsistentRead=True)["Items"]}
    untouched = {k: v for k, v in after.items() if v["hour"] not in late_hours}
    assert untouched == {k: v for k, v in before.items() if v["hour"] not in late_hours}

    third = run_aggregation(spark, stream, ledger=runtime.ledger, bucket=archive.bucket, sink=sink)
    assert (third.hours, third.items_written) == ([], 0)
    assert {(i["pk"], i["sk"]): i for i in table.scan(ConsistentRead=True)["Items"]} == after  # nothing changed


def test_a_record_in_two_objects_counts_once(spark, archive, aggregates, moto_endpoint):
    sink, table = aggregates
    config = small_config(max_records=100)
    stream = config.streams[0]
    runtime = archive.runtime(config)
    orders = make_orders(partitions=1, per_partition=200, hours=1, late_share=0.0, bad_share=0.0, seed=3)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    flush_all(archive, runtime, config, [0])
    hour = "2026-11-21T08"
    (original, *_others) = runtime.ledger.committed_objects("orders", hour)
    # Plant a copy of an object under another key, recorded in the ledger as committed.
    planted_key = original.key.replace("+0+", "+0+9")
    archive.s3.copy_object(
        Bucket=archive.bucket, Key=planted_key, CopySource={"Bucket": archive.bucket, "Key": original.key}
    )
    planted = object_to_item(replace(original, key=planted_key, first=original.first + 10**9))
    archive.dynamodb.put_item(TableName=archive.table, Item=_serialize(planted))
    archive.dynamodb.update_item(
        TableName=archive.table,
        Key={"pk": {"S": marks_pk("orders")}, "sk": {"S": hour}},
        UpdateExpression="ADD commits :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )

    report = run_aggregation(spark, stream, ledger=runtime.ledger, bucket=archive.bucket, sink=sink, hours=[hour])

    assert report.duplicates == original.records
    assert_same(
        {k: v for k, v in table_aggregates(table).items() if k[0] == hour},
        {k: v for k, v in expected_aggregates(orders.expected).items() if k[0] == hour},
    )


def test_the_job_entry_point_runs_as_deployed(archive, aggregates, moto_endpoint, tmp_path):
    """``python jobs/aggregate.py`` as the deployed schedule runs it: its own Spark, the tables from
    the environment, the configuration from an S3 object named by ``--config``."""
    _sink, table = aggregates
    config = small_config(max_records=50)
    runtime = archive.runtime(config)
    orders = make_orders(partitions=1, per_partition=100, hours=1, late_share=0.0, bad_share=0.0, seed=13)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    flush_all(archive, runtime, config, [0])
    archive.s3.put_object(Bucket=archive.bucket, Key="assets/config.json", Body=config.runtime_json().encode())
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_CONFIG")},
        "TIDEMARK_BUCKET": archive.bucket,
        "TIDEMARK_LEDGER_TABLE": archive.table,
        "TIDEMARK_AGGREGATES_TABLE": table.name,
        "AWS_ENDPOINT_URL": moto_endpoint,
        "PYSPARK_PYTHON": sys.executable,
    }
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "jobs" / "aggregate.py"),
            *("--stream", "orders", "--tasks", "2", "--config", f"s3://{archive.bucket}/assets/config.json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["records"] == 100 and summary["duplicates"] == 0 and summary["still_dirty"] == []
    assert_same(table_aggregates(table), expected_aggregates(orders.expected))


def test_an_hour_that_gets_a_new_object_during_the_run_stays_dirty(spark, archive, aggregates):
    sink, _table = aggregates
    config = small_config(max_records=50)
    runtime = archive.runtime(config)
    orders = make_orders(partitions=1, per_partition=80, hours=1, late_share=0.0, bad_share=0.0, seed=17)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    flush_all(archive, runtime, config, [0])
    ledger = runtime.ledger
    clear = ledger.record_aggregated

    def commit_lands_first(mark):  # an archiver commits another object just before the clear
        archive.dynamodb.update_item(
            TableName=archive.table,
            Key={"pk": {"S": marks_pk("orders")}, "sk": {"S": mark.hour}},
            UpdateExpression="ADD commits :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        return clear(mark)

    ledger.record_aggregated = commit_lands_first  # type: ignore[method-assign]
    report = run_aggregation(spark, config.streams[0], ledger=ledger, bucket=archive.bucket, sink=sink)
    ledger.record_aggregated = clear  # type: ignore[method-assign]

    assert report.cleared == [] and sorted(report.still_dirty) == sorted(report.hours)
    assert all(mark.dirty for mark in ledger.hour_marks("orders"))
    runs = archive.dynamodb.query(
        TableName=archive.table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "RUNS#orders"}},
    )["Items"]
    recorded = json.loads(runs[0]["report"]["S"])
    assert recorded["object_keys"] == report.objects and recorded["still_dirty"] == report.still_dirty


def test_spark_reads_the_archive_root_with_partition_folders_and_hive_hours(spark, archive, aggregates, tmp_path):
    """``--archive-root``: Parquet objects filed under partition-by folders and Hive hour folders
    (``raw/orders/country=US/year=2026/month=11/day=21/hour=08/...``), read by
    ``spark.read.parquet`` from a ``file://`` copy of the bucket; each row's hour comes from the
    ledger's object list, and the aggregates equal a plain computation."""
    sink, table = aggregates
    config = small_config(
        max_records=150,
        format={"type": "parquet"},
        partition_by={"fields": ["_value.country"], "style": "keys_and_values", "hour_folders": "hive"},
    )
    runtime = archive.runtime(config)
    orders = make_orders(partitions=2, per_partition=150, hours=2, late_share=0.05, seed=21)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    flush_all(archive, runtime, config, orders.records)
    for page in archive.s3.get_paginator("list_objects_v2").paginate(Bucket=archive.bucket, Prefix="raw/"):
        for item in page.get("Contents", []):
            path = tmp_path / item["Key"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.s3.get_object(Bucket=archive.bucket, Key=item["Key"])["Body"].read())

    report = run_aggregation(
        spark,
        config.streams[0],
        ledger=runtime.ledger,
        bucket="no-such-bucket",  # everything comes from the archive root
        sink=sink,
        archive_root=f"file://{tmp_path}",
    )

    assert all("/country=" in key and "/year=2026/month=11/" in key for key in report.objects)
    assert report.readers == {"spark-parquet": len(report.objects)}
    assert report.duplicates == 0 and report.records == sum(1 for e in orders.expected if e.hour)
    assert report.still_dirty == []
    assert_same(table_aggregates(table), expected_aggregates(orders.expected))


def test_a_backfill_that_dies_halfway_is_redone_by_the_next_scheduled_run(spark, archive, aggregates):
    """Issue 30, finding 13. A metric redefined, then a backfill (``hours``) that crashes at its
    second write: some items carry the new definition, some the old. Failing first: the hours'
    marks were clean, the next scheduled run planned nothing, and the mix stayed for good."""
    sink, table = aggregates
    config = small_config(max_records=120)
    stream = config.streams[0]
    runtime = archive.runtime(config)
    orders = make_orders(partitions=2, per_partition=200, hours=2, late_share=0.0, bad_share=0.0, seed=13)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    flush_all(archive, runtime, config, orders.records)
    first = run_aggregation(spark, stream, ledger=runtime.ledger, bucket=archive.bucket, sink=sink, tasks=2)
    assert first.cleared and not any(mark.dirty for mark in runtime.ledger.hour_marks("orders"))

    class Crash(BaseException):
        """The driver dying mid-write (an error the run handles fails only its hour)."""

    writes: list[str] = []
    replace_hour = sink.replace_hour

    def crash_at_the_second_write(*args, **kwargs):
        writes.append(args[2])
        if len(writes) == 2:
            raise Crash
        return replace_hour(*args, **kwargs)

    sink.replace_hour = crash_at_the_second_write  # type: ignore[method-assign]
    with pytest.raises(Crash):
        run_aggregation(spark, stream, ledger=runtime.ledger, bucket=archive.bucket, sink=sink, hours=first.hours)
    sink.replace_hour = replace_hour  # type: ignore[method-assign]
    assert sorted(mark.hour for mark in runtime.ledger.hour_marks("orders") if mark.dirty) == sorted(first.hours)

    scheduled = run_aggregation(spark, stream, ledger=runtime.ledger, bucket=archive.bucket, sink=sink, tasks=2)
    assert sorted(scheduled.hours) == sorted(first.hours) and sorted(scheduled.cleared) == sorted(first.hours)
    assert_same(table_aggregates(table), expected_aggregates(orders.expected))


def test_a_write_that_fails_fails_only_its_hour_which_the_next_run_rewrites(spark, archive, aggregates):
    """DynamoDB refuses one hour's write (an error the run handles, unlike the driver dying):
    that hour is reported failed and left dirty, every other hour is written and cleared, and
    the next run rewrites the failed hour whole."""
    sink, table = aggregates
    config = small_config(max_records=120)
    stream = config.streams[0]
    runtime = archive.runtime(config)
    orders = make_orders(partitions=2, per_partition=150, hours=3, late_share=0.0, bad_share=0.0, seed=17)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    flush_all(archive, runtime, config, orders.records)
    hours = sorted(mark.hour for mark in runtime.ledger.hour_marks("orders"))
    assert len(hours) >= 3
    replace_hour = sink.replace_hour

    def refuse_the_second_hour(stream_name, aggregation, hour, rows, run_id, **options):
        if hour == hours[1]:
            raise ClientError({"Error": {"Code": "ValidationException", "Message": "refused"}}, "BatchWriteItem")
        return replace_hour(stream_name, aggregation, hour, rows, run_id, **options)

    sink.replace_hour = refuse_the_second_hour  # type: ignore[method-assign]
    report = run_aggregation(spark, stream, ledger=runtime.ledger, bucket=archive.bucket, sink=sink, tasks=2)
    sink.replace_hour = replace_hour  # type: ignore[method-assign]
    assert list(report.failed) == [hours[1]]
    assert "writing aggregation 'orders_by_product'" in report.failed[hours[1]] and "refused" in report.failed[hours[1]]
    assert sorted(report.cleared) == [hour for hour in hours if hour != hours[1]]
    assert [mark.hour for mark in runtime.ledger.hour_marks("orders") if mark.dirty] == [hours[1]]
    rerun = run_aggregation(spark, stream, ledger=runtime.ledger, bucket=archive.bucket, sink=sink, tasks=2)
    assert rerun.hours == [hours[1]] and rerun.cleared == [hours[1]] and not rerun.failed
    assert_same(table_aggregates(table), expected_aggregates(orders.expected))
