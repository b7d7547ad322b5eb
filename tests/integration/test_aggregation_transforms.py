"""The job's pure DataFrame transforms on local Spark, compared as whole DataFrames."""

from __future__ import annotations

import orjson
from pyspark.sql import Row

from jobs.aggregation.reader import RECORDS_SCHEMA
from jobs.aggregation.transforms import aggregate, dedupe, parse_values, value_schema
from tidemark.config.model import AggregationConfig

H7, H8 = "2026-11-21T07", "2026-11-21T08"


def records(spark, rows):
    return spark.createDataFrame(
        [
            (hour, partition, offset, "2026-11-21T08:00:00.000Z", orjson.dumps(value).decode())
            for hour, partition, offset, value in rows
        ],
        RECORDS_SCHEMA,
    )


def order(product: str, price: float, quantity: int, customer: str) -> dict:
    return {"product_id": product, "price": price, "quantity": quantity, "customer_id": customer}


def test_dedupe_keeps_one_row_per_partition_and_offset(spark):
    df = records(
        spark,
        [(H8, 0, 1, order("a", 1, 1, "c1")), (H8, 0, 1, order("a", 1, 1, "c1")), (H8, 1, 1, order("a", 1, 1, "c1"))],
    )
    assert sorted((r.partition, r.offset) for r in dedupe(df).collect()) == [(0, 1), (1, 1)]
    assert dedupe(df).columns == df.columns


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
    parsed = parse_values(df, value_schema(spark, df))
    config = AggregationConfig(
        name="orders_by_product",
        group_by=["product_id"],
        metrics={
            "order_count": "count(*)",
            "revenue": "sum(price * quantity)",
            "distinct_customers": "count(distinct customer_id)",
        },
    )

    result = aggregate(parsed, config)

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
    parsed = parse_values(df, value_schema(spark, df))
    result = aggregate(parsed, AggregationConfig(name="totals", metrics={"revenue": "sum(price)"}))
    assert result.collect() == [Row(hour=H8, revenue=5.0)]
