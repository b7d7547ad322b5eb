"""``guard_sums``: which ``sum(...)`` of a metric it guards against overflow, and how (text only;
Spark runs the guarded sums in ``tests/integration/test_aggregation_transforms.py``)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import DataType, DecimalType, DoubleType, IntegerType, LongType, StringType

from jobs.aggregation.exact_sums import OVERFLOW, guard_sums

TYPES: dict[str, DataType] = {
    "n": LongType(),
    "i": IntegerType(),
    "big": DecimalType(38, 0),
    "price": DoubleType(),
    "code": StringType(),
    "(a + b) * 2": LongType(),
}


def type_of(argument: str) -> DataType | None:
    return TYPES.get(argument.strip())


def test_an_integer_sum_is_summed_as_a_decimal_and_cast_back_or_raises():
    guarded = guard_sums("sum(n)", type_of)
    assert guarded.startswith("(CASE WHEN sum(CAST((n) AS DECIMAL(38,0))) IS NULL THEN CAST(NULL AS BIGINT) ")
    assert "BETWEEN -9223372036854775808 AND 9223372036854775807 THEN CAST(sum(CAST((n) AS DECIMAL(38,0)))" in guarded
    assert f"ELSE raise_error('{OVERFLOW}: sum(n) is beyond int64; write sum(cast(" in guarded
    assert guard_sums("SUM (i)", type_of).count("raise_error") == 1


def test_a_decimal_sum_raises_when_null_over_values():
    guarded = guard_sums("sum(big)", type_of)
    assert guarded == (
        "(CASE WHEN sum(big) IS NULL AND count(big) > 0 THEN raise_error("
        f"'{OVERFLOW}: sum(big) is beyond 38 digits, more than Spark\\'s decimal (and DynamoDB\\'s number) holds')"
        " ELSE sum(big) END)"
    )


@pytest.mark.parametrize(
    "expression",
    [
        "sum(price)",  # a double: overflows to infinity, stored as its text
        "sum(code)",  # text: Spark casts it to double
        "try_sum(n)",
        "`sum`(n)",
        "concat('sum(n)', code)",
        "sum(n) over (partition by code)",
        "sum(n",  # not SQL: Spark's own error says so
        "count(*)",
        "sum(unknown)",  # no type: Spark's analysis names it
    ],
)
def test_other_sums_and_text_are_left_as_written(expression):
    assert guard_sums(expression, type_of) == expression


def test_distinct_and_filter_are_kept_on_every_aggregate_of_the_rewrite():
    guarded = guard_sums("sum(DISTINCT n) FILTER (WHERE price > 1)", type_of)
    assert "sum(DISTINCT CAST((n) AS DECIMAL(38,0))) FILTER (WHERE price > 1) IS NULL" in guarded
    assert guarded.count("FILTER (WHERE price > 1)") == 4  # three aggregates, and the message naming the sum
    decimal = guard_sums("sum(distinct big) filter (where n > 0)", type_of)
    assert "count(DISTINCT big) filter (where n > 0) > 0" in decimal


def test_every_sum_of_an_expression_is_guarded_and_the_rest_kept():
    guarded = guard_sums("sum(n) / nullif(sum(price), 0) + sum((a + b) * 2) - 'sum(n)'", type_of)
    assert guarded.count("raise_error") == 2
    assert "/ nullif(sum(price), 0) + (CASE" in guarded
    assert guarded.endswith(" - 'sum(n)'")


def test_quotes_in_the_sum_make_a_valid_message_literal():
    guarded = guard_sums("sum(case when code = 'it''s' then n end)", lambda _argument: LongType())
    message = guarded[guarded.index("raise_error(") + len("raise_error(") :]
    assert message.startswith(f"'{OVERFLOW}: sum(case when code = \\'it\\'\\'s\\' then n end) is beyond int64")
