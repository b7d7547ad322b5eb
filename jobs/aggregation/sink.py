"""Aggregates into DynamoDB as full-value overwrites, so a rerun converges to the same table.

One item per (stream, aggregation, hour, group): ``pk = AGG#<stream>#<aggregation>#<hour>``,
``sk = <group>`` as a JSON object of the group's values (``{"product_id":"p-001"}``; ``{}``
without group-by columns), so no two groups can share a key. An hour's items are
rewritten whole (``PutItem``, never ``ADD``), and groups of that hour that are no longer in the
result are deleted, so the hour's items are always exactly the latest computation. boto3's
batch writer sends 25-item batches and resends unprocessed items.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import boto3
import orjson

from tidemark.ledger.dynamodb import pk_sk_table_schema


def aggregates_table_schema(table_name: str) -> dict[str, Any]:
    """``CreateTable`` arguments for the aggregates table (same key shape as the ledger)."""
    return pk_sk_table_schema(table_name)


def aggregate_pk(stream: str, aggregation: str, hour: str) -> str:
    return f"AGG#{stream}#{aggregation}#{hour}"


def group_key(group: Mapping[str, Any]) -> str:
    return orjson.dumps(dict(group), default=str).decode()


DYNAMODB_MAX_NUMBER = 9.9999999999999999999999999999999999999e125


def _number(value: Any) -> Any:
    """A value DynamoDB can store: floats as Decimal; NaN, infinities and numbers beyond
    DynamoDB's range as text (never a crash halfway through an hour's write)."""
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value if not isinstance(value, int) or abs(value) <= DYNAMODB_MAX_NUMBER else str(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) and abs(value) <= DYNAMODB_MAX_NUMBER else repr(value)
    if isinstance(value, list | tuple):
        return [_number(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _number(item) for key, item in value.items()}
    return str(value)  # dates, decimals from Spark: their text


class AggregateSink:
    def __init__(self, table_name: str, *, resource: Any | None = None) -> None:
        self.table = (resource or boto3.resource("dynamodb")).Table(table_name)

    def replace_hour(
        self,
        stream: str,
        aggregation: str,
        hour: str,
        rows: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]],
        run_id: str,
    ) -> int:
        """Make the hour's items exactly ``rows`` (``(group, metrics)`` pairs); returns items put."""
        pk = aggregate_pk(stream, aggregation, hour)
        existing: set[str] = set()
        query: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": pk},
            "ProjectionExpression": "sk",
            "ConsistentRead": True,
        }
        while True:
            page = self.table.query(**query)
            existing.update(str(item["sk"]) for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        written: set[str] = set()
        with self.table.batch_writer(overwrite_by_pkeys=["pk", "sk"]) as batch:
            for group, metrics in rows:
                sk = group_key(group)
                written.add(sk)
                batch.put_item(
                    Item={
                        "pk": pk,
                        "sk": sk,
                        "stream": stream,
                        "aggregation": aggregation,
                        "hour": hour,
                        "group": {column: _number(value) for column, value in group.items()},
                        "metrics": {name: _number(value) for name, value in metrics.items()},
                        "run_id": run_id,
                    }
                )
            for stale in existing - written:
                batch.delete_item(Key={"pk": pk, "sk": stale})
        return len(written)
