"""Produce a stream's archived records into a Kafka topic again, exactly once, resumable.

``Replayer.run``: plan (committed objects of the hours, refusing formats that cannot be
replayed), check the target's partitions, read the resume points from the target's tail, then
per source partition merge its objects in position order and produce every record the target
does not hold yet to the partition the partitioner names -- key, value, headers and timestamp
(CreateTime) as archived, plus ``tidemark.source`` and ``tidemark.replay`` headers -- and wait
for every delivery. A crash anywhere (a kill, an error, Ctrl-C) leaves a prefix of each
(target, source) pair's records in the target; running the same replay again skips exactly
those (``tidemark.replay.tail``).

What comes back is what the archive holds: JSON values as the archived JSON text (equal as JSON
to what was produced; whitespace may differ, raw line breaks are blanks), text and bytes values
byte for byte, a null value (a tombstone) as an empty value, a null header value as empty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tidemark.config.model import TidemarkConfig
from tidemark.ledger.base import Ledger
from tidemark.records.model import Headers
from tidemark.replay.partitioner import KEY, SAME, Partitioning
from tidemark.replay.plan import PlannedObject, ReplayPlan, plan_replay, replay_id
from tidemark.replay.reader import ObjectReader, ReplayRecord, merged
from tidemark.replay.tail import (
    COUNT_SEPARATOR,
    REPLAY_HEADER,
    SOURCE_HEADER,
    Position,
    TargetLog,
    resume_points,
    source_header,
)
from tidemark.sources import PartitionId, partition_sort_key

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

Progress = Callable[[int, int], None]  # (records done: produced or skipped, records to replay)
#: records between two progress reports
PROGRESS_EVERY = 500


class ReplayTarget(TargetLog, Protocol):
    """The target topic: its tail (``TargetLog``), its size, and a producer."""

    def partitions(self) -> int:
        """How many partitions the topic has."""

    def produce(
        self, partition: int, key: bytes | None, value: bytes | None, headers: Headers, timestamp_ms: int | None
    ) -> None:
        """Queue one record for ``partition``."""

    def flush(self) -> None:
        """Wait until every queued record is delivered (``DeliveryError`` otherwise)."""


@dataclass
class PartitionReport:
    """What one source partition's replay did."""

    partition: PartitionId
    objects: int = 0
    produced: int = 0
    skipped: int = 0  # already in the target: a rerun resuming
    dead_letters: int = 0  # produced records that came from dead-letter objects
    own_copies: int = 0  # archived records that are this replay's own copies (a replay into the source topic)
    first: Position | None = None  # the lowest and highest source position replayed or skipped
    last: Position | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "objects": self.objects,
            "produced": self.produced,
            "skipped": self.skipped,
            "dead_letters": self.dead_letters,
            "own_copies": self.own_copies,
            "first": _position(self.first),
            "last": _position(self.last),
        }


@dataclass
class ReplayReport:
    replay_id: str
    stream: str
    topic: str
    first_hour: str
    last_hour: str
    partitioner: str
    target_partitions: int = 0
    objects: int = 0
    records: int = 0  # what the ledger says the objects hold
    #: objects committed after the plan read their partition's state: left to a rerun
    later_objects: int = 0
    partitions: list[PartitionReport] = field(default_factory=list)
    #: (target partition, source partition) -> the position the target already held: where each resumed
    resumed: dict[tuple[int, PartitionId], Position] = field(default_factory=dict)

    @property
    def produced(self) -> int:
        return sum(part.produced for part in self.partitions)

    @property
    def skipped(self) -> int:
        return sum(part.skipped for part in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "replay_id": self.replay_id,
            "stream": self.stream,
            "topic": self.topic,
            "first_hour": self.first_hour,
            "last_hour": self.last_hour,
            "partitioner": self.partitioner,
            "target_partitions": self.target_partitions,
            "objects": self.objects,
            "records": self.records,
            "later_objects": self.later_objects,
            "produced": self.produced,
            "skipped": self.skipped,
            "partitions": [part.to_dict() for part in self.partitions],
            "resumed": [
                {"target_partition": target, "source_partition": source, "through": _position(position)}
                for (target, source), position in sorted(
                    self.resumed.items(), key=lambda item: (item[0][0], partition_sort_key(item[0][1]))
                )
            ],
        }


def _position(position: Position | None) -> dict[str, int] | None:
    return None if position is None else {"epoch": position[0], "offset": position[1]}


