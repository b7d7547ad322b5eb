"""``tidemark rearchive``: archive a quarantined flush exactly once from its records in Kafka.

A flush is quarantined when one of its accepted segments turned out damaged (see DESIGN.md, "A
damaged accepted segment"): nothing of it was uploaded, and the ledger keeps its offsets, object
key and render spec. Rearchiving it::

    state := ledger.load (consistent)
    for each quarantined flush wholly in the range:           # a range cutting one: refused
      refuse unless the state's source is the configured topic (its offsets name this log) and,
        for a flush of an earlier epoch (quarantined before an epoch start), that epoch read the
        same log (the epoch start's previous source): its records are then checked against that
        epoch's marks instead of the recent fingerprints
      frames := per segment: fetch its offsets from Kafka, route (a clock at the segment's staging
                time), keep the buffer's records, check count, first, last, encoded size and
                fingerprints against the ledger                                  # else refused
      upload frames rendered with the buffer's spec under the flush's own key (If-None-Match)
        412, same SHA-256: our own upload before a crash; same records: adopted; else refused
      transact([put state.rearchived(flush) if version matches, put object item if absent])
        on conflict (the partition is live): reload, retry while the flush is still quarantined

A crash anywhere leaves either nothing (run it again), or the object in S3 and the flush still
quarantined (the rerun finds its own object and commits), or the commit done (the rerun says
there is nothing left to rearchive). Flushes of one range are rearchived one after the other: a
refusal stops at its flush, and those before it stay archived. The damaged segments,
unreferenced from the commit on, are deleted by the next archiver run or sweep (garbage
collection); the command needs no staging mount.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tidemark.ledger.base import Ledger
from tidemark.ledger.model import PartitionState, QuarantinedFlush
from tidemark.objects.keys import epoch_of_key
from tidemark.rearchive.exceptions import RefetchMismatchError, UnsupportedSourceError
from tidemark.rearchive.plan import describe, flushes_in_range
from tidemark.rearchive.refetch import RecordSource, RefetchedFlush
from tidemark.sources import KAFKA, PartitionId
from tidemark.writer.partition import PartitionWriter

__all__ = ["RearchiveReport", "RearchivedFlush", "Rearchiver", "RecordSource"]


@dataclass(frozen=True, slots=True)
class RearchivedFlush:
    flush_id: str
    key: str
    first: int
    last: int
    records: int
    size: int
    by_another_run: bool = False  # a concurrent rearchive committed it first


@dataclass
class RearchiveReport:
    stream: str
    partition: PartitionId
    first: int
    last: int
    flushes: list[RearchivedFlush] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(flush.records for flush in self.flushes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "partition": self.partition,
            "from_offset": self.first,
            "to_offset": self.last,
            "records": self.records,
            "flushes": [asdict(flush) for flush in self.flushes],
        }


class Rearchiver:
    def __init__(self, writer: PartitionWriter, ledger: Ledger, source: RecordSource) -> None:
        self._writer = writer
        self._ledger = ledger
        self._source = source

    def run(self, first: int, last: int) -> RearchiveReport:
        """Rearchive every quarantined flush of the writer's partition in offsets ``first..last``."""
        stream, partition = self._writer.stream, self._writer.partition
        self._check_source()  # before the range: a stream this cannot read again is said so first
        state = self._ledger.load(stream.name, partition)
        held_flushes = flushes_in_range(state, first, last)
        report = RearchiveReport(stream.name, partition, first, last)
        for held in held_flushes:
            flush = held.flush
            done = self._writer.rearchive(flush.flush_id, self.refetched(state, held))
            buffer = flush.buffer
            if done is None:
                report.flushes.append(
                    RearchivedFlush(flush.flush_id, flush.object_key, buffer.first, buffer.last, 0, 0, True)
                )
            else:
                report.flushes.append(
                    RearchivedFlush(flush.flush_id, done.key, buffer.first, buffer.last, done.records, done.size)
                )
        return report

    def refetched(self, state: PartitionState, held: QuarantinedFlush) -> RefetchedFlush:
        """The flush's records as the source holds them now, checked as they are read (call it
        for the frames); refused before any read when the source cannot give them back."""
        stream, partition = self._writer.stream, self._writer.partition
        self._check_source()
        topic = stream.config.source.topic
        if state.source and state.source.rsplit("/", 1)[-1] != topic:
            raise RefetchMismatchError(
                f"{stream.name}/{partition}: the partition archives {state.source!r} now, not topic {topic!r}: "
                "its offsets name records of another log"
            )
        flush = held.flush
        epoch = epoch_of_key(flush.object_key)
        fingerprints = dict(state.fingerprints) if epoch == state.epoch else self._earlier(state, held, epoch)
        return RefetchedFlush(stream, partition, flush, self._source, fingerprints)

    def _check_source(self) -> None:
        """``UnsupportedSourceError`` unless the stream's records can be read again as delivered."""
        stream = self._writer.stream
        if stream.config.source.shape.kind != KAFKA:
            raise UnsupportedSourceError(
                f"{stream.name}: rearchive reads Kafka; a {stream.config.source.shape.kind} source's range cannot be "
                "read again by position here"
            )
        if stream.config.source.schema_registry is not None:
            raise UnsupportedSourceError(
                f"{stream.name}: the mapping's schema registry integration decoded what was staged; Kafka holds the "
                "producers' bytes, which rearchive cannot decode the same way"
            )

    def _earlier(self, state: PartitionState, held: QuarantinedFlush, epoch: int) -> dict[int, int]:
        """A flush quarantined before an epoch start: rearchived from the same log only (the
        start that ended its epoch recorded that epoch's source), and checked against that
        epoch's marks (each accept's ends and first record per run of 16 offsets): a recreated
        topic at those offsets holds other records there, and is refused."""
        stream, partition = self._writer.stream, self._writer.partition
        ended = next((start for start in self._ledger.epochs(stream.name, partition) if start.epoch == epoch + 1), None)
        read = ended.previous_source if ended is not None else ""
        if ended is None or (read and state.source and read != state.source):
            raise RefetchMismatchError(
                f"{describe(held)} belongs to epoch {epoch}, which read {read or 'a log the ledger does not name'}; "
                f"the partition reads {state.source or 'its configured topic'} now: its offsets name records of "
                "another log"
            )
        buffer = held.flush.buffer
        marks = self._ledger.marks(stream.name, partition, epoch, range(buffer.first, buffer.last + 1))
        return {offset: next(iter(crcs)) for offset, crcs in marks.items() if len(crcs) == 1}
