"""The per-(stream, partition) writer: one explicit state machine for the exactly-once protocol.

One run (``write`` for a batch, ``maintain`` with no records) always goes through the same
steps, each a method below; DESIGN.md has the protocol as pseudo-code with its crash points::

    recover   finish every SEALED flush left behind, delete garbage segments
    number    a source without offsets (RabbitMQ): drop ids accepted within the window, number
              the rest (``tidemark.writer.positions``: every state the writer adopts -- read, or a
              lost write's winner -- first has the ids of its accepted positions indexed)
    stage     dedupe -> route -> write segments -> ledger accept (fenced by version)
    rotate    seal the OPEN buffers a rotation rule fires for
    flush     for each SEALED flush: render+upload -> ledger commit -> delete its segments

The sweeper runs ``maintain`` (recover + rotate + flush) through exactly the same code;
``drain`` is the same run with every OPEN buffer due (rotation reason ``drain``).
"""

from __future__ import annotations

import logging
import secrets
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from operator import attrgetter, itemgetter, lt
from typing import TYPE_CHECKING, BinaryIO

from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import BotoCoreError, ClientError

from tidemark.buffers import RAW_KIND, BufferKey
from tidemark.clock import Clock
from tidemark.dedupe import DedupeIndex
from tidemark.exceptions import (
    CorruptSegmentError,
    DoubleCommitError,
    InvalidTransitionError,
    LedgerConflictError,
    LedgerFullError,
    ObjectConflictError,
    PositionResetError,
    StagingConflictError,
    UnsupportedSegmentError,
)
from tidemark.faults import (
    AFTER_ACCEPT,
    AFTER_COMMIT,
    AFTER_SEAL,
    AFTER_UPLOAD,
    BEFORE_UPLOAD,
    DURING_CLEANUP,
    CrashPoints,
    NoCrashes,
)
from tidemark.ledger.base import Ledger
from tidemark.ledger.model import AbandonedFlush, CommittedObject, EpochStart, PartitionState, SealedFlush
from tidemark.objects.content import ContentDigest
from tidemark.objects.keys import epoch_of_key
from tidemark.objects.writer import ObjectStore
from tidemark.records.model import Record
from tidemark.resets import MarkLookup, check_positions, fingerprint, marks_of
from tidemark.routing import Routed
from tidemark.sources import PartitionId
from tidemark.staging.frames import Frame
from tidemark.staging.store import SegmentRef, SegmentStore
from tidemark.writer.budget import ItemBudget
from tidemark.writer.outcome import BatchOutcome, FlushOutcome
from tidemark.writer.positions import Positions, QueueNumbering, SourcePositions
from tidemark.writer.stream import StreamContext

if TYPE_CHECKING:
    from tidemark.dedupe.rebuild import ArchivedIds

_BUFFER = itemgetter(0)  # of a Routed
_EVENT_MS = itemgetter(2)  # of a Routed
_ROUTE = itemgetter(1)  # of an (offset, Routed) pair

logger = logging.getLogger(__name__)

FORMAT_CHANGED = "format_changed"
LEDGER_BUDGET = "ledger_budget"  # sealed to make room in the partition's ledger item
DRAIN = "drain"  # an operator (or the demo's last step) asked for every open buffer to be written now
REARCHIVE = "rearchive"  # a quarantined flush archived from its records fetched again from the source
# A rearchive races a live partition: every accepted batch moves the state's version.
REARCHIVE_ATTEMPTS = 20

# A warm container lists the staging directory (a network round trip on EFS) at most this often
# per partition; a cold start and every maintenance run always do.
GC_INTERVAL_MS = 60_000
# How far ahead of processing time an event time may move the partition's watermark.
MAX_EVENT_LEAD_MS = 5 * 60_000


def _archived_ids(
    ledger: Ledger, objects: ObjectStore, stream: StreamContext, partition: PartitionId, since_ms: int, clock: Clock
) -> ArchivedIds:
    """The ids of a queue's objects committed since ``since_ms`` (a damaged index's rebuild:
    rare, so its reader -- the object formats' readers and the checker's key parsing -- is
    imported here, off every archiver's cold start)."""
    from tidemark.dedupe.rebuild import archived_ids

    return archived_ids(
        ledger, objects, stream, partition, stream.config.dedupe_settings, since_ms=since_ms, now_ms=clock.now_ms()
    )


def _planned_size() -> int:
    return 10**11 + secrets.randbelow(9 * 10**11)


