"""Adapter for MSK and self-managed Kafka event source mapping events.

Parsing goes through Powertools' ``KafkaEvent`` data class; this module adds the checks a
production archiver needs (shape, types, topic name) and groups records by topic-partition in
delivery order.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.shared.functions import decode_header_bytes
from aws_lambda_powertools.utilities.data_classes.kafka_event import KafkaEvent, KafkaEventRecord

from tidemark.exceptions import MalformedEventError
from tidemark.records.model import Record

EVENT_SOURCES = frozenset({"aws:kafka", "SelfManagedKafka"})
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


@dataclass(slots=True)
class PartitionBatch:
    """The records of one topic-partition from one invocation, in delivery order."""

    topic: str
    partition: int
    records: list[Record]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise MalformedEventError(message)


def _convert(raw: KafkaEventRecord, where: str) -> Record:
    try:
        topic, partition, offset, timestamp = raw.topic, raw.partition, raw.offset, raw.timestamp
    except KeyError as exc:
        raise MalformedEventError(f"{where}: missing field {exc.args[0]!r}") from None
    _require(isinstance(topic, str) and bool(_TOPIC.fullmatch(topic)), f"{where}: invalid topic name {topic!r}")
    for name, number in (("partition", partition), ("offset", offset)):
        _require(
            isinstance(number, int) and not isinstance(number, bool) and number >= 0,
            f"{where}: {name} must be a non-negative integer, got {number!r}",
        )
    # Kafka uses -1 for "no timestamp"; such a record is dead-lettered later, never rejected here.
    _require(
        isinstance(timestamp, int) and not isinstance(timestamp, bool),
        f"{where}: timestamp must be an integer, got {timestamp!r}",
    )
    try:
        # Strict decoding: the ESM always sends valid base64, so anything else is not its event.
        encoded_value, encoded_key = raw.get("value"), raw.key
        value = b"" if encoded_value is None else base64.b64decode(encoded_value, validate=True)
        key = None if encoded_key is None else base64.b64decode(encoded_key, validate=True)
    except (binascii.Error, TypeError, ValueError) as exc:
        raise MalformedEventError(f"{where}: key/value is not valid base64 ({exc})") from None
    headers: list[tuple[str, bytes]] = []
    for chunk in raw.get("headers") or ():
        _require(isinstance(chunk, Mapping), f"{where}: each header must be an object")
        for name, data in chunk.items():
            try:
                headers.append((str(name), decode_header_bytes(data)))  # type: ignore[no-untyped-call]
            except (TypeError, ValueError) as exc:
                raise MalformedEventError(f"{where}: header {name!r} is not a byte array ({exc})") from None
    return Record(
        topic=topic,
        partition=partition,
        offset=offset,
        timestamp_ms=timestamp,
        value=value,
        key=key,
        headers=tuple(headers),
    )


def parse_kafka_event(event: Any) -> list[PartitionBatch]:
    """Turn an ESM event into per-partition batches; anything else raises ``MalformedEventError``."""
    _require(isinstance(event, Mapping), f"expected an event object, got {type(event).__name__}")
    source = event.get("eventSource")
    _require(
        source in EVENT_SOURCES,
        f"not a Kafka event source mapping event: eventSource={source!r} (expected one of {sorted(EVENT_SOURCES)})",
    )
    groups = event.get("records")
    _require(isinstance(groups, Mapping), "event.records must be an object keyed by 'topic-partition'")
    batches: dict[tuple[str, int], PartitionBatch] = {}
    kafka_event = KafkaEvent(dict(event))
    for index, chunk in enumerate(groups.values()):
        _require(isinstance(chunk, list), f"event.records group #{index} must be a list")
        for raw_record in chunk:
            _require(isinstance(raw_record, Mapping), f"event.records group #{index} holds a non-object")
    for position, raw in enumerate(kafka_event.records):
        record = _convert(raw, f"record #{position}")
        batch = batches.get((record.topic, record.partition))
        if batch is None:
            batch = batches[(record.topic, record.partition)] = PartitionBatch(record.topic, record.partition, [])
        batch.records.append(record)
    return list(batches.values())
