"""``tidemark recover``: archive, exactly once, the records the event source mapping never delivered.

A Kafka mapping moves past records without invoking the function in two documented cases: its
schema registry integration could not decode them (``SCHEMA_NOT_FOUND``,
``DESERIALIZATION_ERROR``: dropped, or sent to an on-failure destination), and a batch whose
bounded retries ran out (``archiver.retry_attempts``). Either leaves positions inside the
partition's committed range that no object holds while the log still holds records there.
``tidemark audit`` names them as gaps; ``recover`` reads those records from the log and archives
them: a registry stream's as dead letters (``not_delivered_by_mapping``, the produced bytes,
which only the registry could decode), any other stream's routed as the archiver routes them.

Per partition, current epoch only (the log read is the epoch's own)::

    loop:
      rec := ledger.recovery(partition)                        # generation g, pending unit?
      if rec.pending: finish(rec); continue                     # a run died after its claim
      bounds := epoch bounds of ledger.load(partition)          # lo..hi: everything <= hi committed
      held := positions of the recorded objects of the epoch in lo..hi
      withheld := the log's records at lo..hi not in held, routed (clock: the plan's time)
      units := cut(withheld)                                    # <= 40 objects each
      for unit in units:
        rec := ledger.claim_recovery(rec, unit: ranges, (key, records) per object)   # if still g
          on conflict: another run recovered meanwhile -> plan again
        finish(rec)

    finish(rec):
      read the unit's ranges from the log again, route them (its claim time), render its objects:
        the same keys and counts as claimed, or refused (the unit stays pending)
      upload each object (If-None-Match: our own earlier upload is found identical)
      ledger.finish_recovery(rec, objects)       # objects, their hours' marks, pending cleared
        on conflict: another run finished the unit

Every commit and every claim is fenced by the generation, and a plan is made from the objects
recorded at one generation: a unit claimed never overlaps what another run recovered. Objects
are uploaded only for a claimed unit, under keys fixed by the claim, so a crash leaves either
nothing (no claim), or a claim whose objects a rerun makes again identically, or the unit done.
Positions above ``hi`` (still staged) wait for a later run; so does a record the mapping withheld
after the last one it delivered.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tidemark.audit.auditor import epoch_bounds, missing_ranges
from tidemark.clock import Clock, ManualClock
from tidemark.exceptions import LedgerConflictError, NotRetainedError
from tidemark.faults import AFTER_RECOVERY_CLAIM, AFTER_RECOVERY_COMMIT, CrashPoints, NoCrashes
from tidemark.ledger.base import Ledger
from tidemark.ledger.model import CommittedObject, OpenBuffer, Recovery, RecoveryUnit, SealedFlush
from tidemark.records.model import Record
from tidemark.recover.exceptions import RecoverError, RecoverMismatchError, UnsupportedStreamError
from tidemark.recover.plan import DEFAULT_LIMITS, Limits, PlannedUnit, Withheld, clip, cut
from tidemark.recover.view import ArchiveView
from tidemark.resets import MARK_GRID, fingerprint
from tidemark.routing import NOT_DELIVERED, Router
from tidemark.sources import KAFKA, PartitionId
from tidemark.staging.frames import Frame
from tidemark.staging.segment import decode_segment
from tidemark.staging.store import SegmentRef
from tidemark.writer.partition import PartitionWriter

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = logging.getLogger(__name__)

#: the flush reason of a recovered object (logs and metrics)
RECOVER = "recover"
#: plans a run makes before it gives up on a partition other runs keep recovering
PLANS = 5
#: missing ranges closer than this are read from the log in one pass
READ_SPAN = 10_000
#: records of each read compared with the archive before the log is taken for the epoch's
CHECKED_PER_SPAN = 3

#: one object of a unit: its flush (buffer, key) and its records as staging frames
Rendered = tuple[SealedFlush, list[Frame]]


class LogSource(Protocol):
    """The source log, read again (``tidemark.kafka_log.KafkaLog``)."""

    def records(self, partition: PartitionId, first: int, last: int) -> Iterator[Record]:
        """The records at positions ``first..last``, ascending; ``NotRetainedError`` when the log
        no longer holds ``first``."""
        ...

    def start_offset(self, partition: PartitionId) -> int:
        """The partition's first retained position."""
        ...

    def end_offset(self, partition: PartitionId) -> int:
        """The position the partition's next record will get."""
        ...


@dataclass(frozen=True, slots=True)
class RecoveredUnit:
    first: int
    last: int
    records: int
    keys: tuple[str, ...]
    by_another_run: bool = False  # a concurrent run (or the one a crash interrupted) committed it