class Replayer:
    """One replay: ``stream``'s archived records of the event hours ``first_hour..last_hour``
    (both included; the source ``partitions``, ``None``: all) into ``topic`` through ``target``.

    ``after_produce`` (tests: a crash at a chosen record) is called with the number of records
    produced so far, after each one."""

    def __init__(
        self,
        config: TidemarkConfig,
        stream: str,
        ledger: Ledger,
        s3: S3Client,
        bucket: str,
        target: ReplayTarget,
        *,
        topic: str,
        first_hour: str,
        last_hour: str,
        partitions: Iterable[PartitionId] | None = None,
        partitioner: str = SAME,
        dead_letters: bool = True,
        after_produce: Callable[[int], None] | None = None,
    ) -> None:
        self._config = config
        self.stream = stream
        self._ledger = ledger
        self._reader = ObjectReader(s3, bucket)
        self._target = target
        self.topic = topic
        self.first_hour = first_hour
        self.last_hour = last_hour
        self._partitions = None if partitions is None else sorted(set(partitions), key=partition_sort_key)
        self.partitioner = partitioner
        self._dead_letters = dead_letters
        self._after_produce = after_produce
        self._base_id = replay_id(stream, first_hour, last_hour, self._partitions, partitioner, topic, dead_letters)
        self.replay_id = self._base_id  # with ``key``, ``run`` adds the target's partition count

    def plan(self) -> ReplayPlan:
        """The objects to read; ``UnreplayableFormatError`` before anything is produced."""
        return plan_replay(
            self._config,
            self.stream,
            self._ledger,
            self.first_hour,
            self.last_hour,
            partitions=self._partitions,
            dead_letters=self._dead_letters,
        )

    def run(self, progress: Progress | None = None) -> ReplayReport:
        plan = self.plan()
        partitioning = Partitioning(self.partitioner, self._target.partitions())
        if self.partitioner == KEY:  # a key's partition depends on the count: part of the replay
            self.replay_id = f"{self._base_id}{COUNT_SEPARATOR}{partitioning.partitions}"
        report = ReplayReport(
            self.replay_id, self.stream, self.topic, self.first_hour, self.last_hour, self.partitioner
        )
        report.objects, report.records, report.later_objects = plan.object_count, plan.records, plan.later_objects
        report.target_partitions = partitioning.partitions
        partitioning.check(plan.partitions, self.topic)
        sources_of: dict[int, set[PartitionId]] = {}
        for source in plan.partitions:
            for target in partitioning.reach(source):
                sources_of.setdefault(target, set()).add(source)
        report.resumed = resume_points(self._target, self.replay_id, self.stream, sources_of)
        replay_header = (REPLAY_HEADER, self.replay_id.encode("ascii"))
        produce, hook, stream = self._target.produce, self._after_produce, self.stream
        since_progress = 0
        for source in plan.partitions:
            part = PartitionReport(source, objects=len(plan.objects[source]))
            report.partitions.append(part)
            held = {target: report.resumed.get((target, source)) for target in partitioning.reach(source)}
            target_of = partitioning.target
            for record in self._records(plan.objects[source], held, part):
                if replay_header in record.headers:
                    # A copy this very replay made, archived again: the target was the source topic.
                    part.own_copies += 1
                    continue
                position = record.position
                if part.first is None or position < part.first:
                    part.first = position
                if part.last is None or position > part.last:
                    part.last = position
                target = target_of(source, record.key)
                through = held[target]
                if through is not None and position <= through:
                    part.skipped += 1
                else:
                    origin = (SOURCE_HEADER, source_header(stream, source, record.epoch, record.offset))
                    produce(
                        target, record.key, record.value, (*record.headers, origin, replay_header), record.timestamp_ms
                    )
                    part.produced += 1
                    if record.dead:
                        part.dead_letters += 1
                    if hook is not None:
                        hook(report.produced)
                since_progress += 1
                if progress is not None and since_progress >= PROGRESS_EVERY:
                    since_progress = 0
                    progress(report.produced + report.skipped, plan.records)
        self._target.flush()
        if progress is not None:
            progress(report.produced + report.skipped, plan.records)
        return report

    def _records(
        self, objects: tuple[PlannedObject, ...], held: dict[int, Position | None], part: PartitionReport
    ) -> Iterator[ReplayRecord]:
        """The partition's records in position order, without downloading the objects that
        every target partition it reaches already holds whole (their records count as skipped)."""
        points = [point for point in held.values() if point is not None]
        floor = min(points) if points and len(points) == len(held) else None
        needed = []
        for obj in objects:
            if floor is not None and obj.end <= floor:
                part.skipped += obj.records
                part.first = obj.start if part.first is None else min(part.first, obj.start)
                part.last = obj.end if part.last is None else max(part.last, obj.end)
            else:
                needed.append(obj)
        return merged(needed, self._reader.open)
