"""The common record model and the adapters from event source mapping events."""

from __future__ import annotations

from tidemark.records.events import parse_event
from tidemark.records.kafka import parse_kafka_event
from tidemark.records.kinesis import parse_kinesis_event
from tidemark.records.model import PartitionBatch, Record

__all__ = ["PartitionBatch", "Record", "parse_event", "parse_kafka_event", "parse_kinesis_event"]
