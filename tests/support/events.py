"""The one helper that loads sample events from events/ and builds ESM-shaped events."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tidemark.records.model import Record

EVENTS_DIR = Path(__file__).resolve().parents[2] / "events"
CLUSTER_ARN = "arn:aws:kafka:us-east-1:123456789012:cluster/tidemark-demo/4f3e2d1c-0b9a-4c8d-9e7f-6a5b4c3d2e1f-1"


def load_event(name: str) -> dict[str, Any]:
    """A sample event from ``events/<name>.json`` (the same files ``sam local invoke -e`` uses)."""
    with (EVENTS_DIR / f"{name}.json").open(encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def esm_record(record: Record) -> dict[str, Any]:
    """A record exactly as the MSK event source mapping delivers it (base64, header byte arrays)."""
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "timestampType": "CREATE_TIME",
        "key": None if record.key is None else base64.b64encode(record.key).decode("ascii"),
        "value": base64.b64encode(record.value).decode("ascii"),
        "headers": [{name: list(data)} for name, data in record.headers],
    }


def msk_event(records: Iterable[Record], *, self_managed: bool = False) -> dict[str, Any]:
    """Group records by ``topic-partition`` into an MSK (or self-managed Kafka) ESM event."""
    template = load_event("self-managed-orders" if self_managed else "msk-orders")
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(f"{record.topic}-{record.partition}", []).append(esm_record(record))
    return {**{k: v for k, v in template.items() if k != "records"}, "records": groups}
