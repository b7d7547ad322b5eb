"""Where a partition's positions come from, behind the one interface the writer calls.

A Kafka partition or a Kinesis shard carries its positions (offsets, sequence numbers): the
writer archives them as delivered (``SourcePositions``). A queue has none: the ledger numbers
what it accepts, and an index of message ids drops redeliveries (``QueueNumbering``). The
``PartitionWriter`` never asks which one it serves; it calls:

* ``adopt(state)`` whenever it takes on a state it did not write itself -- read from the ledger,
  or handed back by a conditional write it lost -- before it acts on that state. For a queue the
  index catches up there with the accepted positions it lacks (from their staged segments), so
  *every accepted id is indexed before its segment can be sealed, flushed and deleted* holds on
  every path by construction, whichever step adopted the state (a rotation, a flush, making room
  in the ledger item, a renumbering);
* ``stage(records, state, outcome, stage)`` for a delivered batch;
* ``before_accept``, ``accept_lost`` and ``accepted`` around each ledger accept of a chunk.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from tidemark.clock import Clock
from tidemark.config.model import DedupeConfig
from tidemark.dedupe import DedupeIndex, digest
from tidemark.dedupe.exceptions import DedupeIndexDamagedError
from tidemark.exceptions import CorruptSegmentError, StaleNumberingError
from tidemark.ledger.model import PartitionState
from tidemark.records.model import Record
from tidemark.sources import PartitionId
from tidemark.staging.store import SegmentStore
from tidemark.writer.outcome import BatchOutcome

if TYPE_CHECKING:
    from tidemark.dedupe.rebuild import ArchivedIds

logger = logging.getLogger(__name__)

# A queue's batch numbered on a stale state is renumbered from a fresh read this many times.
RENUMBER_ATTEMPTS = 3

#: ``stage(records, state, outcome)``: the writer's dedupe -> route -> segments -> accept
Stage = Callable[[Sequence[Record], PartitionState, BatchOutcome], PartitionState]


class Positions(Protocol):
    """How a partition's records get their positions, and what holds whenever the writer takes
    on a state."""

    #: why a position epoch cannot start here (``None``: it can)
    epoch_refusal: str | None

    def pinned_source(self, source: str) -> str:
        """The identity of the log the positions belong to, as the ledger pins it ("" : none)."""

    def adopt(self, state: PartitionState) -> None:
        """``state`` was read or handed back by a lost write: make it safe to act on."""

    def stage(
        self, records: Sequence[Record], state: PartitionState, outcome: BatchOutcome, stage: Stage
    ) -> PartitionState:
        """Stage a delivered batch with ``stage``; the state after it."""

    def before_accept(self, state: PartitionState) -> None:
        """Raise ``StaleNumberingError`` if the batch's positions no longer fit ``state``."""

    def accept_lost(self, winner: PartitionState, state: PartitionState) -> None:
        """Our accept lost to ``winner`` (not ours): raise ``StaleNumberingError`` if the
        batch's positions were given after a position ``winner`` has since moved."""

    def accepted(self, offsets: Sequence[int], state: PartitionState) -> None:
        """``offsets`` were accepted, giving ``state``."""

    def keeps_flushed(self) -> bool:
        """Whether a flushed buffer's segments must be kept (``SegmentStore.keep``), not deleted."""

    def repair(self, state: PartitionState) -> None:
        """A sweep's chance to repair what this source's positions rest on."""


class SourcePositions:
    """A Kafka partition or Kinesis shard: the source's positions, as delivered."""

    epoch_refusal: str | None = None

    def pinned_source(self, source: str) -> str:
        return source  # another log at the same positions is refused (``tidemark.resets``)

    def adopt(self, state: PartitionState) -> None:
        return None

    def stage(
        self, records: Sequence[Record], state: PartitionState, outcome: BatchOutcome, stage: Stage
    ) -> PartitionState:
        return stage(records, state, outcome)

    def before_accept(self, state: PartitionState) -> None:
        return None

    def accept_lost(self, winner: PartitionState, state: PartitionState) -> None:
        return None

    def accepted(self, offsets: Sequence[int], state: PartitionState) -> None:
        return None

    def keeps_flushed(self) -> bool:
        return False

    def repair(self, state: PartitionState) -> None:
        return None


