"""One entry point for every event source mapping event: pick the adapter by the event's shape.

Kafka events (MSK, self-managed) carry a top-level ``eventSource`` and ``records`` keyed by
topic-partition; Kinesis events carry ``Records``, each with ``eventSource: aws:kinesis``;
Amazon MQ (RabbitMQ) events ``eventSource: aws:rmq`` and ``rmqMessagesByQueue``. Each
adapter turns its event into ``PartitionBatch`` es, and nothing below them asks which it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidemark.exceptions import MalformedEventError
from tidemark.records.kafka import EVENT_SOURCES, parse_kafka_event
from tidemark.records.kinesis import EVENT_SOURCE as KINESIS_SOURCE
from tidemark.records.kinesis import is_kinesis_event, parse_kinesis_event
from tidemark.records.model import PartitionBatch
from tidemark.records.rabbitmq import EVENT_SOURCE as RABBITMQ_SOURCE
from tidemark.records.rabbitmq import is_rabbitmq_event, parse_rabbitmq_event


def parse_event(event: Any) -> list[PartitionBatch]:
    """Per-partition batches of a Kafka, Kinesis or RabbitMQ mapping event; ``MalformedEventError`` for
    anything else, naming what was expected."""
    if is_kinesis_event(event):
        return parse_kinesis_event(event)
    if is_rabbitmq_event(event):
        return parse_rabbitmq_event(event)
    if isinstance(event, Mapping) and "eventSource" in event:
        return parse_kafka_event(event)
    if isinstance(event, Mapping) and event.get("Records") == []:
        return []  # a Kinesis event without records: nothing to archive
    expected = sorted(EVENT_SOURCES | {KINESIS_SOURCE, RABBITMQ_SOURCE})
    found: object = type(event).__name__
    if isinstance(event, Mapping):
        records = event.get("Records")
        first = records[0] if isinstance(records, list) and records else None
        found = first.get("eventSource") if isinstance(first, Mapping) else event.get("eventSource")
    raise MalformedEventError(
        f"not a Kafka, Kinesis or RabbitMQ event source mapping event: eventSource={found!r} "
        f"(expected one of {expected})"
    )
