"""The job's pure DataFrame transforms on local Spark, compared as whole DataFrames."""

from __future__ import annotations

from pyspark.sql import Row

from jobs.aggregation.transforms import aggregate, dedupe, duplicate_count
from tidemark.config.model import AggregationConfig

H7, H8 = "2026-11-21T07", "2026-11-21T08"
SCHEMA = (
    "hour string, epoch int, partition int, offset long, event_time string, "
    "product_id string, price double, quantity long, customer_id string"
)


def records(spark, rows, epoch: int = 0):
    """Records as the reader returns them: the envelope fields, then the value's fields."""
    return spark.createDataFrame(
        [
            (hour, epoch, partition, offset, "2026-11-21T08:00:00.000Z", *value)
            for hour, partition, offset, value in rows
        ],
        SCHEMA,
    )


def order(product: str, price: float, quantity: int, customer: str) -> tuple:
    return (product, price, quantity, customer)


def test_dedupe_keeps_one_row_per_partition_and_offset(spark):
    same = order("a", 1.0, 1, "c1")
    df = records(spark, [(H8, 0, 1, same), (H8, 0, 1, same), (H8, 0, 1, same), (H8, 1, 1, same), (H8, 0, 2, same)])
    assert sorted((r.partition, r.offset) for r in dedupe(df).collect()) == [(0, 1), (0, 2), (1, 1)]
    assert dedupe(df).columns == df.columns
    assert duplicate_count(df) == 2
    assert duplicate_count(dedupe(df)) == 0


def test_dedupe_keeps_records_of_a_later_epoch_at_the_same_offsets(spark):
    """A recreated topic repeats offsets; its records are other records (DESIGN.md, epochs)."""
    same = order("a", 1.0, 1, "c1")
    rows = [(H8, 0, 1, same), (H8, 0, 2, same)]
    df = records(spark, rows).unionByName(records(spark, rows, epoch=1))
    assert sorted((r.epoch, r.offset) for r in dedupe(df).collect()) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert duplicate_count(df) == 0


def test_aggregate_computes_the_configured_metrics_per_hour_and_group(spark):
    df = records(
        spark,
        [
            (H8, 0, 1, order("a", 2.5, 2, "c1")),
            (H8, 0, 2, order("a", 1.0, 1, "c1")),
            (H8, 1, 7, order("b", 10.0, 3, "c2")),
            (H7, 1, 8, order("a", 4.0, 1, "c3")),
        ],
    )
    config = AggregationConfig(
        name="orders_by_product",
        group_by=["product_id"],
        metrics={
            "order_count": "count(*)",
            "revenue": "sum(price * quantity)",
            "distinct_customers": "count(distinct customer_id)",
        },
    )

    result = aggregate(df, config)

    assert result.columns == ["hour", "product_id", "order_count", "revenue", "distinct_customers"]
    assert sorted(result.collect()) == sorted(
        [
            Row(hour=H8, product_id="a", order_count=2, revenue=6.0, distinct_customers=1),
            Row(hour=H8, product_id="b", order_count=1, revenue=30.0, distinct_customers=1),
            Row(hour=H7, product_id="a", order_count=1, revenue=4.0, distinct_customers=1),
        ]
    )


def test_aggregate_without_group_by_is_one_row_per_hour(spark):
    df = records(spark, [(H8, 0, 1, order("a", 2.0, 1, "c1")), (H8, 0, 2, order("b", 3.0, 1, "c2"))])
    result = aggregate(df, AggregationConfig(name="totals", metrics={"revenue": "sum(price)"}))
    assert result.collect() == [Row(hour=H8, revenue=5.0)]
