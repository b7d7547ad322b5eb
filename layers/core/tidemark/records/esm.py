"""Build Kafka event source mapping events from records: the inverse of ``kafka.py``.

The embedded event source mapping, the tests and the benchmarks all deliver records to the
archiver through this one encoder, so every local run sees byte-for-byte the shape Lambda
delivers: records grouped under ``"<topic>-<partition>"``, key and value base64-encoded, each
header a one-entry object holding a list of byte values. A tombstone's value (``None``) is
``"value": null``; a null header value is ``{"<name>": null}`` (AWS has been seen to send ``{}``
instead, which loses the name: ``tidemark.records.kafka`` reads both).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tidemark.records.model import Record

MSK = "aws:kafka"
SELF_MANAGED = "SelfManagedKafka"

# What one record adds to the invocation payload beyond its base64 key and value: field names,
# topic, numbers and punctuation of the JSON encoding (measured on real events, rounded up).
RECORD_OVERHEAD_BYTES = 160


@dataclass(frozen=True, slots=True)
class EventSource:
    """The fields every event of one event source mapping carries, whatever its records."""

    bootstrap_servers: str
    event_source: str = MSK
    event_source_arn: str | None = None  # MSK cluster ARN; self-managed Kafka has none

    def envelope(self) -> dict[str, Any]:
        head: dict[str, Any] = {"eventSource": self.event_source}
        if self.event_source_arn is not None:
            head["eventSourceArn"] = self.event_source_arn
        head["bootstrapServers"] = self.bootstrap_servers
        return head


def encode_record(record: Record, timestamp_type: str = "CREATE_TIME") -> dict[str, Any]:
    """One record exactly as the event source mapping delivers it; with a schema registry
    integration, also the ``keySchemaMetadata`` / ``valueSchemaMetadata`` it adds."""
    encoded: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "timestampType": timestamp_type,
        "key": None if record.key is None else base64.b64encode(record.key).decode("ascii"),
        "value": None if record.value is None else base64.b64encode(record.value).decode("ascii"),
        "headers": [{name: None if data is None else list(data)} for name, data in record.headers],
    }
    for schema in record.schemas:
        encoded[f"{schema.part}SchemaMetadata"] = {"dataFormat": schema.format, "schemaId": schema.id}
    return encoded


def payload_size(record: Record) -> int:
    """Bytes ``record`` adds to an invocation payload (base64 grows data by 4/3)."""
    key = 0 if record.key is None else len(record.key)
    value = 0 if record.value is None else len(record.value)
    # "[104, 101, ...]", or null
    headers = sum(len(name) + 5 * (4 if data is None else len(data)) + 8 for name, data in record.headers)
    # "valueSchemaMetadata": {"dataFormat": .., "schemaId": ..}; a character escapes to at most 12 bytes
    schemas = sum(64 + 12 * (len(schema.format) + len(schema.id)) for schema in record.schemas)
    return RECORD_OVERHEAD_BYTES + len(record.topic) + 4 * ((value + key + 4) // 3) + headers + schemas


def build_event(records: Iterable[Record], source: EventSource) -> dict[str, Any]:
    """Group ``records`` by topic-partition, in delivery order, into one event."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(f"{record.topic}-{record.partition}", []).append(encode_record(record))
    return {**source.envelope(), "records": groups}
