"""The job's pure DataFrame transforms on local Spark, compared as whole DataFrames."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Row

from jobs.aggregation.transforms import AggregationError, aggregate, dedupe, duplicate_count
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

    result = aggregate(df, config).frame

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
    result = aggregate(df, AggregationConfig(name="totals", metrics={"revenue": "sum(price)"})).frame
    assert result.collect() == [Row(hour=H8, revenue=5.0)]


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
GUARDED = AggregationConfig(
    name="sums",
    metrics={
        "total": "sum(quantity)",
        "distinct_total": "sum(DISTINCT quantity)",
        "positive": "sum(quantity) FILTER (WHERE quantity > 0)",
        "exact": "sum(cast(quantity as decimal(38,0)))",
    },
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.integers(INT64_MIN, INT64_MAX),
            st.integers(2**61, INT64_MAX),
            st.integers(INT64_MIN, -(2**61)),
            st.integers(-100, 100),
            st.none(),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_integer_sums_are_exact_or_raise_never_wrap(spark, quantities):
    """Generated long values, summed four ways, against Python's exact sums: each guarded sum
    equals the exact one when it fits int64, and the query raises (``tidemark: sum overflow``)
    when any does not -- never Spark's wrapped figure. ``sum(cast(... as decimal(38,0)))``, the
    error's advice, is exact either way."""
    df = records(spark, [(H8, 0, index, order("a", 1.0, quantity, "c")) for index, quantity in enumerate(quantities)])
    present = [quantity for quantity in quantities if quantity is not None]
    exact = {
        "total": sum(present) if present else None,
        "distinct_total": sum(set(present)) if present else None,
        "positive": sum(q for q in present if q > 0) if any(q > 0 for q in present) else None,
    }
    fits = all(value is None or INT64_MIN <= value <= INT64_MAX for value in exact.values())
    frame = aggregate(df, GUARDED).frame
    if not fits:
        with pytest.raises(Exception, match="tidemark: sum overflow"):
            frame.collect()
        return
    (row,) = frame.collect()
    assert {name: row[name] for name in exact} == exact
    assert row["exact"] == (sum(present) if present else None)
    assert dict(frame.dtypes)["total"] == "bigint"  # the figure's type is sum()'s own


def test_a_field_no_record_has_is_null_and_reported(spark):
    """``refund`` and ``reason`` are in no record: the first UNRESOLVED_COLUMN adds ``reason``
    as a struct of ``code``, then ``reason.at`` is FIELD_NOT_FOUND in it and is added too."""
    df = records(spark, [(H8, 0, 1, order("a", 2.5, 2, "c1"))])
    config = AggregationConfig(
        name="refunds",
        group_by=["reason.code"],
        metrics={"refunds": "sum(refund)", "n": "count(*)", "latest": "max(reason.at)"},
    )
    result = aggregate(df, config)
    assert sorted(result.absent) == ["reason.at", "reason.code", "refund"]
    assert [row.asDict() for row in result.frame.collect()] == [
        {"hour": H8, "reason.code": None, "refunds": None, "n": 1, "latest": None}
    ]


def test_an_aggregation_the_types_cannot_support_names_its_metric(spark):
    df = records(spark, [(H8, 0, 1, order("a", 2.5, 2, "c1"))])
    config = AggregationConfig(name="odd", metrics={"n": "count(*)", "bad": "sum(product_id.x)"})
    with pytest.raises(
        AggregationError, match=r"aggregation 'odd', metric bad = sum\(product_id.x\): \[INVALID_EXTRACT"
    ):
        aggregate(df, config)
