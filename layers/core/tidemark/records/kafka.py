"""Adapter for MSK and self-managed Kafka event source mapping events.

Parsing goes through Powertools' ``KafkaEvent`` data class; this module adds the checks a
production archiver needs (shape, types, topic name) and groups records by topic-partition in
delivery order.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.shared.functions import decode_header_bytes
from aws_lambda_powertools.utilities.data_classes.kafka_event import KafkaEvent, KafkaEventRecord

from tidemark.exceptions import MalformedEventError
from tidemark.names import TOPIC, matches
from tidemark.records.model import PartitionBatch, Record
from tidemark.sources import PartitionId

# Self-managed Kafka comes in two spellings: the AWS docs' "SelfManagedKafka" and the
# "aws:SelfManagedKafka" of Powertools' own sample event (events/self-managed-powertools.json).
EVENT_SOURCES = frozenset({"aws:kafka", "SelfManagedKafka", "aws:SelfManagedKafka"})


def source_identity(event: Mapping[str, Any], topic: str) -> str:
    """``<cluster>/<topic>``: the MSK cluster's name and id from the event's ARN, or nothing for
    self-managed Kafka, whose bootstrap servers change when brokers do (a migration between
    self-managed clusters is caught by its positions instead)."""
    arn = event.get("eventSourceArn")
    cluster = ""
    if isinstance(arn, str) and ":cluster/" in arn:
        cluster = arn.split(":cluster/", 1)[1]
    return f"{cluster}/{topic}"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise MalformedEventError(message)


def _is_count(number: object) -> bool:
    return type(number) is int and number >= 0


def _convert(raw: KafkaEventRecord, position: int, topics: set[str]) -> Record:
    # Hot path: one call per record, so checks are plain ``if``s and messages are only
    # formatted when something is wrong.
    try:
        topic, partition, offset, timestamp = raw.topic, raw.partition, raw.offset, raw.timestamp
    except KeyError as exc:
        raise MalformedEventError(f"record #{position}: missing field {exc.args[0]!r}") from None
    if topic not in topics:  # validate each distinct topic name once per event
        if not matches(TOPIC, topic):
            raise MalformedEventError(f"record #{position}: invalid topic name {topic!r}")
        topics.add(topic)
    for name, number in (("partition", partition), ("offset", offset)):
        if not _is_count(number):
            raise MalformedEventError(f"record #{position}: {name} must be a non-negative integer, got {number!r}")
    # Kafka uses -1 for "no timestamp"; such a record is dead-lettered later, never rejected here.
    if type(timestamp) is not int:
        raise MalformedEventError(f"record #{position}: timestamp must be an integer, got {timestamp!r}")
    try:
        # Strict decoding: the ESM always sends valid base64, so anything else is not its event.
        encoded_value, encoded_key = raw.get("value"), raw.key
        value = b"" if encoded_value is None else binascii.a2b_base64(encoded_value, strict_mode=True)
        key = None if encoded_key is None else binascii.a2b_base64(encoded_key, strict_mode=True)
    except (binascii.Error, TypeError, ValueError) as exc:
        raise MalformedEventError(f"record #{position}: key/value is not valid base64 ({exc})") from None
    raw_headers = raw.get("headers")
    if not raw_headers:
        return Record(topic, partition, offset, timestamp, value, key)
    headers: list[tuple[str, bytes]] = []
    for chunk in raw_headers:
        if not isinstance(chunk, Mapping):
            raise MalformedEventError(f"record #{position}: each header must be an object")
        for name, data in chunk.items():
            try:
                if type(data) is not list:
                    raise TypeError(f"expected a list of byte values, got {type(data).__name__}")
                try:
                    decoded = bytes(data)  # unsigned byte values: the common case
                except ValueError:
                    decoded = decode_header_bytes(data)  # type: ignore[no-untyped-call]  # Java's signed bytes
                headers.append((str(name), decoded))
            except (TypeError, ValueError) as exc:
                raise MalformedEventError(f"record #{position}: header {name!r} is not a byte array ({exc})") from None
    return Record(topic, partition, offset, timestamp, value, key, tuple(headers))


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
    batches: dict[tuple[str, PartitionId], PartitionBatch] = {}
    kafka_event = KafkaEvent(dict(event))
    for index, chunk in enumerate(groups.values()):
        _require(isinstance(chunk, list), f"event.records group #{index} must be a list")
        for raw_record in chunk:
            _require(isinstance(raw_record, Mapping), f"event.records group #{index} holds a non-object")
    topics: set[str] = set()
    for position, raw in enumerate(kafka_event.records):
        record = _convert(raw, position, topics)
        batch = batches.get((record.topic, record.partition))
        if batch is None:
            batch = batches[(record.topic, record.partition)] = PartitionBatch(
                record.topic, record.partition, [], source=source_identity(event, record.topic)
            )
        batch.records.append(record)
    return list(batches.values())
