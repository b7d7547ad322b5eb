"""``tidemark abandon``: record as lost a quarantined flush that no command can archive any more.

A quarantined flush's records were damaged on the staging mount; ``tidemark rearchive`` archives
them again from Kafka. When Kafka no longer holds them (retention deleted them, the topic was
recreated, the partition reads another log now), or the stream's records cannot be read again as
they were delivered (Kinesis, a schema registry integration), the entry would stay for good:
``replay`` refuses its hours, the sweeper never completes them, ``status`` stays stale. Abandoning
it is an operator's decision, recorded::

    state := ledger.load (consistent)
    for each quarantined flush wholly in the range:                       # a range cutting one: refused
      try: read every frame a rearchive would archive (RefetchedFlush), checked as it would check them
      success -> refused: the source still holds the records, rearchive them
      NotRetained / RefetchMismatch / UnsupportedSource -> why: the check's own words
      transact([put state without the flush if version matches,
                put AbandonedFlush(flush id, its key, epoch, segments, reason, why) if absent])
        on conflict (the partition is live): reload, retry while the flush is still quarantined

The record stays in the ledger for good: ``tidemark audit`` accounts for the flush's positions
with it and lists it on every run (never as clean-and-silent), and the segment files, no longer
referenced, are garbage for the next archiver run or sweep. Nothing is uploaded, nothing deleted
from S3. Safe to rerun: a flush already abandoned is no longer quarantined (refused: nothing in
the range).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tidemark.exceptions import NotRetainedError
from tidemark.ledger.base import Ledger
from tidemark.ledger.model import AbandonedFlush, PartitionState, QuarantinedFlush
from tidemark.rearchive.exceptions import RearchiveError, RefetchMismatchError, UnsupportedSourceError
from tidemark.rearchive.plan import describe, flushes_in_range
from tidemark.rearchive.rearchiver import Rearchiver, RecordSource
from tidemark.sources import PartitionId
from tidemark.writer.partition import PartitionWriter


class StillRetainedError(RearchiveError):
    """The source still gives the flush's records back, unchanged: rearchive it, do not abandon it."""


class NoSource:
    """Stands for the source where none was given (``--bootstrap-servers`` left out): every read
    says so, and the flush is not abandoned for a Kafka stream."""

    def records(self, partition: PartitionId, first: int, last: int) -> Any:
        raise SourceNotGivenError(
            "give --bootstrap-servers: a Kafka stream's flush is abandoned only once Kafka is found not to hold it"
        )


class SourceNotGivenError(RearchiveError):
    """A Kafka stream's flush cannot be abandoned without asking Kafka first."""


@dataclass
class AbandonReport:
    stream: str
    partition: PartitionId
    first: int
    last: int
    flushes: list[AbandonedFlush] = field(default_factory=list)
    by_another_run: list[str] = field(default_factory=list)  # flush ids a concurrent run settled first

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
            "by_another_run": self.by_another_run,
        }


class Abandoner:
    def __init__(self, writer: PartitionWriter, ledger: Ledger, source: RecordSource) -> None:
        self._writer = writer
        self._ledger = ledger
        self._rearchiver = Rearchiver(writer, ledger, source)

    def run(self, first: int, last: int, reason: str) -> AbandonReport:
        """Abandon every quarantined flush of the writer's partition in offsets ``first..last``
        whose records the source cannot give back; refused (nothing changed for that flush and
        those after it) at the first one it still can."""
        if not reason.strip():
            raise RearchiveError("--reason: say why the records are given up (it is kept in the ledger)")
        stream, partition = self._writer.stream, self._writer.partition
        state = self._ledger.load(stream.name, partition)
        report = AbandonReport(stream.name, partition, first, last)
        for held in flushes_in_range(state, first, last):
            checked = self._unrecoverable(state, held)
            record = self._writer.abandon(held.flush.flush_id, reason.strip(), checked)
            if record is None:
                report.by_another_run.append(held.flush.flush_id)
            else:
                report.flushes.append(record)
        return report

    def _unrecoverable(self, state: PartitionState, held: QuarantinedFlush) -> str:
        """Why the source cannot give the flush's records back; ``StillRetainedError`` if it can."""
        try:
            for _frame in self._rearchiver.refetched(state, held)():
                pass
        except (NotRetainedError, RefetchMismatchError, UnsupportedSourceError) as exc:
            return str(exc)
        raise StillRetainedError(
            f"{describe(held)}: the source still holds these records unchanged: run `tidemark rearchive` for "
            "it instead (abandoning is for records no command can archive any more)"
        )
