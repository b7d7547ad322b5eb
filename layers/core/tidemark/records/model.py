"""The source-independent record every adapter produces."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from tidemark.sources import KAFKA, PartitionId


class Record(NamedTuple):
    """One record of one partition, with its bytes decoded exactly as the broker stored them.

    A ``NamedTuple`` rather than a frozen dataclass: the archiver builds one per record on the
    hot path, and a tuple is built several times faster.
    """

    topic: str
    partition: PartitionId  # a Kafka partition number, a Kinesis shard id
    offset: int
    timestamp_ms: int
    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


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