class QueueNumbering:
    """A queue (RabbitMQ): the ledger numbers the messages it accepts ``staged_offset + 1`` on,
    and the index of message ids accepted within the window drops redeliveries.

    The index is written after the accept, so it can lag the ledger -- a crash between the two, or
    another writer's accept -- by the positions ``(indexed_through, staged_offset]``. ``adopt``
    indexes those from the staged segments before anything else happens to the state; a
    position whose segment is gone (flushed before this rule held, or damaged) is logged.
    """

    epoch_refusal: str | None = (
        "a queue's positions are the archive's own numbers, they never go back: epochs are for sources "
        "whose positions can (a recreated Kafka topic)"
    )

    def __init__(
        self,
        *,
        stream: str,
        partition: PartitionId,
        index: DedupeIndex,
        settings: DedupeConfig,
        staging: SegmentStore,
        clock: Clock,
        load: Callable[[], PartitionState],
        archived: Callable[[int], ArchivedIds],
    ) -> None:
        self._stream = stream
        self._partition = partition
        self._index = index
        self._settings = settings
        self._staging = staging
        self._clock = clock
        self._load = load  # a consistent read, adopted (the writer's ``_load``)
        self._log = {"stream": stream, "partition": partition}
        self._numbered: dict[int, bytes] = {}  # position -> digest, as ``number`` numbered the batch
        self._own: dict[int, bytes] = {}  # ... of the positions this run's accepts took, not yet indexed
        self._base = -1  # the staged offset the batch was numbered after (then: its last accepted)
        self._archived = archived  # since_ms -> the ids of objects committed since (a rebuild)
        self._damaged: DedupeIndexDamagedError | None = None  # the index cannot be read or written

    def pinned_source(self, source: str) -> str:
        # The positions are the ledger's own numbers: the broker (or virtual host) a message came
        # from says nothing about them, and a replaced broker must not stop the queue.
        return ""

    # -- the batch ---------------------------------------------------------------------------

    def number(self, records: Sequence[Record], state: PartitionState) -> list[Record]:
        """Drop the messages whose id the partition accepted within the dedupe window, and repeats
        of an id within the batch (the first stays), and number the rest ``staged_offset + 1``
        on, in delivery order. ``state`` is adopted (its ids indexed): should another writer
        accept meanwhile, the accept conflicts and the batch is renumbered or refused."""
        digests = [digest(record, self._settings.id) for record in records]
        seen = self._index.seen(digests, self._clock.now_ms() - self._settings.window_ms)
        numbered: list[Record] = []
        self._numbered = {}
        self._base = state.staged_offset
        position = state.staged_offset + 1
        for record, key in zip(records, digests, strict=True):
            if key in seen:
                continue
            seen.add(key)
            numbered.append(record._replace(offset=position))
            self._numbered[position] = key
            position += 1
        return numbered

    def stage(
        self, records: Sequence[Record], state: PartitionState, outcome: BatchOutcome, stage: Stage
    ) -> PartitionState:
        """Number the batch and stage it. Numbered on a stale state (a warm container whose
        cached state another container moved on), it is renumbered from a fresh read -- as long
        as none of it was accepted: once a chunk was, the batch is refused and redelivered.
        With the index damaged, a batch is refused (the broker keeps it) until a sweep rebuilt it."""
        if records and self._damaged is not None:
            raise DedupeIndexDamagedError(
                f"{self._damaged}; the batch is refused (the broker keeps it) until the next sweep rebuilds the index"
            )
        for attempt in range(1, RENUMBER_ATTEMPTS + 1):
            try:
                return stage(self.number(records, state) if records else [], state, outcome)
            except StaleNumberingError:
                if outcome.staged or attempt == RENUMBER_ATTEMPTS:
                    raise
                outcome.conflicts += 1
                state = self._load()
        raise AssertionError("unreachable")

    # -- around an accept ------------------------------------------------------------------------

    def before_accept(self, state: PartitionState) -> None:
        if self._numbered and state.staged_offset != self._base:
            # Another writer accepted since these messages were numbered (seen after a reload: a
            # rotation, making room, a flush between chunks). Numbers at or below its position
            # would be taken for ours and dropped: refuse, the broker redelivers.
            raise self._stale()

    def accept_lost(self, winner: PartitionState, state: PartitionState) -> None:
        if winner.staged_offset != state.staged_offset:
            raise self._stale()

    def accepted(self, offsets: Sequence[int], state: PartitionState) -> None:
        self._base = offsets[-1]
        self._own.update((offset, self._numbered[offset]) for offset in offsets)
        self.adopt(state)

    def _stale(self) -> StaleNumberingError:
        return StaleNumberingError(
            f"{self._stream}/{self._partition}: another writer accepted messages meanwhile; this batch was "
            "numbered after an older position and is refused (the broker redelivers it)"
        )

    # -- the index catches up --------------------------------------------------------------------

    def keeps_flushed(self) -> bool:
        return self._damaged is not None  # a rebuild reads them: kept until it ran

    def adopt(self, state: PartitionState) -> None:
        try:
            self._catch_up(state)
            return
        except DedupeIndexDamagedError:
            pass  # the connection was dropped: the path is opened afresh once (a sweep may have rebuilt it)
        try:
            self._catch_up(state)
        except DedupeIndexDamagedError as exc:
            if self._damaged is None:
                logger.critical(
                    "dedupe: the index is damaged: batches are refused (the broker keeps them), what is accepted "
                    "is flushed with its segments kept, and the next sweep rebuilds the index",
                    extra={**self._log, "error": str(exc)},
                )
            self._damaged = exc

    def repair(self, state: PartitionState) -> None:
        """Rebuild a damaged index from the partition's staged segments, the segments flushed
        while it was damaged and the objects committed within the window, then set the damaged
        file aside (``<name>.damaged-<ns>``) and delete the kept segments. A rebuild that fails
        leaves the index damaged: the sweep goes on flushing (keeping segments) and the next
        one tries again."""
        if self._damaged is None:
            return
        now = self._clock.now_ms()
        try:
            archived = self._archived(now - self._settings.window_ms)
            entries = list(archived.entries)
            kept = self._staging.kept(self._stream, self._partition)
            # A quarantined flush's segments are damaged or missing: nobody can read its ids (it
            # is a finding of its own). Any other segment that cannot be read fails the rebuild,
            # which the next sweep tries again (one moved to ``kept/`` meanwhile, say).
            quarantined = {s.name for held in state.quarantined.values() for s in held.flush.buffer.segments}
            readable = [segment for segment in state.staged_segments() if segment.name not in quarantined]
            for segments, read in ((readable, self._staging.read), (kept, self._staging.read_kept)):
                for segment in segments:
                    entries += [
                        (digest(frame, self._settings.id), frame.offset, now)
                        for frame in read(self._stream, self._partition, segment)
                        if frame.offset <= state.staged_offset
                    ]
            set_aside = self._index.replace(entries, state.staged_offset)
        except Exception as exc:  # noqa: BLE001 -- any failure: the index stays damaged, flushes keep segments
            logger.error(
                "dedupe: the index could not be rebuilt; the next sweep tries again",
                extra={**self._log, "error": f"{type(exc).__name__}: {exc}"},
            )
            return
        discarded = self._staging.discard_kept(self._stream, self._partition)
        self._damaged = None
        logger.warning(
            "dedupe: the index was rebuilt",
            extra={
                **self._log,
                "entries": len(entries),
                "objects_read": archived.objects,
                "records_without_ids": archived.without_ids,
                "kept_segments_deleted": discarded,
                "quarantined_segments_skipped": len(quarantined),
                "indexed_through": state.staged_offset,
                "set_aside": set_aside,
            },
        )

    def _catch_up(self, state: PartitionState) -> None:
        """Index the ids of accepted positions the index lacks: this run's own accepts from their
        digests, any other's from the staged segments -- walked, never a range of positions, so
        the cost is what is staged, whatever the history (a lost or replaced index lacks every
        position ever accepted)."""
        through = self._index.indexed_through()
        staged = state.staged_offset
        if through > staged:
            logger.error(
                "dedupe: the index is ahead of the ledger (a restored or recreated ledger?): ids it holds above "
                "the ledger's position are taken as archived",
                extra={**self._log, "indexed_through": through, "staged_offset": staged},
            )
        own = [(key, position) for position, key in self._own.items() if position <= staged]
        lacking = staged - max(through, -1) - sum(1 for _key, position in own if position > through)
        if not own and lacking <= 0:
            return
        entries = list(own)
        if lacking > 0:
            found = 0
            for segment in state.staged_segments():
                if segment.last <= through:
                    continue
                try:
                    frames = self._staging.read(self._stream, self._partition, segment)
                except CorruptSegmentError as exc:  # its flush is quarantined; its ids cannot be indexed
                    logger.error("dedupe: an accepted segment cannot be read", extra={**self._log, "error": str(exc)})
                    continue
                for frame in frames:
                    if through < frame.offset <= staged and frame.offset not in self._own:
                        entries.append((digest(frame, self._settings.id), frame.offset))
                        found += 1
            if found < lacking:
                logger.warning(
                    "dedupe: accepted positions no longer staged were not indexed; their ids may be archived again",
                    extra={**self._log, "positions": lacking - found, "indexed_through": through},
                )
        now = self._clock.now_ms()
        self._index.record(
            entries,
            staged,
            now,
            expired_before_ms=now - self._settings.window_ms,
            prune_limit=2 * len(entries) + 100,
        )
        for _key, position in own:
            del self._own[position]  # indexed
