"""jobs/aggregate.py: the thin main's argument handling."""

from __future__ import annotations

import pytest

from jobs.aggregate import hour_range, load_job_config
from jobs.aggregation.sink import aggregate_pk, group_key
from tidemark.exceptions import ConfigError


def test_hour_range_is_inclusive_and_crosses_days() -> None:
    assert hour_range("2026-11-21T22", "2026-11-22T01") == [
        "2026-11-21T22",
        "2026-11-21T23",
        "2026-11-22T00",
        "2026-11-22T01",
    ]
    assert hour_range("2026-11-21T07", "2026-11-21T07") == ["2026-11-21T07"]


def test_a_backwards_range_is_an_error() -> None:
    with pytest.raises(ConfigError, match="2026-11-21T06 is before 2026-11-21T07"):
        hour_range("2026-11-21T07", "2026-11-21T06")


def test_aggregate_item_keys() -> None:
    assert aggregate_pk("orders", "orders_by_product", "2026-11-21T07") == "AGG#orders#orders_by_product#2026-11-21T07"
    assert group_key({"product_id": "p-001", "region": "eu"}) == '{"product_id":"p-001","region":"eu"}'
    assert group_key({}) == "{}"
    assert group_key({"p": None}) != group_key({"p": "None"})  # no collisions
    assert group_key({"p": "a|b=c"}) != group_key({"p": "a", "b": "c"})


def test_numbers_dynamodb_cannot_hold_are_stored_as_text() -> None:
    from decimal import Decimal

    from jobs.aggregation.sink import _number

    assert _number(2.5) == Decimal("2.5") and _number(7) == 7 and _number(None) is None
    assert [_number(float("nan")), _number(float("inf")), _number(1e300)] == ["nan", "inf", "1e+300"]
    assert _number([1.5, {"x": 2.0}]) == [Decimal("1.5"), {"x": Decimal("2.0")}]


@pytest.mark.parametrize("location", ["s3://", "s3://bucket-only", "s3:///key-only"])
def test_a_config_address_without_bucket_or_key_is_refused(location: str) -> None:
    with pytest.raises(ConfigError, match="is not an s3://bucket/key address"):
        load_job_config(location)
