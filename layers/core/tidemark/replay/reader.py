"""A source partition's records in position order, read back from its objects.

A partition's objects cover overlapping offset ranges (records of different event hours
interleave in offsets, and each hour has objects of its own) but disjoint record sets, so the
records come back in order only through a k-way merge on ``(epoch, offset)``. An object is
downloaded when the merge reaches its first position, not before: memory holds only the objects
whose ranges overlap the current position, however many the partition has.

The merge proves what it yields: positions strictly increase. A position twice, or a record
below one already yielded (an object holding less than its key names), stops the replay with
``ArchiveOrderError`` rather than replaying the archive out of order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from tidemark.formats import format_of
from tidemark.records.model import Headers
from tidemark.replay.exceptions import ArchiveOrderError, ReplayError, UnreplayableFormatError
from tidemark.replay.plan import PlannedObject
from tidemark.sources import PartitionId

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

Position = tuple[int, int]  # (epoch, offset)


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    """One archived record, as it is produced again."""

    partition: PartitionId  # its source partition
    epoch: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None  # None: a tombstone, produced again as a null value
    headers: Headers
    dead: bool  # read from a dead-letter object

    @property
    def position(self) -> Position:
        return self.epoch, self.offset


class Ranged(Protocol):
    """What the merge needs of an object: where it starts, and a name for errors."""

    @property
    def key(self) -> str: ...

    @property
    def start(self) -> Position: ...


R = TypeVar("R", bound=Ranged)


def merged(objects: Sequence[R], open_object: Callable[[R], Iterator[ReplayRecord]]) -> Iterator[ReplayRecord]:
    """The records of ``objects`` (one source partition's) in ``(epoch, offset)`` order.

    ``open_object`` reads an object's records (in its own position order); it is called for an
    object only once every record below the object's first position has been yielded."""
    pending = sorted(objects, key=lambda obj: obj.start)
    heap: list[tuple[Position, int, ReplayRecord, Iterator[ReplayRecord], str]] = []
    opened = 0
    last: Position | None = None
    last_key = ""
    while heap or opened < len(pending):
        while opened < len(pending) and (not heap or pending[opened].start <= heap[0][0]):
            obj = pending[opened]
            records = open_object(obj)
            first = next(records, None)
            if first is not None:
                heapq.heappush(heap, (first.position, opened, first, records, obj.key))
            opened += 1
        if not heap:
            continue
        position, order, record, records, key = heap[0]
        if last is not None and position <= last:
            twice = "twice" if position == last else "out of order"
            raise ArchiveOrderError(
                f"partition {record.partition}: epoch {position[0]} offset {position[1]} is {twice} "
                f"({key} after {last_key}): run tidemark audit"
            )
        yield record
        last, last_key = position, key
        following = next(records, None)
        if following is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (following.position, order, following, records, key))


class ObjectReader:
    """Reads one planned object from S3 into replay records (``open``: for ``merged``)."""

    def __init__(self, s3: S3Client, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def open(self, obj: PlannedObject) -> Iterator[ReplayRecord]:
        """The object's records; ``ReplayError`` when it cannot be fetched or read (the replay
        stops there: a rerun resumes once the archive is repaired)."""
        try:
            body = self._s3.get_object(Bucket=self._bucket, Key=obj.key)["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise ReplayError(f"{obj.key} (committed in the ledger) could not be read from S3: {exc}") from None
        envelopes = format_of(obj.spec).read(body, obj.spec.context(obj.partition, obj.key))
        while True:
            try:
                envelope = next(envelopes, None)
            except Exception as exc:  # noqa: BLE001 -- any reader failure: this object is damaged
                raise ReplayError(
                    f"{obj.key} is unreadable ({type(exc).__name__}: {exc}): run tidemark audit"
                ) from None
            if envelope is None:
                return
            if (envelope.value is None and not envelope.tombstone) or envelope.offset is None:
                # (planning refuses these formats; a tombstone's value is null, and replayed so)
                raise UnreplayableFormatError(f"{obj.key}: its records keep no value bytes or offsets")
            yield ReplayRecord(
                obj.partition,
                obj.epoch,
                envelope.offset,
                envelope.timestamp_ms,
                envelope.key,
                envelope.value,
                envelope.headers or (),
                obj.dead,
            )
