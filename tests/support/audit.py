"""Helpers of the audit tests: workloads whose objects hold contiguous offsets, and erasing an
object from S3 *and* the ledger (so that nothing but the audit's tiling can tell it existed)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson

from tests.support.workload import BASE_MS, Workload
from tidemark.ledger.dynamodb import hour_pk, object_sk
from tidemark.ledger.model import CommittedObject
from tidemark.records.model import Record
from tidemark.sources import PartitionId


def dense(*, partitions: int, per_partition: int, seed: int, base_ms: int = BASE_MS, topic: str = "orders") -> Workload:
    """Orders one second apart (at most 3,500 per partition: all in one event hour), none late or
    malformed: each object holds contiguous offsets, so an erased one leaves exactly its range."""
    assert per_partition <= 3_500
    rng = random.Random(seed)
    records: dict[PartitionId, list[Record]] = {}
    for partition in range(partitions):
        records[partition] = []
        for offset in range(per_partition):
            created = base_ms + 60_000 + offset * 1000
            value = {"order_id": f"o-{seed}-{partition}-{offset}", "price": rng.randint(1, 99), "created_at": created}
            records[partition].append(
                Record(topic, partition, offset, created, orjson.dumps(value), f"k{offset}".encode())
            )
    return Workload(records, [])


def committed(ledger: Any, stream: str = "orders") -> list[CommittedObject]:
    """Every object the ledger records for the stream, by partition, epoch and first position."""
    found = [obj for mark in ledger.hour_marks(stream) for obj in ledger.committed_objects(stream, mark.hour)]
    return sorted(found, key=lambda obj: (str(obj.partition), obj.epoch, obj.first))


def erase(archive: Any, obj: CommittedObject) -> None:
    """The object gone from S3 *and* from the ledger: nothing records that it ever existed."""
    archive.s3.delete_object(Bucket=archive.bucket, Key=obj.key)
    key = {
        "pk": {"S": hour_pk(obj.stream, obj.hour)},
        "sk": {"S": object_sk(obj.kind, obj.partition, obj.first, obj.epoch)},
    }
    archive.dynamodb.delete_item(TableName=archive.table, Key=key)


class Probe:
    """The source log as a test says it is: ``held(partition, first, last)`` records there, and
    ``partitions`` (the topic's)."""

    def __init__(
        self, held: Callable[[PartitionId, int, int], int | None], partitions: list[int] | None = None
    ) -> None:
        self.held = held
        self._partitions = partitions or []
        self.asked: list[tuple[PartitionId, int, int]] = []

    def records_between(self, partition: PartitionId, first: int, last: int) -> int | None:
        self.asked.append((partition, first, last))
        return self.held(partition, first, last)

    def partitions(self) -> list[int]:
        return list(self._partitions)


def holding_all(_partition: PartitionId, first: int, last: int) -> int:
    """A source that holds a record at every offset asked about."""
    return last - first + 1
