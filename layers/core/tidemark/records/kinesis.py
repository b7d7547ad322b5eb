"""Adapter for Kinesis Data Streams event source mapping events.

Lambda delivers ``{"Records": [...]}``, each record holding ``eventID``
(``<shard id>:<sequence number>``), ``eventSourceARN`` (the stream) and a ``kinesis`` payload:
``partitionKey``, ``sequenceNumber`` (a decimal string of up to 129 digits), ``data`` (base64)
and ``approximateArrivalTimestamp`` (epoch seconds with a fraction). A shard is the partition
and a sequence number the position::

    eventID -> shard id    sequenceNumber -> position (an int of any width)
    partitionKey -> key    data -> value    approximateArrivalTimestamp -> timestamp (ms)

Parsing goes through Powertools' ``KinesisStreamEvent`` data class; this module adds the checks
a production archiver needs (shape, one stream per event, shard ids, sequence numbers) and
groups records by shard in delivery order. Anything malformed raises ``MalformedEventError``:
the event is not one the mapping sends, and failing it loses nothing.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from tidemark.exceptions import MalformedEventError
from tidemark.records.model import PartitionBatch, Record
from tidemark.sources import KINESIS, KINESIS_STREAM_ARN, SEQUENCE_NUMBER, SHARD_ID

EVENT_SOURCE = "aws:kinesis"
STREAM_ARN = re.compile(KINESIS_STREAM_ARN)
_THOUSAND = Decimal(1000)


def is_kinesis_event(event: Any) -> bool:
    """Whether ``event`` claims to come from a Kinesis mapping (its first record says so)."""
    if not isinstance(event, Mapping) or "eventSource" in event:
        return False
    records = event.get("Records")
    return (
        isinstance(records, list)
        and bool(records)
        and isinstance(records[0], Mapping)
        and records[0].get("eventSource") == EVENT_SOURCE
    )


def stream_name(arn: str) -> str:
    match = STREAM_ARN.fullmatch(arn)
    if match is None:
        raise MalformedEventError(f"eventSourceARN {arn!r} is not a Kinesis stream ARN")
    return arn.rsplit("/", 1)[1]


def arrival_ms(seconds: object, position: int) -> int:
    """``approximateArrivalTimestamp`` (epoch seconds, a JSON number with a fraction) in whole
    milliseconds, floored, computed from the number's decimal text: ``1545084650.987`` is
    exactly ``1545084650987``, never the ``...986`` a binary float product would give."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise MalformedEventError(f"record #{position}: approximateArrivalTimestamp must be a number, got {seconds!r}")
    try:
        return int((Decimal(repr(seconds)) * _THOUSAND).to_integral_value(rounding="ROUND_FLOOR"))
    except (InvalidOperation, ValueError, OverflowError):
        raise MalformedEventError(
            f"record #{position}: approximateArrivalTimestamp {seconds!r} is not a finite number"
        ) from None


def _convert(raw: Mapping[str, Any], position: int, name: str) -> Record:
    payload = raw.get("kinesis")
    if not isinstance(payload, Mapping):
        raise MalformedEventError(f"record #{position}: missing the 'kinesis' payload")
    event_id, sequence = raw.get("eventID"), payload.get("sequenceNumber")
    if not isinstance(sequence, str) or SEQUENCE_NUMBER.fullmatch(sequence) is None:
        raise MalformedEventError(
            f"record #{position}: sequenceNumber must be a decimal string of up to 129 digits, got {sequence!r}"
        )
    shard, _, id_sequence = event_id.partition(":") if isinstance(event_id, str) else ("", "", "")
    if SHARD_ID.fullmatch(shard) is None or id_sequence != sequence:
        raise MalformedEventError(
            f"record #{position}: eventID {event_id!r} is not '<shard id>:<sequenceNumber>' of this record"
        )
    key = payload.get("partitionKey")
    if not isinstance(key, str) or not key:
        raise MalformedEventError(f"record #{position}: partitionKey must be a non-empty string, got {key!r}")
    data = payload.get("data")
    try:
        # Strict decoding: the mapping always sends valid base64, so anything else is not its event.
        value = binascii.a2b_base64(data, strict_mode=True) if isinstance(data, str) else None
    except (binascii.Error, ValueError) as exc:
        raise MalformedEventError(f"record #{position}: data is not valid base64 ({exc})") from None
    if value is None:
        raise MalformedEventError(f"record #{position}: data must be a base64 string, got {data!r}")
    timestamp = arrival_ms(payload.get("approximateArrivalTimestamp"), position)
    return Record(name, shard, int(sequence), timestamp, value, key.encode("utf-8"))


def parse_kinesis_event(event: Any) -> list[PartitionBatch]:
    """Turn a Kinesis mapping event into per-shard batches (one stream per event)."""
    if not isinstance(event, Mapping) or not isinstance(event.get("Records"), list):
        raise MalformedEventError("a Kinesis event is an object with a 'Records' list")
    batches: dict[str, PartitionBatch] = {}
    arn: str | None = None
    # Imported here: Powertools' data classes package costs ~25 ms of import, which a Kafka
    # stream's cold start should not pay.
    from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamEvent

    for position, raw in enumerate(KinesisStreamEvent(dict(event)).records):
        record = raw.raw_event
        if not isinstance(record, Mapping):
            raise MalformedEventError(f"record #{position} is not an object")
        if raw.get("eventSource") != EVENT_SOURCE:
            raise MalformedEventError(
                f"record #{position}: eventSource={raw.get('eventSource')!r}, expected {EVENT_SOURCE!r}"
            )
        record_arn = raw.get("eventSourceARN")
        if arn is None:
            arn = record_arn if isinstance(record_arn, str) else ""
            name = stream_name(arn)
        elif record_arn != arn:
            raise MalformedEventError(
                f"record #{position}: eventSourceARN {record_arn!r} differs from the event's {arn!r} "
                "(one mapping reads one stream)"
            )
        converted = _convert(record, position, name)
        batch = batches.get(str(converted.partition))
        if batch is None:
            batch = batches[str(converted.partition)] = PartitionBatch(
                name, converted.partition, [], kind=KINESIS, source=arn
            )
        batch.records.append(converted)
    return list(batches.values())