@dataclass
class PartitionRecovery:
    stream: str
    partition: PartitionId
    epoch: int = 0
    units: list[RecoveredUnit] = field(default_factory=list)
    not_retained: list[tuple[int, int]] = field(default_factory=list)  # missing, and gone from the log
    unchecked: str = ""  # why nothing could be planned (no committed range yet, say)

    @property
    def records(self) -> int:
        return sum(unit.records for unit in self.units if not unit.by_another_run)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "partition": self.partition,
            "epoch": self.epoch,
            "records": self.records,
            "units": [asdict(unit) for unit in self.units],
            "not_retained": [list(pair) for pair in self.not_retained],
            "unchecked": self.unchecked,
        }


class Recoverer:
    def __init__(
        self,
        writer: PartitionWriter,
        ledger: Ledger,
        s3: S3Client,
        bucket: str,
        source: LogSource,
        *,
        clock: Clock,
        crash_points: CrashPoints | None = None,
        limits: Limits = DEFAULT_LIMITS,
        from_log_start: bool = False,
    ) -> None:
        self._writer = writer
        self._stream = writer.stream
        self._partition = writer.partition
        self._ledger = ledger
        self._s3 = s3
        self._bucket = bucket
        self._source = source
        self._clock = clock
        self._crash = crash_points or NoCrashes()
        self._limits = limits
        # Epoch 0 begins at the first record the ledger accepted; with ``from_log_start`` the
        # operator says the archive was meant to begin at the log's start (a mapping started at
        # TRIM_HORIZON with a group of its own), so what the mapping withheld before the first
        # record it delivered is recovered too.
        self._from_log_start = from_log_start
        config = self._stream.config
        if config.source.shape.kind != KAFKA:
            raise UnsupportedStreamError(
                f"{self._stream.name}: recover reads Kafka; a {config.source.shape.kind} source cannot be read again "
                "by position here"
            )
        self._registry = config.source.schema_registry is not None

    @property
    def _where(self) -> str:
        return f"{self._stream.name}/{self._partition}"

    def run(self) -> PartitionRecovery:
        """Recover every record of the partition's committed range that no object holds."""
        report = PartitionRecovery(self._stream.name, self._partition)
        for _plan in range(PLANS):
            recovery = self._ledger.recovery(self._stream.name, self._partition)
            if recovery.pending is not None:
                self._finish(recovery, None, report)
                continue
            units, now = self._plan(report)
            for unit in units:
                rendered = self._render(unit, report.epoch, now)
                claim = RecoveryUnit(report.epoch, unit.ranges, _named(rendered), now)
                try:
                    recovery = self._ledger.claim_recovery(recovery, claim)
                except LedgerConflictError:
                    break  # another run claimed or finished a unit since the plan: plan again
                self._crash.hit(AFTER_RECOVERY_CLAIM)
                finished = self._finish(recovery, rendered, report)
                if finished is None:
                    break  # another run finished the unit, so it recovered since the plan too: plan again
                recovery = finished
            else:
                return report
        raise RecoverError(f"{self._where}: other recoveries kept changing the partition; run it again")

    # -- planning -----------------------------------------------------------------------------

    def _plan(self, report: PartitionRecovery) -> tuple[list[PlannedUnit], int]:
        state = self._ledger.load(self._stream.name, self._partition)
        report.epoch = state.epoch
        self._check_source(state.source)
        starts = {start.epoch: start for start in self._ledger.epochs(self._stream.name, self._partition)}
        bounds = epoch_bounds(state, state.epoch, starts)
        now = self._clock.now_ms()
        lo, hi = bounds.first, bounds.last
        if not state.version:
            report.unchecked = "the ledger has no state for this partition: nothing archived from it yet"
            return [], now
        if lo is None or hi is None or hi < lo or bounds.empty:
            report.unchecked = "nothing committed in the current epoch yet" if bounds.empty else bounds.unknown
            report.unchecked = report.unchecked or "nothing committed in the current epoch yet"
            return [], now
        start, end = self._source.start_offset(self._partition), self._source.end_offset(self._partition)
        if state.epoch == 0 and self._from_log_start:
            lo = min(lo, start)
        view = ArchiveView(self._stream, self._ledger, self._s3, self._bucket, self._partition, state.epoch, lo, hi)
        missing = list(missing_ranges(view.positions, lo, hi))
        if not missing:
            return [], now
        withheld: list[Withheld] = []
        router = Router(self._stream.config, ManualClock(now))
        starts_of = [first for first, _last in missing]
        for first, last in _spans(missing):
            # What the log no longer holds (retention took its start; a recreated or truncated
            # topic ends before it) is named, never guessed.
            report.not_retained.extend(clip(missing, first, min(last, start - 1)))
            report.not_retained.extend(clip(missing, max(first, end), last))
            first, last = max(first, start), min(last, end - 1)
            if first > last:
                continue
            records = self._read(first, last)
            if records is None:  # retention moved on while the plan read
                report.not_retained.extend(clip(missing, first, last))
                continue
            self._check_log(view, records, state.epoch, first, last)
            wanted = [record for record in records if _within(missing, starts_of, record.offset)]
            withheld.extend(self._route(router, wanted))
        report.not_retained = _merged(report.not_retained)
        return cut(missing, withheld, self._limits), now

    def _check_log(self, view: ArchiveView, records: Sequence[Record], epoch: int, first: int, last: int) -> None:
        """The log read is the one the epoch archived. A topic recreated under the same name holds
        other records at the same offsets, and the archiver has not necessarily seen it yet."""
        if self._registry:
            self._check_against_archive(view, records, first, last)
        else:
            self._check_against_marks(records, epoch, first, last)

    def _check_against_marks(self, records: Sequence[Record], epoch: int, first: int, last: int) -> None:
        """Every record read where the ledger keeps a mark (an accept's ends, its first record in
        each run of 16 offsets) is the one marked there -- the produced bytes, value included --
        and at least one is."""
        marks = self._ledger.marks(self._stream.name, self._partition, epoch, [record.offset for record in records])
        checked = 0
        for record in records:
            known = marks.get(record.offset)
            if known:
                if fingerprint(record) not in known:
                    raise self._another_log(record.offset)
                checked += 1
        if not checked:
            raise RecoverMismatchError(
                f"{self._where} offsets {first}..{last}: no record the log holds there matches a mark of the ledger "
                "(marks expire after 400 days): recover does not guess that this is the log the epoch archived"
            )

    def _check_against_archive(self, view: ArchiveView, records: Sequence[Record], first: int, last: int) -> None:
        """A schema registry stream's marks are of the values the mapping decoded, not of the bytes
        in the log: a few records the log holds where the archive holds one too must be the ones
        archived there -- the same timestamp, and the same key and headers where the format keeps
        them (the key unless the integration decoded it) -- and at least one is compared."""
        registry = self._stream.config.source.schema_registry
        key_decoded = registry is not None and "key" in registry.validate_parts
        compared = 0
        for record in records:
            if compared == CHECKED_PER_SPAN:
                return
            archived = view.archived_at(record.offset)
            if archived is None or archived.timestamp_ms is None:
                continue
            same = archived.timestamp_ms == record.timestamp_ms
            if archived.key is not None and not key_decoded:
                same = same and archived.key == record.key
            if archived.headers is not None:
                same = same and tuple(archived.headers) == tuple(record.headers)
            if not same:
                raise self._another_log(record.offset)
            compared += 1
        if not compared:
            raise RecoverMismatchError(
                f"{self._where} offsets {first}..{last}: the log holds no record the archive holds too, to tell it "
                "is the log the epoch archived: recover does not guess"
            )

    def _another_log(self, offset: int) -> RecoverMismatchError:
        return RecoverMismatchError(
            f"{self._where} offset {offset}: the log holds another record than the one archived there (a recreated "
            "topic?): start a new epoch (`tidemark epoch start`) instead of recovering"
        )

    def _read(self, first: int, last: int) -> list[Record] | None:
        """The log's records at ``first..last``; ``None`` when it no longer retains ``first``."""
        try:
            return list(self._source.records(self._partition, first, last))
        except NotRetainedError:
            return None

    def _route(self, router: Router, records: Sequence[Record]) -> list[Withheld]:
        if self._registry:  # the mapping alone decodes: what it could not is a dead letter, as produced
            detail = "the event source mapping did not deliver it (its schema registry integration, or retries ran out)"
            return [Withheld(record, router.dead_letter(record, NOT_DELIVERED, detail)) for record in records]
        return [Withheld(record, routed) for record, routed in zip(records, router.route_batch(records), strict=True)]

    # -- finishing ----------------------------------------------------------------------------

    def _finish(
        self, recovery: Recovery, rendered: list[Rendered] | None, report: PartitionRecovery
    ) -> Recovery | None:
        """Upload and commit the pending unit; ``None`` when another run committed it first."""
        unit = recovery.pending
        assert unit is not None
        state = self._ledger.load(self._stream.name, self._partition)
        if state.epoch != unit.epoch:
            raise RecoverMismatchError(
                f"{self._where}: the unit claimed at offsets {unit.ranges[0][0]}..{unit.ranges[-1][1]} is of epoch "
                f"{unit.epoch}; the partition reads epoch {state.epoch}'s log now: its records cannot be read again"
            )
        self._check_source(state.source)
        if rendered is None:  # a claim a run died with: its records, read and routed again
            router = Router(self._stream.config, ManualClock(unit.claimed_ms))
            records: list[Record] = []
            for first, last in unit.ranges:
                records.extend(self._source.records(self._partition, first, last))
            again = PlannedUnit(unit.ranges, tuple(self._route(router, records)))
            rendered = self._render(again, unit.epoch, unit.claimed_ms)
        made = sorted(_named(rendered))
        if made != sorted(unit.objects):
            raise RecoverMismatchError(
                f"{self._where}: offsets {unit.ranges[0][0]}..{unit.ranges[-1][1]} now render {made}, the claim "
                f"names {sorted(unit.objects)}: records compacted or deleted since, or a configuration that routes "
                "them elsewhere now; the unit stays pending"
            )
        committed: list[CommittedObject] = []
        for flush, frames in rendered:
            committed.append(self._writer.upload(flush, lambda frames=frames: iter(frames)))  # type: ignore[misc]
        done = RecoveredUnit(unit.ranges[0][0], unit.ranges[-1][1], unit.records, tuple(key for key, _ in unit.objects))
        try:
            finished = self._ledger.finish_recovery(recovery, committed)
        except LedgerConflictError:
            now = self._ledger.recovery(self._stream.name, self._partition)
            if now.generation > recovery.generation and now.pending != unit:
                report.units.append(RecoveredUnit(done.first, done.last, done.records, done.keys, by_another_run=True))
                return None
            raise
        self._crash.hit(AFTER_RECOVERY_COMMIT)
        logger.warning(
            "records the event source mapping never delivered archived from the log",
            extra={"stream": self._stream.name, "partition": self._partition, "records": unit.records},
        )
        report.units.append(done)
        return finished

    def _render(self, unit: PlannedUnit, epoch: int, claimed_ms: int) -> list[Rendered]:
        """Each object of the unit: its flush (buffer, key) and its frames, as staging would hold them."""
        rendered = []
        for key, items in unit.buffers.items():
            [pending] = self._stream.encoder.encode([item.record for item in items], [item.routed for item in items])
            encoded = pending.encoded
            name = f"recovered-{pending.first}"
            segment = SegmentRef(name, pending.records, len(encoded), pending.first, pending.last)
            buffer = OpenBuffer(key, 0, claimed_ms, claimed_ms, (segment,), self._stream.spec_for(key))
            flush = SealedFlush(buffer, self._stream.object_key(self._partition, buffer, epoch), RECOVER, claimed_ms)
            rendered.append((flush, decode_segment(encoded)))
        return rendered

    def _check_source(self, source: str) -> None:
        topic = self._stream.config.source.topic
        if source and source.rsplit("/", 1)[-1] != topic:
            raise RecoverMismatchError(
                f"{self._where}: the partition archives {source!r} now, not topic {topic!r}: its offsets name records "
                "of another log"
            )


