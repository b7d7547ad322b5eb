"""The aggregation job's readers over every archive format, in Spark local mode: the same orders
archived as JSON Lines (gzip, zstd, none), Parquet (plain and with a value schema), Avro (plain
and typed), CSV (the value column, and value.<path> columns), and bytes give equal records --
whole rows, not counts -- and equal aggregates, through the Arrow reader (objects in moto) and
through Spark's own readers over a ``file://`` archive root (objects in a directory).

One Arrow read holds every variant at once: each is archived under its own position epoch
(``+e<n>+`` in its keys), so a variant's records are the rows of its epoch. Every object ends
with a tombstone (a null value), which both readers skip: it has no value to aggregate -- but
in CSV objects of ``value.<path>`` columns only, which cannot tell a tombstone from a record
lacking every field (those are archived without tombstones here; the unit tests pin what they
read).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import functions as F

from jobs.aggregation.reader import ObjectStore, value_schema
from jobs.aggregation.transforms import Records, aggregate, read_records
from tests.support.format_objects import VARIANTS, make_archived_orders, store
from tidemark.config.model import AggregationConfig
from tidemark.eventtime import iso_utc

ORDERS = make_archived_orders(partitions=2, hours=2, per_object=4, tombstones=1)
EPOCHS = {name: index + 1 for index, name in enumerate(VARIANTS)}
NATIVE = 100  # added to the epochs of the rows Spark's readers read, to aggregate both at once
BY_PRODUCT = AggregationConfig(
    name="by_product",
    group_by=["epoch", "product_id"],
    metrics={
        "order_count": "count(*)",
        "revenue": "round(sum(price * quantity), 6)",
        "distinct_customers": "count(distinct customer_id)",
        "gifts": "sum(cast(gift as int))",
        "notes": "count(note)",
        "first_event": "min(event_time)",
    },
)


@pytest.fixture(scope="module")
def archived() -> dict[str, list[tuple[str, str, bytes]]]:
    """Every variant's objects, each under its own epoch."""
    return {
        name: (ORDERS if variant.tells_tombstones else ORDERS.without_tombstones()).objects(variant, epoch=EPOCHS[name])
        for name, variant in VARIANTS.items()
    }


@pytest.fixture
def in_moto(archive, archived) -> str:
    for objects in archived.values():
        for key, _hour, body in objects:
            archive.s3.put_object(Bucket=archive.bucket, Key=key, Body=body)
    return f"s3://{archive.bucket}"


@pytest.fixture
def on_disk(tmp_path: Path, archived) -> str:
    for objects in archived.values():
        store(tmp_path, objects)
    return f"file://{tmp_path}"


def read(spark: Any, root: str, archived: dict[str, list[tuple[str, str, bytes]]], names: list[str], *, native: bool):
    objects = [(key, hour) for name in names for key, hour, _body in archived[name]]
    source = ObjectStore(root)
    values = value_schema((key, source.read(key)) for key, _hour in objects)
    records = read_records(spark, objects, root, tasks=4, values=values, native=native)
    return records._replace(frame=records.frame.cache())  # collected, then aggregated


def by_epoch(records: Records) -> dict[int, list[tuple[Any, ...]]]:
    """Each epoch's rows, without the epoch, sorted: what one variant archived."""
    names = records.frame.columns
    rows: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for row in records.frame.collect():
        fields = row.asDict(recursive=True)
        rows[fields["epoch"]].append(tuple(fields[name] for name in names if name != "epoch"))
    return {epoch: sorted(items, key=repr) for epoch, items in rows.items()}


def aggregates_by_epoch(frame: Any) -> dict[int, set[tuple[Any, ...]]]:
    found: dict[int, set[tuple[Any, ...]]] = defaultdict(set)
    for row in aggregate(frame, BY_PRODUCT).frame.collect():
        fields = row.asDict()
        found[fields.pop("epoch")].add(tuple(sorted(fields.items())))
    return found


def expected_aggregates() -> set[tuple[Any, ...]]:
    """by_product computed in plain Python from the frames that were archived."""
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], int]]] = defaultdict(list)
    for (_partition, hour), frames in ORDERS.frames.items():
        for frame in frames:
            if frame.value is None:  # a tombstone: skipped
                continue
            order = orjson.loads(frame.value)
            groups[(hour, order["product_id"])].append((order, frame.event_time_ms))
    return {
        tuple(
            sorted(
                {
                    "hour": hour,
                    "product_id": product,
                    "order_count": len(orders),
                    "revenue": round(sum(o["price"] * o["quantity"] for o, _ms in orders), 6),
                    "distinct_customers": len({o["customer_id"] for o, _ms in orders}),
                    "gifts": sum(1 for o, _ms in orders if o["gift"]),
                    "notes": sum(1 for o, _ms in orders if o.get("note") is not None),
                    "first_event": iso_utc(min(ms for _o, ms in orders)),
                }.items()
            )
        )
        for (hour, product), orders in groups.items()
    }


def test_every_format_gives_the_same_records_and_aggregates_through_both_readers(spark, in_moto, on_disk, archived):
    arrow = read(spark, in_moto, archived, list(VARIANTS), native=False)
    assert arrow.readers == {"arrow": 4 * len(VARIANTS)}
    rows = by_epoch(arrow)
    reference = rows[EPOCHS["jsonl-gzip"]]
    assert len(reference) == 16 and len({(row[1], row[2]) for row in reference}) == 16  # (partition, offset)
    for name, epoch in EPOCHS.items():
        assert rows[epoch] == reference, name

    # Spark's readers for what they read here (JSON Lines gzip/none, Parquet, CSV gzip); the
    # rest through the Arrow reader in the same run, from the same root.
    mixed = ["jsonl-gzip", "jsonl-none", "parquet", "csv-gzip", "avro", "jsonl-zstd", "bytes"]
    first = read(spark, on_disk, archived, mixed, native=True)
    assert first.readers == {"spark-json": 8, "spark-parquet": 4, "spark-csv": 4, "arrow": 12}
    # A value schema's struct (Parquet) and value.<path> columns (CSV, another column order).
    typed = ["parquet-typed", "csv-paths-gzip", "avro-typed", "csv-paths"]
    second = read(spark, on_disk, archived, typed, native=True)
    assert second.readers == {"spark-parquet": 4, "spark-csv": 4, "arrow": 8}
    for records in (first, second):
        assert records.frame.schema.simpleString() == arrow.frame.schema.simpleString()
    native_rows = {**by_epoch(first), **by_epoch(second)}
    assert set(native_rows) == {EPOCHS[name] for name in mixed + typed}
    for epoch, found in native_rows.items():
        assert found == rows[epoch], epoch

    # Aggregates of every variant through both readers in one job (native rows as epoch + 100).
    native = first.frame.unionByName(second.frame).withColumn("epoch", F.col("epoch") + NATIVE)
    found = aggregates_by_epoch(arrow.frame.unionByName(native))
    assert set(found) == set(EPOCHS.values()) | {NATIVE + epoch for epoch in native_rows}
    wanted = expected_aggregates()
    for epoch, aggregates in found.items():
        assert aggregates == wanted, epoch


def test_parquet_objects_whose_schemas_do_not_merge_go_through_the_arrow_reader(spark, on_disk, archived):
    """A string value in some objects and a struct in others (a value schema declared between
    them): Spark cannot merge the schemas, so those objects are read one by one with Arrow."""
    records = read(spark, on_disk, archived, ["parquet", "parquet-typed"], native=True)
    assert records.readers == {"arrow": 8}
    rows = by_epoch(records)
    assert rows[EPOCHS["parquet"]] == rows[EPOCHS["parquet-typed"]]
