"""The one helper that loads sample events from events/ and builds ESM-shaped events."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tidemark.records.esm import EventSource, build_event
from tidemark.records.kinesis_esm import KinesisSource, build_kinesis_event
from tidemark.records.model import Record
from tidemark.sources import KINESIS

EVENTS_DIR = Path(__file__).resolve().parents[2] / "events"


def load_event(name: str) -> dict[str, Any]:
    """A sample event from ``events/<name>.json`` (the same files ``sam local invoke -e`` uses)."""
    with (EVENTS_DIR / f"{name}.json").open(encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def source_of(template: dict[str, Any]) -> EventSource:
    """The constant part of a sample event (its source, ARN and bootstrap servers)."""
    return EventSource(
        bootstrap_servers=template["bootstrapServers"],
        event_source=template["eventSource"],
        event_source_arn=template.get("eventSourceArn"),
    )


def msk_event(records: Iterable[Record], *, self_managed: bool = False) -> dict[str, Any]:
    """Group records by ``topic-partition`` into an MSK (or self-managed Kafka) ESM event."""
    return build_event(records, source_of(load_event("self-managed-orders" if self_managed else "msk-orders")))


def kinesis_event(records: Iterable[Record]) -> dict[str, Any]:
    """A Kinesis ESM event (AWS's documented shape) from the stream of ``events/kinesis-orders.json``."""
    template = load_event("kinesis-orders")["Records"][0]
    return build_kinesis_event(records, KinesisSource(template["eventSourceARN"], template["invokeIdentityArn"]))


def event_of(records: Iterable[Record], kind: str) -> dict[str, Any]:
    """The ESM event a mapping of source ``kind`` delivers ``records`` in."""
    return kinesis_event(records) if kind == KINESIS else msk_event(records)
