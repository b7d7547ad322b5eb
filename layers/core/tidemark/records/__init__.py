"""The common record model and the adapters from event source mapping events."""

from __future__ import annotations

from tidemark.records.kafka import PartitionBatch, parse_kafka_event
from tidemark.records.model import Record

__all__ = ["PartitionBatch", "Record", "parse_kafka_event"]
