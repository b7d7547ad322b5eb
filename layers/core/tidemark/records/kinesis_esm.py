"""Build Kinesis event source mapping events from records: the inverse of ``kinesis.py``.

The embedded Kinesis mapping, the tests and the benchmarks deliver records through this one
encoder, so every local run sees the shape Lambda delivers (AWS's documented Kinesis event):
``{"Records": [{"kinesis": {...}, "eventSource": "aws:kinesis", "eventID": "<shard>:<seq>", ...}]}``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tidemark.records.kinesis import EVENT_SOURCE
from tidemark.records.model import Record

# What one record adds to the invocation payload beyond its base64 data: field names, ARNs,
# the sequence number twice and punctuation (measured on documented events, rounded up).
RECORD_OVERHEAD_BYTES = 520


@dataclass(frozen=True, slots=True)
class KinesisSource:
    """The fields every record of one Kinesis mapping carries."""

    stream_arn: str
    invoke_identity_arn: str = "arn:aws:iam::123456789012:role/tidemark-archiver"

    @property
    def region(self) -> str:
        return self.stream_arn.split(":")[3]


def arrival_seconds(timestamp_ms: int) -> float:
    """Milliseconds as the mapping writes ``approximateArrivalTimestamp``: seconds with a fraction."""
    return timestamp_ms / 1000  # the nearest double: its shortest repr is the exact milliseconds


def encode_kinesis_record(record: Record, source: KinesisSource) -> dict[str, Any]:
    """One record exactly as the Kinesis event source mapping delivers it. Kinesis has no
    tombstones: a record's data is always bytes (``ValueError`` for a null value)."""
    if record.value is None:
        raise ValueError(f"sequence number {record.offset}: a Kinesis record always has data (no tombstones)")
    sequence = str(record.offset)
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": (record.key or b"").decode("utf-8"),
            "sequenceNumber": sequence,
            "data": base64.b64encode(record.value).decode("ascii"),
            "approximateArrivalTimestamp": arrival_seconds(record.timestamp_ms),
        },
        "eventSource": EVENT_SOURCE,
        "eventVersion": "1.0",
        "eventID": f"{record.partition}:{sequence}",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": source.invoke_identity_arn,
        "awsRegion": source.region,
        "eventSourceARN": source.stream_arn,
    }


def kinesis_payload_size(record: Record) -> int:
    """Bytes ``record`` adds to an invocation payload (base64 grows data by 4/3)."""
    return RECORD_OVERHEAD_BYTES + len(record.key or b"") + 4 * ((len(record.value or b"") + 2) // 3)


def build_kinesis_event(records: Iterable[Record], source: KinesisSource) -> dict[str, Any]:
    """One event holding ``records`` in delivery order (one shard per event, as Lambda sends)."""
    return {"Records": [encode_kinesis_record(record, source) for record in records]}
