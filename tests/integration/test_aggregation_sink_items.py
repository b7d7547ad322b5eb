"""jobs.aggregation.sink against moto's DynamoDB: every aggregate the job can compute is
stored -- tiny and exact decimal metrics, group keys longer than a sort key may be -- and the
table then holds exactly the items a plain-Python rendering of the rows gives."""

from __future__ import annotations

import hashlib
from decimal import Decimal

import boto3
import orjson
import pytest

from jobs.aggregation.sink import AggregateSink, aggregates_table_schema

HOUR = "2026-11-21T08"


@pytest.fixture
def table(moto_endpoint, archive):
    resource = boto3.resource("dynamodb", endpoint_url=moto_endpoint)
    name = f"{archive.table}-aggregates"
    resource.meta.client.create_table(**aggregates_table_schema(name))
    return AggregateSink(name, resource=resource), resource.Table(name)


def scanned(table) -> dict[str, dict]:
    return {item["sk"]: item for item in table.scan(ConsistentRead=True)["Items"]}


def test_tiny_and_exact_decimal_metrics_are_stored(table):
    """Below DynamoDB's 1e-130 a number cannot be stored (it fails the whole run): text, as
    beyond 1e126; decimals Spark computes (integers beyond int64) stay numbers, exact."""
    sink, items = table
    u64 = Decimal(2**64 - 1)
    rows = [
        ({"p": "a"}, {"tiny": 1e-200, "negative_tiny": -3e-131, "top": u64, "small": 1e-120}),
        ({"p": "b"}, {"tiny": 0.0, "top": Decimal(10**40 + 1), "small": Decimal("1E-140")}),
    ]
    assert sink.replace_hour("orders", "o", HOUR, rows, "run-1") == 2
    found = {sk: item["metrics"] for sk, item in scanned(items).items()}
    assert found == {
        '{"p":"a"}': {"tiny": "1e-200", "negative_tiny": "-3e-131", "top": u64, "small": Decimal("1e-120")},
        '{"p":"b"}': {"tiny": Decimal(0), "top": str(Decimal(10**40 + 1)), "small": "1E-140"},
    }


def test_a_group_longer_than_a_sort_key_is_stored_under_its_digest(table):
    """A group's JSON beyond 1,024 bytes (DynamoDB's sort key limit) is keyed by its SHA-256,
    the whole group kept in the item; a rerun overwrites the same item, and a group that
    vanished is deleted."""
    sink, items = table
    long_group = {"note": "é" * 700}  # 1,400 bytes of UTF-8
    short_group = {"note": "x"}
    rows = [(long_group, {"n": 3}), (short_group, {"n": 1})]
    assert sink.replace_hour("orders", "o", HOUR, rows, "run-1") == 2
    text = orjson.dumps(long_group).decode()
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    found = scanned(items)
    assert set(found) == {digest, '{"note":"x"}'}
    assert found[digest]["group"] == long_group and found[digest]["group_key"] == text
    assert found[digest]["metrics"] == {"n": 3}

    assert sink.replace_hour("orders", "o", HOUR, [(long_group, {"n": 4})], "run-2") == 1
    assert {sk: item["metrics"]["n"] for sk, item in scanned(items).items()} == {digest: 4}
