"""The demo's last step: the PySpark aggregation job on ``local[2]`` against the embedded stack,
then its results read back from DynamoDB and cross-checked against the produced records."""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson

from tidemark.config.model import StreamConfig
from tidemark.embedded.aws import LocalAws
from tidemark.exceptions import TidemarkError
from tidemark.verify import ExpectedRecord


class AggregationUnavailableError(TidemarkError):
    """PySpark cannot run here (no Java)."""


def plain_counts(expected: Iterable[ExpectedRecord], group_by: list[str]) -> Counter[tuple[Any, ...]]:
    """Records per (hour, group...) computed in plain Python from what was produced; the job
    skips tombstones (they have no value to aggregate), and so does this."""
    counts: Counter[tuple[Any, ...]] = Counter()
    for item in expected:
        if item.hour is not None and item.value is not None:
            value = orjson.loads(item.value)
            counts[(item.hour, *(value.get(column) for column in group_by))] += 1
    return counts


def run_demo_aggregation(
    aws: LocalAws, stream: StreamConfig, expected: list[ExpectedRecord], top: int = 5
) -> dict[str, Any]:
    if shutil.which("java") is None:
        raise AggregationUnavailableError(
            "the aggregation step needs Java for PySpark (e.g. apt-get install openjdk-17-jre-headless); "
            "or pass --no-aggregate"
        )
    from jobs.aggregation.job import run_aggregation
    from jobs.aggregation.session import local_session
    from jobs.aggregation.sink import AggregateSink, aggregates_table_schema
    from tidemark.ledger.dynamodb import DynamoDBLedger

    table = f"{aws.table}-aggregates"
    dynamodb = aws.dynamodb()
    with contextlib.suppress(dynamodb.exceptions.ResourceInUseException):
        dynamodb.create_table(**aggregates_table_schema(table))
    spark = local_session("tidemark-demo-aggregate")
    try:
        report = run_aggregation(
            spark,
            stream,
            ledger=DynamoDBLedger(aws.table, client=dynamodb),
            bucket=aws.bucket,
            sink=AggregateSink(table, resource=_resource(aws)),
        )
    finally:
        spark.stop()
    items = _resource(aws).Table(table).scan(ConsistentRead=True)["Items"]
    checks = {}
    for aggregation in stream.aggregations:
        counters = [
            name for name, expression in aggregation.metrics.items() if expression.replace(" ", "") == "count(*)"
        ]
        if not counters:
            continue
        stored = Counter(
            {
                (item["hour"], *(item["group"][c] for c in aggregation.group_by)): int(item["metrics"][counters[0]])
                for item in items
                if item["aggregation"] == aggregation.name
            }
        )
        checks[aggregation.name] = stored == plain_counts(expected, aggregation.group_by)
    latest = max((item["hour"] for item in items), default="")
    rows = sorted(
        (item for item in items if item["hour"] == latest),
        key=lambda item: -float(next(iter(item["metrics"].values()), 0)),
    )[:top]
    return {
        "run": report.summary(),
        "items": len(items),
        "counts_match": checks,
        "sample": [
            {
                "hour": item["hour"],
                "aggregation": item["aggregation"],
                "group": dict(item["group"]),
                "metrics": {k: float(v) for k, v in item["metrics"].items()},
            }
            for item in rows
        ],
    }


def _resource(aws: LocalAws) -> Any:
    import boto3

    return boto3.resource("dynamodb", **aws.settings())
