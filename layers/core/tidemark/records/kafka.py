"""Adapter for MSK and self-managed Kafka event source mapping events.

The event is read as the plain dicts Lambda hands over, one column at a time: the common batch
(well-formed records, unsigned header bytes) costs a few C-level passes per field instead of
several Python calls per record. Powertools' ``KafkaEvent`` data class documents the same
fields; it is not used here because its per-record property access costs about 4 us per record
and its import (the data classes package) about 24 ms of cold start. Anything unusual in a
group of records sends that group through the per-record path, which names the first bad field
exactly as before. Records are grouped by topic-partition in delivery order.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from functools import partial
from typing import Any

from aws_lambda_powertools.shared.functions import decode_header_bytes

from tidemark.exceptions import MalformedEventError
from tidemark.names import TOPIC, matches
from tidemark.records.model import PartitionBatch, Record
from tidemark.sources import PartitionId

# Self-managed Kafka comes in two spellings: the AWS docs' "SelfManagedKafka" and the
# "aws:SelfManagedKafka" of Powertools' own sample event (events/self-managed-powertools.json).
EVENT_SOURCES = frozenset({"aws:kafka", "SelfManagedKafka", "aws:SelfManagedKafka"})

_a2b = binascii.a2b_base64
_make_record = partial(tuple.__new__, Record)  # Record(*fields) without NamedTuple's Python-level __new__
_INT = frozenset({int})
_STR = frozenset({str})


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


def _convert(raw: Mapping[str, Any], position: int, topics: set[str]) -> Record:
    """One record, checked field by field: the path of a group the column path declined, so
    its messages name the first bad field of the first bad record."""
    try:
        topic, partition, offset, timestamp = raw["topic"], raw["partition"], raw["offset"], raw["timestamp"]
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
        encoded_value, encoded_key = raw.get("value"), raw.get("key")
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


def _headers(raw: list[Any]) -> tuple[tuple[str, bytes], ...]:
    """Header byte arrays as bytes; ``TypeError``/``ValueError`` for anything but a list of
    objects of unsigned byte lists (the per-record path then names it, or reads signed bytes)."""
    headers = []
    for chunk in raw:
        if type(chunk) is not dict:
            raise TypeError("not an object")
        for name, data in chunk.items():
            if type(data) is not list:
                raise TypeError("not a list")
            headers.append((name, bytes(data)))
    return tuple(headers)


def _columns(chunk: list[Any], topics: set[str]) -> list[Record] | None:
    """The records of one group, built in one pass and checked a column at a time; ``None``
    when any field is unusual (the per-record path then names it)."""
    try:
        records = [
            _make_record(
                (
                    raw["topic"],
                    raw["partition"],
                    raw["offset"],
                    raw["timestamp"],
                    b"" if (value := raw.get("value")) is None else _a2b(value, strict_mode=True),
                    None if (key := raw.get("key")) is None else _a2b(key, strict_mode=True),
                    _headers(raw_headers) if (raw_headers := raw.get("headers")) else (),
                )
            )
            for raw in chunk
        ]
    except (KeyError, TypeError, ValueError, AttributeError):  # binascii.Error is a ValueError
        return None
    topic_column, partitions, offsets, timestamps = list(zip(*records, strict=True))[:4]
    if not (
        set(map(type, topic_column)) == _STR
        and set(map(type, partitions)) == _INT
        and set(map(type, offsets)) == _INT
        and set(map(type, timestamps)) == _INT
        and min(partitions) >= 0
        and min(offsets) >= 0
    ):
        return None
    for topic in set(topic_column) - topics:
        if not matches(TOPIC, topic):
            return None
        topics.add(topic)
    return records


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
    chunks = list(groups.values())
    for index, chunk in enumerate(chunks):
        _require(isinstance(chunk, list), f"event.records group #{index} must be a list")
        if set(map(type, chunk)) - {dict}:
            for raw_record in chunk:
                _require(isinstance(raw_record, Mapping), f"event.records group #{index} holds a non-object")
    batches: dict[tuple[str, PartitionId], PartitionBatch] = {}
    topics: set[str] = set()
    position = 0  # the record's index in the whole event, for messages
    for chunk in chunks:
        records = _columns(chunk, topics) if chunk else []
        if records is None:
            records = [_convert(raw, position + index, topics) for index, raw in enumerate(chunk)]
        position += len(chunk)
        if not records:
            continue
        first = records[0]
        if len({(record[0], record[1]) for record in records}) == 1:  # the ESM groups by topic-partition
            runs = [((first.topic, first.partition), records)]
        else:
            runs = [((record.topic, record.partition), [record]) for record in records]
        for key, run in runs:
            batch = batches.get(key)
            if batch is None:
                batch = batches[key] = PartitionBatch(key[0], key[1], [], source=source_identity(event, key[0]))
            batch.records.extend(run)
    return list(batches.values())
