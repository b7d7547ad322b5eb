"""Where a rerun resumes: what the target topic already holds of this replay.

Every replayed record carries two headers: ``tidemark.replay`` (the replay's id) and
``tidemark.source`` (``<stream>/<source partition>/<epoch>/<offset>``, UTF-8). The producer is
idempotent and sends each source partition's records in position order, so what landed in a
target partition before a crash is, for every source partition, a prefix of what was sent to it:
the highest source position found there of this replay is the resume point of the pair
(target partition, source partition), and every record of that source partition up to it,
bound for that target partition, is already there -- none that is missing is ever skipped.

The tail is read backwards from the partition's end, in windows that double in size
(``end-64..end``, then the 128 before them, ...), until every source partition that may send
records there has been found or the log's start is reached. With ``--partitioner same`` one
source partition maps to each target partition: the last window usually finds it. With ``key``
every source partition may map to every target partition, and one that has sent nothing there
yet is looked for down to the log's start: a resume reads back at most what the target holds.

Limits: two runs of the same replay at once would each produce everything the other has not
landed yet (run one at a time); a target topic whose retention or compaction removed a
replayed record makes the resume point lower, never higher (records are produced again, none
skipped).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from tidemark.records.model import Headers
from tidemark.replay.exceptions import TargetChangedError
from tidemark.sources import PartitionId, partition_of_text

REPLAY_HEADER = "tidemark.replay"
#: a ``key`` replay's id ends with ``.<target partition count>``: a key's partition depends on it
COUNT_SEPARATOR = "."
SOURCE_HEADER = "tidemark.source"
#: the first (newest) window read back from a partition's end; each older one is twice the last
FIRST_WINDOW = 64

Position = tuple[int, int]  # (epoch, offset)


def source_header(stream: str, partition: PartitionId, epoch: int, offset: int) -> bytes:
    return f"{stream}/{partition}/{epoch}/{offset}".encode()


def parse_source(value: bytes) -> tuple[str, PartitionId, Position] | None:
    """``source_header`` backwards; ``None`` for anything else."""
    try:
        stream, partition, epoch, offset = value.decode("utf-8").split("/")
        return stream, partition_of_text(partition), (int(epoch), int(offset))
    except ValueError:
        return None


def replayed_from(headers: Headers, replay_id: bytes, stream: str) -> tuple[PartitionId, Position] | None:
    """The source partition and position of a record of replay ``replay_id``; ``None`` for a
    record of anything else. The last of each header counts: a replay of records that were
    themselves replayed appends its own headers after theirs."""
    found_id = found_source = None
    for name, value in headers:
        if name == REPLAY_HEADER:
            found_id = value
        elif name == SOURCE_HEADER:
            found_source = value
    if found_id != replay_id and found_id is not None and _base(found_id) == _base(replay_id):
        raise TargetChangedError(
            f"the target topic held {_count(found_id)} partitions when this replay began and holds "
            f"{_count(replay_id)} now: a key's partition has changed, so its records cannot be resumed "
            "exactly once; replay into a new topic (or one with the first partition count)"
        )
    if found_id != replay_id or found_source is None:
        return None
    parsed = parse_source(found_source)
    if parsed is None or parsed[0] != stream:
        return None
    return parsed[1], parsed[2]


def _base(replay_id: bytes) -> bytes:
    return replay_id.split(COUNT_SEPARATOR.encode(), 1)[0]


def _count(replay_id: bytes) -> str:
    _base_id, _separator, count = replay_id.decode("ascii", "replace").partition(COUNT_SEPARATOR)
    return count or "?"


class TargetLog(Protocol):
    """Reading the target topic (``tidemark.replay.kafka.KafkaTarget``, or a fake in tests)."""

    def start_offset(self, partition: int) -> int:
        """The partition's first retained offset."""

    def end_offset(self, partition: int) -> int:
        """The offset its next record will get (confirmed by reading, not a watermark alone)."""

    def read(self, partition: int, first: int, end: int) -> Iterable[Headers]:
        """The headers of the records at offsets ``first..end-1``, in order."""


def resume_points(
    log: TargetLog, replay_id: str, stream: str, sources_of: Mapping[int, Iterable[PartitionId]]
) -> dict[tuple[int, PartitionId], Position]:
    """``(target partition, source partition) -> highest source position`` of this replay the
    target already holds, for each target partition of ``sources_of`` and the source partitions
    that may send records to it (a pair without an entry: nothing of it is there yet)."""
    wanted = replay_id.encode("ascii")
    points: dict[tuple[int, PartitionId], Position] = {}
    for target, sources in sources_of.items():
        missing = set(sources)
        if not missing:
            continue
        start, high = log.start_offset(target), log.end_offset(target)
        size = FIRST_WINDOW
        while missing and high > start:
            low = max(start, high - size)
            newest: dict[PartitionId, Position] = {}
            for headers in log.read(target, low, high):
                found = replayed_from(headers, wanted, stream)
                if found is not None and found[0] in missing:
                    partition, position = found
                    newest[partition] = max(position, newest.get(partition, position))
            for partition, position in newest.items():  # older windows hold only lower positions
                points[(target, partition)] = position
                missing.discard(partition)
            high, size = low, size * 2
    return points