def _named(rendered: list[Rendered]) -> tuple[tuple[str, int], ...]:
    """The ``(key, records)`` of each object, as a claim names them."""
    return tuple((flush.object_key, flush.buffer.records) for flush, _frames in rendered)


def _within(missing: Sequence[tuple[int, int]], starts: list[int], position: int) -> bool:
    index = bisect_right(starts, position) - 1
    return index >= 0 and missing[index][0] <= position <= missing[index][1]


def _spans(missing: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The missing ranges grouped into reads (ranges closer than ``READ_SPAN`` in one), each
    widened by one position on both sides and then to whole runs of ``MARK_GRID`` offsets: a read
    takes in the records the archiver accepted next to what is missing -- and the first record of
    their accept in each run of 16 offsets, which the ledger marks -- so it can tell whether the
    log is still the epoch's. (Positions read beyond the missing ones are only compared.)"""
    spans: list[tuple[int, int]] = []
    for first, last in missing:
        first = max(0, first - 1 - (first - 1) % MARK_GRID)
        last = last + 1 - (last + 1) % MARK_GRID + MARK_GRID - 1
        if spans and first - spans[-1][1] <= READ_SPAN:
            spans[-1] = (spans[-1][0], max(spans[-1][1], last))
        else:
            spans.append((first, last))
    return spans


def _merged(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged
