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
from typing import Protocol

from tidemark.clock import Clock
from tidemark.config.model import DedupeConfig
from tidemark.dedupe import DedupeIndex, digest
from tidemark.exceptions import CorruptSegmentError, StaleNumberingError
from tidemark.ledger.model import PartitionState
from tidemark.records.model import Record
from tidemark.sources import PartitionId
from tidemark.staging.store import SegmentStore
from tidemark.writer.outcome import BatchOutcome

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
        as none of it was accepted: once a chunk was, the batch is refused and redelivered."""
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

    def adopt(self, state: PartitionState) -> None:
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