class PartitionWriter:
    def __init__(
        self,
        stream: StreamContext,
        partition: PartitionId,
        *,
        ledger: Ledger,
        staging: SegmentStore,
        objects: ObjectStore,
        clock: Clock,
        crash_points: CrashPoints | None = None,
        state_cache: dict[tuple[str, PartitionId], PartitionState] | None = None,
        gc_times: dict[tuple[str, PartitionId], int] | None = None,
        dedupe: DedupeIndex | None = None,
    ) -> None:
        self.stream = stream
        self.partition = partition
        self._ledger = ledger
        self._staging = staging
        self._objects = objects
        self._clock = clock
        self._crash = crash_points or NoCrashes()
        self._log = {"stream": stream.name, "partition": partition}
        # Last state this process read or wrote, kept across warm invocations: it spares a
        # read per batch. It may be stale; every write is conditional on its version, and a
        # lost write hands back the current state. Garbage collection only ever runs on a
        # state known to be the stored one at that instant (just read or just written).
        self._cache = state_cache if state_cache is not None else {}
        self._gc_times = gc_times if gc_times is not None else {}
        self._key = (stream.name, partition)
        self._budget = ItemBudget(
            ledger, int(stream.archive.ledger_item_budget), stream.config.source.shape.position_digits
        )
        self._key_bound = stream.max_key_length  # no object key of this partition is longer
        # No new buffer's spec and folders are longer.
        self._buffer_extra = (
            max(len(stream.spec), len(stream.errors_spec)) + stream.config.partition_by.max_folders_length
        )
        # Where positions come from: the source's own, or (a queue) the ledger's numbering with an
        # index of message ids, caught up whenever a state is adopted (``_load``, ``_winner``).
        self._positions: Positions = (
            SourcePositions()
            if dedupe is None
            else QueueNumbering(
                stream=stream.name,
                partition=partition,
                index=dedupe,
                settings=stream.config.dedupe_settings,
                staging=staging,
                clock=clock,
                load=self._load,
                archived=lambda since_ms: _archived_ids(ledger, objects, stream, partition, since_ms, clock),
            )
        )
        self._deadline_ms: int | None = None  # this run's: no flush starts after it (``write``)
        self._deferred: set[str] = set()  # flushes this run left SEALED past its deadline

    # -- the run ------------------------------------------------------------------------------

    def write(
        self,
        records: Sequence[Record],
        *,
        source: str = "",
        fresh: bool = False,
        drain: bool = False,
        deadline_ms: int | None = None,
    ) -> BatchOutcome:
        """Archive one delivered batch of this partition. Returns only when every record is in a
        ledger-accepted segment (raw or dead-letter), so the caller may let offsets commit.

        ``source`` identifies the log the records come from (``tidemark.resets.source_identity``);
        positions a redelivery cannot explain raise ``PositionResetError`` before anything is
        staged. ``deadline_ms`` (on the clock): no flush starts after it; the flushes left are
        SEALED, counted in ``flushes_deferred``, and resumed by a later run."""
        outcome = BatchOutcome(records_in=len(records))
        self._deadline_ms, self._deferred = deadline_ms, set()
        cached = not fresh and self._key in self._cache
        state = self.recover(outcome, fresh=fresh)
        if fresh:  # a sweep (or a drain): the chance to rebuild what positions rest on
            self._positions.repair(state)
        version = state.version
        state = self._positions.stage(records, state, outcome, self._stager(source))
        if records and cached and state.version == version and not outcome.staged:
            state = self._confirm_duplicates(records, state, outcome, source)
        outcome.duplicates = outcome.records_in - outcome.staged  # redelivered, or dropped by dedupe
        if state.version != version and self._gc_due():  # just written: the stored state right now
            self.collect_garbage(state, outcome)
        state = self.rotate(state, outcome, drain=drain)
        self.flush(state, outcome)
        return outcome

    def _confirm_duplicates(
        self, records: Sequence[Record], cached: PartitionState, outcome: BatchOutcome, source: str
    ) -> PartitionState:
        """A batch wholly at or below a *cached* staged offset is dropped only once the stored
        state confirms it. Within an epoch the staged offset only grows, so a stale cache can only
        under-count what was archived -- but ``tidemark epoch start --from-offset N`` moves it
        back: a warm container whose cache predates the epoch would drop the new epoch's records
        against the old epoch's position, and the mapping would commit past them (loss). One
        consistent read per such batch (a redelivery: rare); a changed state judges it again."""
        stored = self._load()
        if stored.version == cached.version:
            return cached
        logger.info(
            "a batch of duplicates by the cached state is judged again against the stored one",
            extra={**self._log, "cached_epoch": cached.epoch, "stored_epoch": stored.epoch},
        )
        return self._positions.stage(records, stored, outcome, self._stager(source))

    def _stager(self, source: str) -> Callable[[Sequence[Record], PartitionState, BatchOutcome], PartitionState]:
        pinned = self._positions.pinned_source(source)
        return lambda records, state, outcome: self.stage(records, state, outcome, source=pinned)

    def maintain(self, *, deadline_ms: int | None = None) -> BatchOutcome:
        """Recover from a fresh read, then seal and flush whatever is due (idle buffers past
        max age). The sweeper's entry point; it passes its step's deadline (``write``)."""
        return self.write((), fresh=True, deadline_ms=deadline_ms)

    def drain(self) -> BatchOutcome:
        """Like ``maintain``, but every OPEN buffer is sealed and written now, whatever its age:
        before a shutdown, a config change, or at the end of the embedded demo."""
        return self.write((), fresh=True, drain=True)

    def start_epoch(self, first_offset: int, *, source: str = "", reason: str = "") -> EpochStart:
        """Start a new position epoch at ``first_offset`` (the operator's ``tidemark epoch start``).

        One fenced ledger write seals every OPEN buffer under the ending epoch's keys and moves
        the partition to the new epoch; the sealed flushes are uploaded by the next archiver run
        or sweep, which can read the staging mount."""
        if self._positions.epoch_refusal is not None:
            raise InvalidTransitionError(f"{self.stream.name}: {self._positions.epoch_refusal}")
        for _attempt in range(self.stream.archive.max_accept_attempts):
            state = self._load()
            now, ending = self._clock.now_ms(), state.epoch
            started, record = state.start_epoch(
                first_offset,
                source,
                reason,
                lambda buffer, epoch=ending: self.stream.object_key(self.partition, buffer, epoch),  # type: ignore[misc]
                now,
            )
            if not self._budget.fits(started):
                raise LedgerFullError(
                    f"{self.stream.name}/{self.partition}: sealing every open buffer would outgrow the ledger item; "
                    "let the sweeper flush the partition first"
                )
            try:
                self._remember(self._ledger.start_epoch(started, state, record))
            except LedgerConflictError:
                continue
            logger.warning(
                "position epoch started",
                extra={
                    **self._log,
                    "epoch": record.epoch,
                    "first_offset": first_offset,
                    "previous_staged_offset": record.previous_staged_offset,
                    "previous_source": record.previous_source,
                    "source": source or "(adopt the next batch's)",
                    "reason": reason,
                },
            )
            return record
        raise LedgerConflictError(f"{self.stream.name}/{self.partition}: epoch not started, the state kept moving")

    def _gc_due(self) -> bool:
        last = self._gc_times.get(self._key)
        return last is None or self._clock.now_ms() - last >= GC_INTERVAL_MS

    # -- state --------------------------------------------------------------------------------

    def _load(self) -> PartitionState:
        return self._adopt(self._ledger.load(self.stream.name, self.partition))

    def _adopt(self, state: PartitionState) -> PartitionState:
        """Take on a state this writer did not write (read, or a lost write's winner): every
        step that adopts one goes through here, before it seals, flushes or accepts onto it."""
        self._positions.adopt(state)
        return self._remember(state)

    def _remember(self, state: PartitionState) -> PartitionState:
        self._cache[self._key] = state
        return state

    def _winner(self, conflict: LedgerConflictError) -> PartitionState:
        current = conflict.current
        return self._adopt(current) if isinstance(current, PartitionState) else self._load()

    # -- recover ------------------------------------------------------------------------------

    def recover(self, outcome: BatchOutcome, *, fresh: bool = False) -> PartitionState:
        cached = None if fresh else self._cache.get(self._key)
        if cached is not None:
            self._positions.adopt(cached)  # (the index may have been replaced since)
        state = cached if cached is not None else self._load()
        if state.sealed:
            logger.info("resuming sealed flushes", extra={**self._log, "flushes": sorted(state.sealed)})
            state = self.flush(state, outcome, resumed=True)
        if cached is None:
            self.collect_garbage(state, outcome)
        return state

    def collect_garbage(self, state: PartitionState, outcome: BatchOutcome) -> None:
        """Delete segments the ledger does not reference and never will.

        An unreferenced segment whose first offset is at or below the (consistently read)
        staged offset can never be accepted any more (acceptance needs ``first > staged``
        and the staged offset only grows): it is a loser's, a crashed writer's or an already
        committed one. Any other unreferenced segment may belong to a writer still running,
        so it is only removed once older than the grace period.
        """
        referenced = state.referenced_segments()
        now, grace = self._clock.now_ms(), self.stream.archive.segment_grace_ms
        self._gc_times[self._key] = now
        for segment in self._staging.segments(self.stream.name, self.partition, excluding=referenced):
            never_acceptable = segment.first <= state.staged_offset
            if (never_acceptable or now - segment.created_ms > grace) and self._staging.delete(
                self.stream.name, self.partition, segment.name
            ):
                outcome.garbage_segments_deleted += 1

    # -- stage --------------------------------------------------------------------------------

    def stage(
        self, records: Sequence[Record], state: PartitionState, outcome: BatchOutcome, *, source: str = ""
    ) -> PartitionState:
        """Invariants 1-3 and 6: dedupe, write fenced immutable segments, ledger accept.

        The batch is accepted in as few chunks as the ledger item budget allows: usually one. A
        batch that would open more buffers than ``max_open_buffers`` at once, or grow the item
        past the budget, is accepted a prefix (in offset order) at a time, with a rotation and a
        flush between chunks, so the item stays small and every write costs what its chunk holds.
        """
        if not records:
            return state
        reuses = self.stream.config.source.shape.reuses_positions
        try:
            check_positions(state, records, source, reuses_positions=reuses, marks=self._marks(state.epoch))
        except PositionResetError:
            # This container's cached state may predate an epoch another process started: only
            # the stored state can refuse a batch.
            stored = self._load()
            if stored.version == state.version:
                raise
            state = stored
            check_positions(state, records, source, reuses_positions=reuses, marks=self._marks(state.epoch))
        epoch = state.epoch
        offsets, routes, sources = self._route_new(records, state.staged_offset)
        routed = list(zip(offsets, routes, strict=True))
        event_times = list(map(_EVENT_MS, routes))
        conflicts_left = self.stream.archive.max_accept_attempts
        while True:
            if offsets:
                self._positions.before_accept(state)
            start = bisect_right(offsets, state.staged_offset)  # routed ascends: the rest is fresh
            fresh = routed[start:]
            if not fresh:
                break
            if state.epoch != epoch:  # an operator started an epoch meanwhile: judge the batch again
                raise StagingConflictError(f"{self.stream.name}/{self.partition}: epoch changed during the batch")
            if any(
                (buffer := state.buffers.get(str(key))) is not None and buffer.spec != self.stream.spec_for(key)
                for key in set(map(_BUFFER, routes[start:]))
            ):  # the configuration's format changed since these buffers opened: seal them first
                state = self.rotate(state, outcome)
                conflicts_left -= 1
                if conflicts_left <= 0:
                    raise StagingConflictError(
                        f"{self.stream.name}/{self.partition}: could not seal for a format change"
                    )
                continue
            now = self._clock.now_ms()
            chunk = self._chunk(fresh, state, now, source)
            if not chunk:  # the item is full: seal and flush the oldest buffers, then try again
                state = self._make_room(state, outcome)
                continue
            if len(chunk) < len(fresh):
                outcome.chunks += 1
            # A record dated in the future (a producer's clock, a bad field) must not pin the
            # partition's watermark ahead of time: it counts as at most slightly ahead of now.
            end = start + len(chunk)
            latest_event = min(max(event_times[start:end]), now + MAX_EVENT_LEAD_MS)
            ends = {start, end - 1}  # the chunk's first and last record are fingerprinted
            pending = self.stream.encoder.encode(sources[start:end], routes[start:end])
            with self._staging.writing(self.stream.name, self.partition, pending, now) as batch:
                # While the segments' fsyncs are in flight: the accepted state and its ledger
                # item (CPU work). It is sent only once the segments are durable, below.
                written = [(segment.buffer, ref) for segment, ref in zip(pending, batch.refs, strict=True)]
                accepted = state.accept(
                    written,
                    chunk[-1][0],
                    now,
                    self.stream.spec_for,
                    latest_event,
                    source=source,
                    fingerprints=[(sources[i].offset, fingerprint(sources[i])) for i in sorted(ends)],
                )
                prepared = self._ledger.prepare(accepted)
                if reuses:  # the chunk's marks, before its accept (see ``tidemark.resets``)
                    self._ledger.record_marks(
                        self.stream.name, self.partition, epoch, marks_of(sources[start:end]), now
                    )
            try:
                state = self._remember(self._ledger.save(accepted, state, prepared))
            except LedgerConflictError as conflict:
                winner = self._winner(conflict)
                if not self._landed(written, winner):
                    for _key, ref in written:  # a loser's segment is garbage: never read, deleted now
                        self._staging.delete(self.stream.name, self.partition, ref.name)
                    self._positions.accept_lost(winner, state)  # a queue's stale numbers: refused
                    outcome.conflicts += 1
                    logger.warning(
                        "accept lost to a concurrent writer; retrying", extra={**self._log, "why": f"{conflict}"}
                    )
                    if winner.staged_offset != state.staged_offset:
                        # What the winner accepted is now at or below its staged offset, and this
                        # batch's records there would be dropped as duplicates: judged against the
                        # winner first, as any batch is (another log at those offsets is refused).
                        check_positions(
                            winner, records, source, reuses_positions=reuses, marks=self._marks(winner.epoch)
                        )
                    state = winner
                    conflicts_left -= 1
                    if conflicts_left <= 0:
                        raise StagingConflictError(
                            f"{self.stream.name}/{self.partition}: batch not accepted after "
                            f"{self.stream.archive.max_accept_attempts} conflicting attempts"
                        ) from None
                    continue
                # Our own write had landed: its reply was lost and the client's retry found it.
                logger.info("accept landed on a retried request", extra=self._log)
                state = winner
            self._crash.hit(AFTER_ACCEPT)
            self._positions.accepted([offset for offset, _route in chunk], state)
            outcome.staged += len(chunk)
            outcome.bytes_staged += sum(ref.size for _key, ref in written)
            outcome.segments_written += len(written)
            if any(key.kind != RAW_KIND for key, _ref in written):  # only errors buffers hold dead letters
                outcome.dead_lettered.update(item.reason for _offset, item in chunk if item.reason)
            if len(chunk) < len(fresh):  # make room for the next chunk
                state = self.flush(self.rotate(state, outcome), outcome)
        return state

    def _marks(self, epoch: int) -> MarkLookup:
        """The epoch's marks at some offsets (read only for a batch from below the window)."""
        return lambda offsets: self._ledger.marks(self.stream.name, self.partition, epoch, offsets)

    def _chunk(
        self, fresh: list[tuple[int, Routed]], state: PartitionState, now: int, source: str
    ) -> list[tuple[int, Routed]]:
        """The longest prefix of ``fresh`` to accept now: it opens at most ``max_open_buffers``
        new buffers, and the accepted state -- with every OPEN buffer sealed, too -- fits the
        ledger item budget. Empty if not even one record fits."""
        limit = self.stream.policy.max_open_buffers
        distinct = set(map(_BUFFER, map(_ROUTE, fresh)))
        new_buffers = sum(1 for key in distinct if str(key) not in state.buffers)
        if new_buffers <= limit and self._budget.cheap_fits(
            state,
            segments=len(distinct),
            new_buffers=new_buffers,
            buffer_extra=self._buffer_extra,
            key_bound=self._key_bound,
        ):
            return fresh  # the common case: nothing near the budget, nothing built to measure
        end, opened, seen = len(fresh), set[str](), set[int]()
        for index, (_offset, item) in enumerate(fresh):
            if id(item.buffer) in seen:  # the router hands out one key object per buffer: cheap
                continue
            seen.add(id(item.buffer))
            name = str(item.buffer)
            if name not in state.buffers and name not in opened:
                if len(opened) == limit:
                    end = index
                    break
                opened.add(name)
        while end > 0:
            if self._fits(fresh[:end], state, now, source):
                return fresh[:end]
            end //= 2
        return []

    def _make_room(self, state: PartitionState, outcome: BatchOutcome) -> PartitionState:
        """Not one more record fits the ledger item: seal the least recently appended half of the
        OPEN buffers (rotation reason ``ledger_budget``) and flush. Raises ``LedgerFullError`` when
        that frees nothing -- sealed flushes waiting out an S3 outage fill the item -- so the batch
        fails and is redelivered once uploads go through (back-pressure, never loss)."""
        before = (len(state.buffers), len(state.sealed))
        if not outcome.flush_errors:
            state = self.flush(self.rotate(state, outcome, make_room=True), outcome)
        if outcome.flush_errors or (len(state.buffers), len(state.sealed)) == before:
            raise LedgerFullError(
                f"{self.stream.name}/{self.partition}: no record fits in the ledger item "
                f"({len(state.sealed)} sealed flushes waiting, {len(state.buffers)} open buffers, "
                f"budget {self._budget.budget} bytes); the batch is retried once flushes go through"
            )
        return state

    def _fits(self, chunk: list[tuple[int, Routed]], state: PartitionState, now: int, source: str) -> bool:
        groups: dict[BufferKey, list[tuple[int, Routed]]] = {}
        for pair in chunk:
            groups.setdefault(pair[1].buffer, []).append(pair)
        planned = [
            (
                key,
                # A random 12-digit size: no segment is larger, and it compresses like real ones.
                self._staging.planned_ref(key, items[0][0], items[-1][0], len(items), _planned_size(), now),
            )
            for key, items in groups.items()
        ]
        # Fingerprints are CRC-32s: random-looking numbers compress like the real ones.
        marks = [(chunk[0][0], secrets.randbits(32)), (chunk[-1][0], secrets.randbits(32))]
        accepted = state.accept(planned, chunk[-1][0], now, self.stream.spec_for, source=source, fingerprints=marks)
        return self._budget.fits_sealed(
            accepted, lambda buffer: self.stream.object_key(self.partition, buffer, state.epoch), self._key_bound
        )

    @staticmethod
    def _landed(written: list[tuple[BufferKey, SegmentRef]], winner: PartitionState) -> bool:
        """Did a "lost" accept in fact succeed? A conditional put whose reply was lost (a read
        timeout, a 500) is retried by the client and then fails against its own result. Segment
        names carry a random nonce, so if the stored state references one of ours, the write was
        ours -- and deleting those segments would lose the batch."""
        return not {ref.name for _key, ref in written}.isdisjoint(winner.referenced_segments())

    def _route_new(self, records: Sequence[Record], staged_offset: int) -> tuple[list[int], list[Routed], list[Record]]:
        """Route each offset above ``staged_offset`` once, in offset order (dedupe on entry):
        the offsets, their routes and the records those came from, index for index."""
        offsets = [record.offset for record in records]
        if not all(map(lt, offsets, islice(offsets, 1, None))):  # ascending, no repeats: the ESM's norm
            unique: dict[int, Record] = {}
            for record in records:
                unique.setdefault(record.offset, record)
            records = sorted(unique.values(), key=lambda record: record.offset)
            offsets = [record.offset for record in records]
        start = bisect_right(offsets, staged_offset)
        sources = list(records[start:])
        return offsets[start:], self.stream.router.route_batch(sources), sources

    # -- rotate -------------------------------------------------------------------------------

    def _due(self, state: PartitionState, now: int, drain: bool, make_room: bool = False) -> dict[str, str]:
        """The flush policy's rules, plus: a buffer staged under another format is sealed; and,
        to make room in the ledger item, the least recently appended half of the rest."""
        if drain:
            return dict.fromkeys(state.buffers, DRAIN)
        due = self.stream.policy.due(state.buffers, now)
        for key, buffer in state.buffers.items():
            if buffer.spec != self.stream.spec_for(buffer.key):
                due.setdefault(key, FORMAT_CHANGED)
        if make_room:
            rest = sorted((b.appended_ms, b.seq, key) for key, b in state.buffers.items() if key not in due)
            for _appended, _seq, key in rest[: max(1, len(rest) // 2)]:
                due[key] = LEDGER_BUDGET
        return due

    def rotate(
        self, state: PartitionState, outcome: BatchOutcome, *, drain: bool = False, make_room: bool = False
    ) -> PartitionState:
        """Seal every OPEN buffer a rotation rule fires for (invariant 4: seal before upload)."""
        for _attempt in range(self.stream.archive.max_accept_attempts):
            now = self._clock.now_ms()
            due = self._due(state, now, drain, make_room)
            if not due:
                return state
            sealed = self._seal_within_budget(state, due, now)
            if sealed is None:
                logger.warning(
                    "no buffer can be sealed within the ledger item budget; they stay open until flushes go through",
                    extra={**self._log, "sealed_waiting": len(state.sealed), "due": len(due)},
                )
                return state
            due = {name: reason for name, reason in due.items() if name not in sealed.buffers}  # what was sealed
            try:
                state = self._remember(self._ledger.save(sealed, state))
            except LedgerConflictError as conflict:
                outcome.conflicts += 1
                state = self._winner(conflict)
                continue
            self._crash.hit(AFTER_SEAL)
            logger.info("sealed buffers", extra={**self._log, "sealed": due})
            return state
        logger.warning("could not seal after repeated conflicts; next run retries", extra=self._log)
        return state

    def _seal_within_budget(self, state: PartitionState, due: dict[str, str], now: int) -> PartitionState | None:
        """Seal ``due``, or as many of them as the ledger item budget allows (oldest first), or
        ``None`` if not even one fits. An accept leaves room to seal everything (with a margin),
        so trimming is for states written before the budget existed, or a backlog of flushes
        waiting out an S3 outage."""
        epoch = state.epoch
        keys = sorted(due, key=lambda name: (state.buffers[name].appended_ms, state.buffers[name].seq))
        while keys:
            chosen = {name: due[name] for name in keys}
            sealed = state.seal(chosen, lambda buffer: self.stream.object_key(self.partition, buffer, epoch), now)
            if self._budget.fits(sealed):
                return sealed
            keys = keys[: len(keys) // 2]
        return None

    # -- flush --------------------------------------------------------------------------------

    def flush(self, state: PartitionState, outcome: BatchOutcome, *, resumed: bool = False) -> PartitionState:
        """Upload and commit every SEALED flush in ``state``; failures leave it sealed for later.

        After a storage failure the rest wait for a later run: each would wait out the same
        outage through every retry, and the invocation's time is better spent staging. So do
        those left when the run's deadline has passed (a sweep's time budget): a flush already
        started runs to its end, none starts after it."""
        deferred = 0
        for flush_id in sorted(state.sealed):
            flush = state.sealed.get(flush_id)
            if flush is None:
                continue
            if outcome.flush_errors:  # this run already met a storage failure
                deferred += 1
                continue
            if self._deadline_ms is not None and self._clock.now_ms() >= self._deadline_ms:
                deferred += 1
                self._deferred.add(flush_id)  # (a run flushes twice: resumed, then rotated)
                outcome.flushes_deferred = len(self._deferred)
                continue
            try:
                state = self._flush_one(flush, state, outcome, resumed)
            except (CorruptSegmentError, ObjectConflictError) as exc:
                # Damaged or missing segments, or another object under the key: set aside, never
                # uploaded over anything, and the partition keeps flowing.
                state = self._quarantine(flush, str(exc), state, outcome)
            except (
                BotoCoreError,
                ClientError,
                S3UploadFailedError,
                OSError,
                LedgerConflictError,
                ImportError,
                UnsupportedSegmentError,
            ) as exc:
                # S3 or the spool disk failed, or the buffer's format library is missing (the
                # formats layer removed by a deploy while buffers of that format were staged), or
                # a newer version staged a segment this one cannot read (a rollback): the flush
                # stays sealed (counted, alarmed) and a later run resumes it. Anything else (a
                # bug) propagates and fails the invocation.
                state = self._load()
                if flush_id not in state.sealed:
                    logger.info("flush finished by a concurrent writer", extra={**self._log, "flush": flush_id})
                    continue
                outcome.flush_errors += 1
                logger.exception(
                    "flush failed; it stays sealed and is resumed later",
                    extra={**self._log, "flush": flush_id, "error": str(exc)},
                )
        if deferred:
            logger.warning(
                "flushes deferred to a later run",
                extra={
                    **self._log,
                    "deferred": deferred,
                    "reason": "storage failure" if outcome.flush_errors else "deadline",
                },
            )
        return state

    def _quarantine(
        self, flush: SealedFlush, error: str, state: PartitionState, outcome: BatchOutcome
    ) -> PartitionState:
        """Set a damaged flush aside so the partition keeps flowing (see ``QuarantinedFlush``).

        Blocking the partition instead would let Kafka's retention expire every record behind
        it; quarantined, only this flush's offsets need an operator, and the ledger names them.
        """
        error = error[:2000]  # the ledger item keeps it; the log line has it whole anyway
        for _attempt in range(self.stream.archive.max_accept_attempts):
            if flush.flush_id in state.quarantined:
                # Our own write landed and its reply was lost (the client's retry then failed
                # against it), or a concurrent run quarantined it: either way, say it loudly.
                break
            if flush.flush_id not in state.sealed:
                return state  # committed by a concurrent run after all
            try:
                state = self._remember(
                    self._ledger.save(state.quarantine(flush.flush_id, error, self._clock.now_ms()), state)
                )
                break
            except LedgerConflictError as conflict:
                outcome.conflicts += 1
                state = self._winner(conflict)
        else:
            raise LedgerConflictError(f"{flush.flush_id}: could not record the quarantine")
        if flush.flush_id in state.quarantined:
            outcome.quarantined += 1
            logger.critical(
                "flush quarantined: nothing uploaded; replay these offsets from Kafka before retention expires",
                extra={
                    **self._log,
                    "flush": flush.flush_id,
                    "first_offset": flush.buffer.first,
                    "last_offset": flush.buffer.last,
                    "records": flush.buffer.records,
                    "error": error,
                    "object_key": flush.object_key,
                },
            )
        return state

    def _commit_recorded(
        self, state: PartitionState, committed: CommittedObject, settle: Callable[[PartitionState], PartitionState]
    ) -> PartitionState:
        """The object item of this flush exists although the flush is still pending: the STATE item
        was restored or recreated behind the ledger's back. The same object (key and bytes, or the
        same records): drop the flush without recording the object twice. Another one: raise
        ``ObjectConflictError``, and the flush is quarantined -- never a wedged partition."""
        recorded = self._ledger.committed_object(
            self.stream.name, committed.hour, committed.kind, self.partition, committed.first, committed.epoch
        )
        same = recorded is not None and (
            (recorded.key, recorded.sha256) == (committed.key, committed.sha256)
            or (
                bool(recorded.content_sha256)
                and (recorded.key, recorded.content_sha256, recorded.records)
                == (committed.key, committed.content_sha256, committed.records)
            )
        )
        if not same:
            raise ObjectConflictError(
                f"{committed.key}: the ledger already records another object for offsets "
                f"{committed.first}.. of this partition ({recorded.key if recorded else 'unreadable'})"
            )
        logger.warning("object was already recorded; flush dropped without a second record", extra=self._log)
        return self._remember(self._ledger.save(settle(state), state))  # no second object item

    def _frames(self, segments: Sequence[SegmentRef]) -> Iterator[Frame]:
        for segment in segments:  # one segment in memory at a time
            yield from self._staging.read(self.stream.name, self.partition, segment)

    def _flush_one(
        self, flush: SealedFlush, state: PartitionState, outcome: BatchOutcome, resumed: bool
    ) -> PartitionState:
        buffer = flush.buffer
        committed = self._upload(flush, lambda: self._frames(buffer.segments), outcome)
        state, settled = self._settle(
            flush, state, committed, outcome, lambda current: current.commit(flush.flush_id, committed.committed_ms)
        )
        if not settled:
            return state  # a concurrent writer committed the identical object
        outcome.flushes.append(self._flushed(flush, committed, resumed))
        keep = self._positions.keeps_flushed()  # (a queue whose index is damaged: a rebuild reads them)
        for index, segment in enumerate(buffer.segments):
            if keep:
                self._staging.keep(self.stream.name, self.partition, segment)
            else:
                self._staging.delete(self.stream.name, self.partition, segment.name)
            if index == 0:
                self._crash.hit(DURING_CLEANUP)
        return state

    def _upload(
        self, flush: SealedFlush, frames: Callable[[], Iterator[Frame]], outcome: BatchOutcome
    ) -> CommittedObject:
        """Render ``frames`` (the flush's records) with the buffer's own spec and upload them
        conditionally under the flush's key; the object item to record."""
        buffer = flush.buffer
        fmt, spec = self.stream.format_of(buffer)
        context = spec.context(self.partition, flush.object_key)

        content = ContentDigest()

        def render(out: BinaryIO) -> int:
            return fmt.write(content.wrap(frames()), context, out)

        uploaded = self._objects.put(
            flush.object_key,
            render,
            first=buffer.first,
            last=buffer.last,
            content_type=fmt.content_type,
            expected_records=buffer.records,
            before_upload=lambda: self._crash.hit(BEFORE_UPLOAD),
            content=content,
        )
        if uploaded.existing == "adopted":
            outcome.adopted_objects += 1
            logger.warning(
                "object already in S3 with the same records under other bytes: adopted, not overwritten",
                extra={**self._log, "key": flush.object_key, "sha256": uploaded.sha256},
            )
        self._crash.hit(AFTER_UPLOAD)
        return CommittedObject(
            stream=self.stream.name,
            partition=self.partition,
            kind=buffer.key.kind,
            hour=buffer.key.hour,
            key=flush.object_key,
            first=buffer.first,
            last=buffer.last,
            records=uploaded.records,
            size=uploaded.size,
            sha256=uploaded.sha256,
            committed_ms=self._clock.now_ms(),
            epoch=epoch_of_key(flush.object_key),
            content_sha256=uploaded.content_sha256,
        )

    def _settle(
        self,
        flush: SealedFlush,
        state: PartitionState,
        committed: CommittedObject,
        outcome: BatchOutcome,
        settle: Callable[[PartitionState], PartitionState],
        *,
        held: Callable[[PartitionState], Mapping[str, object]] = attrgetter("sealed"),
        attempts: int | None = None,
    ) -> tuple[PartitionState, bool]:
        """One transaction: the object item, and the state ``settle`` makes (the flush dropped
        from where ``held`` finds it: SEALED, or QUARANTINED for a rearchive). ``(state, False)``
        when a concurrent run settled the flush first."""
        for _attempt in range(attempts or self.stream.archive.max_accept_attempts):
            try:
                state = self._remember(self._ledger.commit(settle(state), state, committed))
                break
            except DoubleCommitError:
                state = self._commit_recorded(state, committed, settle)
                break
            except LedgerConflictError:
                outcome.conflicts += 1
                state = self._load()
                if flush.flush_id not in held(state):
                    return state, False
        else:
            raise LedgerConflictError(f"{flush.object_key}: commit kept losing to concurrent writers")
        self._crash.hit(AFTER_COMMIT)
        logger.info(
            "committed object",
            extra={**self._log, "key": flush.object_key, "records": committed.records, "reason": flush.reason},
        )
        return state, True

    def _flushed(self, flush: SealedFlush, committed: CommittedObject, resumed: bool, reason: str = "") -> FlushOutcome:
        return FlushOutcome(
            stream=self.stream.name,
            partition=self.partition,
            key=flush.object_key,
            kind=committed.kind,
            hour=committed.hour,
            reason=reason or flush.reason,
            records=committed.records,
            size=committed.size,
            latency_ms=max(committed.committed_ms - flush.sealed_ms, 0),
            resumed=resumed,
        )

    def upload(self, flush: SealedFlush, frames: Callable[[], Iterator[Frame]]) -> CommittedObject:
        """Render ``frames`` with ``flush``'s buffer spec and upload them conditionally under its
        key, as a flush does (412 with the same records: fine), recording nothing: the object
        item to record. For objects no staged buffer holds (``tidemark recover``)."""
        return self._upload(flush, frames, BatchOutcome())

    # -- rearchive ----------------------------------------------------------------------------

    def rearchive(self, flush_id: str, frames: Callable[[], Iterator[Frame]]) -> FlushOutcome | None:
        """Archive a QUARANTINED flush from its records fetched again from the source
        (``tidemark rearchive``): ``frames`` must yield exactly the flush's records, as staging
        held them. They are rendered with the buffer's own spec and uploaded conditionally under
        the flush's own key -- the object it would have had -- and one transaction records the
        object and drops the quarantine entry, as a commit does for a SEALED flush. A rerun after
        a crash finds its own object (412, same SHA-256) and finishes; ``None`` when a concurrent
        rearchive finished first. Needs no staging mount: the damaged segments, no longer
        referenced, are garbage for the next archiver run or sweep."""
        state = self._load()
        quarantined = state.quarantined.get(flush_id)
        if quarantined is None:
            raise InvalidTransitionError(f"{self.stream.name}/{self.partition}: flush {flush_id} is not quarantined")
        flush, outcome = quarantined.flush, BatchOutcome()
        committed = self._upload(flush, frames, outcome)
        state, settled = self._settle(
            flush,
            state,
            committed,
            outcome,
            lambda current: current.rearchived(flush_id, committed.committed_ms),
            held=attrgetter("quarantined"),
            attempts=REARCHIVE_ATTEMPTS,
        )
        if not settled:
            return None
        logger.warning(
            "quarantined flush rearchived from the source",
            extra={**self._log, "flush": flush_id, "key": flush.object_key, "records": committed.records},
        )
        return self._flushed(flush, committed, resumed=False, reason=REARCHIVE)

    def abandon(self, flush_id: str, reason: str, checked: str) -> AbandonedFlush | None:
        """Record a QUARANTINED flush as lost and drop it from the state, in one transaction
        (``tidemark abandon``, once the source was found not to hold its records: ``checked``
        says how). ``None`` when it is no longer quarantined (a concurrent run rearchived or
        abandoned it). Its segment files, no longer referenced, are garbage from then on."""
        for _attempt in range(REARCHIVE_ATTEMPTS):
            state = self._load()
            held = state.quarantined.get(flush_id)
            if held is None:
                return None
            now = self._clock.now_ms()
            flush = held.flush
            segments = tuple((segment.first, segment.last, segment.records) for segment in flush.buffer.segments)
            record = AbandonedFlush(
                flush_id, flush.object_key, epoch_of_key(flush.object_key), segments, reason, checked, now
            )
            try:
                self._remember(self._ledger.abandon(state.rearchived(flush_id, now), state, record))
            except LedgerConflictError:
                continue  # the partition is live: read it again
            logger.warning(
                "quarantined flush abandoned: its records are recorded lost",
                extra={**self._log, "flush": flush_id, "records": record.records, "reason": reason},
            )
            return record
        raise LedgerConflictError(f"{self.stream.name}/{self.partition}: abandon kept losing to concurrent writers")
