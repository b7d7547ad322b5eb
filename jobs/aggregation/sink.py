"""Aggregates into DynamoDB as full-value overwrites, so a rerun converges to the same table.

One item per (stream, aggregation, hour, group): ``pk = AGG#<stream>#<aggregation>#<hour>``,
``sk = <group>`` as a JSON object of the group's values (``{"product_id":"p-001"}``; ``{}``
without group-by columns), so no two groups can share a key; a group whose JSON exceeds the
1,024 bytes of a sort key is keyed ``sha256:<digest of its JSON>`` instead, its JSON in the
item's ``group_key`` (every item has it) and its values in ``group``; ``utc_offsets`` says which
UTC offsets the (local) hour covers, two for the hour that repeats when clocks go back. An hour's items are
rewritten whole (``PutItem``, never ``ADD``), and groups of that hour that are no longer in the
result are deleted, so the hour's items are always exactly the latest computation. boto3's
batch writer sends 25-item batches and resends unprocessed items.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import boto3
import orjson

from tidemark.ledger.dynamodb import pk_sk_table_schema


def aggregates_table_schema(table_name: str) -> dict[str, Any]:
    """``CreateTable`` arguments for the aggregates table (same key shape as the ledger)."""
    return pk_sk_table_schema(table_name)


def aggregate_pk(stream: str, aggregation: str, hour: str) -> str:
    return f"AGG#{stream}#{aggregation}#{hour}"


def group_text(group: Mapping[str, Any]) -> str:
    """The group as JSON (``{"product_id":"p-001"}``), decimals as their text."""
    return orjson.dumps(dict(group), default=str).decode()


MAX_SORT_KEY_BYTES = 1_024  # DynamoDB's limit on a sort key
DIGEST_PREFIX = "sha256:"  # never the start of a group's JSON (an object: "{")


def group_key(group: Mapping[str, Any]) -> str:
    """The item's sort key: the group's JSON, or, beyond 1,024 bytes of UTF-8 (DynamoDB's
    sort key limit), ``sha256:<hex digest of that JSON>`` (the whole group stays in the item)."""
    text = group_text(group)
    data = text.encode()
    return text if len(data) <= MAX_SORT_KEY_BYTES else DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


DYNAMODB_MAX_NUMBER = Decimal("9.9999999999999999999999999999999999999E+125")
DYNAMODB_MIN_NUMBER = Decimal("1E-130")  # smallest magnitude other than 0
DYNAMODB_DIGITS = 38


def _decimal(value: Decimal, text: str) -> Decimal | str:
    """A number DynamoDB can store as it is, or its text: NaN, infinities, magnitudes beyond
    1e126 or below 1e-130 (other than 0), more than 38 significant digits."""
    if not value.is_finite():
        return text
    if value.is_zero():
        return Decimal(0)
    digits = len("".join(map(str, value.as_tuple().digits)).strip("0"))  # significant (normalize() rounds)
    if not DYNAMODB_MIN_NUMBER <= abs(value) <= DYNAMODB_MAX_NUMBER or digits > DYNAMODB_DIGITS:
        return text
    return value


def _number(value: Any) -> Any:
    """A value DynamoDB can store: floats and decimals as Decimal; NaN, infinities and numbers
    beyond DynamoDB's range (either end) or precision as text (never a crash halfway through an
    hour's write)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return _decimal(Decimal(value), str(value)) if value else 0
    if isinstance(value, float):
        return _decimal(Decimal(repr(value)) if math.isfinite(value) else Decimal("NaN"), repr(value))
    if isinstance(value, Decimal):
        return _decimal(value, str(value))
    if isinstance(value, list | tuple):
        return [_number(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _number(item) for key, item in value.items()}
    return str(value)  # dates from Spark: their text


def _offset_text(offset: timedelta) -> str:
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def utc_offsets(hour: str, zone: str) -> list[str]:
    """The UTC offsets of the real hours an event-hour label stands for in ``zone`` (the stream's
    ``event_time.timezone``): one, or two for the local hour that repeats when clocks go back
    (``["-04:00", "-05:00"]`` for ``2026-11-01T01`` in America/New_York: its items aggregate both
    real hours)."""
    tz = ZoneInfo(zone)
    start = datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=tz)
    offsets: list[str] = []
    for minute in (0, 15, 30, 45):  # zones change offset on the hour or the half hour (Lord Howe)
        for fold in (0, 1):
            local = start.replace(minute=minute, fold=fold)
            if local.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != local.replace(tzinfo=None):
                continue  # a local time the clocks skip: no instant has it
            text = _offset_text(local.utcoffset() or timedelta(0))
            if text not in offsets:
                offsets.append(text)
    return offsets


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
        *,
        zone: str = "UTC",
    ) -> int:
        """Make the hour's items exactly ``rows`` (``(group, metrics)`` pairs); returns items put.
        Each item says which UTC offsets its hour covers in ``zone`` (:func:`utc_offsets`)."""
        offsets = utc_offsets(hour, zone)
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
                        "group_key": group_text(group),
                        "stream": stream,
                        "aggregation": aggregation,
                        "hour": hour,
                        "group": {column: _number(value) for column, value in group.items()},
                        "metrics": {name: _number(value) for name, value in metrics.items()},
                        "utc_offsets": offsets,
                        "run_id": run_id,
                    }
                )
            for stale in existing - written:
                batch.delete_item(Key={"pk": pk, "sk": stale})
        return len(written)
