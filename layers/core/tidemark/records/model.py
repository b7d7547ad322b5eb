"""The source-independent record every adapter produces."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from tidemark.sources import KAFKA, PartitionId


class SchemaRef(NamedTuple):
    """The schema a record's key or value was written with, as far as the source says.

    ``part`` is ``key`` or ``value``; ``id`` the registry's id for the schema (a Confluent
    registry's integer as text, a Glue schema version's UUID); ``format`` the data format the
    event source mapping names (``AVRO``, ``PROTOBUF``, ``JSON``), or ``""`` when only the id
    is known (Confluent's wire format carries the id, not the format)."""

    part: str
    format: str
    id: str


#: a record's schema references, key before value; ``()`` for the common record
Schemas = tuple[SchemaRef, ...]

#: a record's headers in order, names repeating as the source allows; a Kafka header's value may
#: be null (``None``), which is not the empty value ``b""``
Headers = tuple[tuple[str, bytes | None], ...]


class Record(NamedTuple):
    """One record of one partition, with its bytes decoded exactly as the broker stored them.

    ``value`` is ``None`` for a Kafka tombstone (a null value: a compacted topic's delete, a CDC
    delete), which is a record like any other and never the empty value ``b""``. Kinesis and
    RabbitMQ have no tombstones: their records always carry bytes (possibly empty).

    A ``NamedTuple`` rather than a frozen dataclass: the archiver builds one per record on the
    hot path, and a tuple is built several times faster.
    """

    topic: str
    partition: PartitionId  # a Kafka partition number, a Kinesis shard id
    offset: int
    timestamp_ms: int
    value: bytes | None  # None: a tombstone
    key: bytes | None = None
    headers: Headers = ()
    schemas: Schemas = ()  # from the mapping's schema registry integration, or Confluent's wire format


@dataclass(slots=True)
class PartitionBatch:
    """The records of one source partition from one invocation, in delivery order.

    ``kind`` is the source kind (``tidemark.sources``); ``source`` identifies the log the
    positions belong to (``tidemark.resets``): an MSK cluster and topic, or a Kinesis stream's ARN.
    """

    topic: str
    partition: PartitionId
    records: list[Record]
    kind: str = KAFKA
    source: str = field(default="", compare=False)
