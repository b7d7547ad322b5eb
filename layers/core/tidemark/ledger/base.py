"""The ledger's public operations; backends implement only the storage primitives."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tidemark.exceptions import InvalidTransitionError, LedgerItemTooLargeError
from tidemark.ledger.model import (
    AbandonedFlush,
    CommittedObject,
    EpochStart,
    HourMark,
    PartitionState,
    Recovery,
    RecoveryUnit,
)
from tidemark.sources import PartitionId

# DynamoDB refuses items over 400 KB; nothing that large is ever sent (the writer keeps its own,
# lower budget: ``archive.ledger_item_budget``).
MAX_ITEM_BYTES = 400 * 1024


@dataclass(frozen=True, slots=True)
class PreparedState:
    """A state and its wire form, built ahead of the write (``Ledger.prepare``)."""

    state: PartitionState
    payload: Any


class Ledger(ABC):
    def load(self, stream: str, partition: PartitionId) -> PartitionState:
        """The partition's current state (a strongly consistent read)."""
        state = self._get_state(stream, partition)
        return state if state is not None else PartitionState(stream=stream, partition=partition)

    def prepare(self, new: PartitionState) -> PreparedState:
        """``new`` in the store's own form, ready for ``save``: building it is CPU work (the
        archiver does it while its segments' fsyncs are in flight), sending it is not."""
        return PreparedState(new, self._prepare_state(new))

    def save(
        self, new: PartitionState, previous: PartitionState, prepared: PreparedState | None = None
    ) -> PartitionState:
        """Write ``new`` only if the stored version is still ``previous.version``.

        Raises ``LedgerConflictError`` (carrying the winning state when the store returns it)
        when another writer got there first. ``prepared`` (from ``prepare``) is used only if it
        was prepared from this very state.
        """
        self._check_successor(new, previous)
        payload = prepared.payload if prepared is not None and prepared.state is new else None
        self._put_state(new, expected_version=previous.version, payload=payload)
        return new

    def start_epoch(self, new: PartitionState, previous: PartitionState, record: EpochStart) -> PartitionState:
        """Write the state of a new epoch and its audit record together (conditional on the
        version, like every state write; the record must not exist yet)."""
        self._check_successor(new, previous)
        self._put_state_and_epoch(new, previous.version, record)
        return new

    def abandon(self, new: PartitionState, previous: PartitionState, record: AbandonedFlush) -> PartitionState:
        """Write the state without the quarantined flush and the record of its loss together
        (conditional on the version, like every state write; the record must not exist yet)."""
        self._check_successor(new, previous)
        self._put_state_and_abandoned(new, previous.version, record)
        return new

    def abandoned(self, stream: str, partition: PartitionId) -> list[AbandonedFlush]:
        """Every flush of the partition recorded as lost, by first position."""
        return sorted(self._query_abandoned(stream, partition), key=lambda item: (item.epoch, item.first))

    def epochs(self, stream: str, partition: PartitionId) -> list[EpochStart]:
        """Every epoch start of the partition, oldest first (epoch 0 has no record)."""
        return self._query_epochs(stream, partition)

    def record_marks(
        self, stream: str, partition: PartitionId, epoch: int, marks: Sequence[tuple[int, int]], now_ms: int
    ) -> None:
        """Keep (offset, fingerprint) marks of the epoch's records (see ``tidemark.resets``): an
        idempotent set union, so marks written again, or by a writer that then loses its accept,
        change nothing -- the log held that record at that offset either way."""
        if marks:
            self._add_marks(stream, partition, epoch, marks, now_ms)

    def marks(
        self, stream: str, partition: PartitionId, epoch: int, offsets: Sequence[int]
    ) -> Mapping[int, frozenset[int]]:
        """The epoch's marks at those offsets: offset -> every fingerprint recorded there."""
        return self._get_marks(stream, partition, epoch, offsets) if offsets else {}

    def item_size(self, state: PartitionState) -> int:
        """Bytes the state takes as one stored item, as the store counts them."""
        return self._state_item_size(state)

    @staticmethod
    def check_item_size(state: PartitionState, size: int) -> None:
        """Backends call this with the size of the item they are about to send: nothing larger
        than DynamoDB's limit is sent, so the failure is ours, named, and before any write."""
        if size > MAX_ITEM_BYTES:
            raise LedgerItemTooLargeError(
                f"{state.stream}/{state.partition}: state item of {size} bytes exceeds {MAX_ITEM_BYTES}"
            )

    def commit(self, new: PartitionState, previous: PartitionState, committed: CommittedObject) -> PartitionState:
        """Atomically record the object and drop its SEALED flush from the partition state.

        Raises ``LedgerConflictError`` if the state moved, ``DoubleCommitError`` if the object
        was already recorded while its flush was still sealed.
        """
        self._check_successor(new, previous)
        self._put_state_and_object(new, previous.version, committed)
        return new

    def committed_objects(self, stream: str, hour: str) -> list[CommittedObject]:
        """Objects committed for one event hour of a stream (raw and dead-letter)."""
        return self._query_objects(stream, hour)

    def partitions(self, stream: str) -> set[PartitionId]:
        """Partitions of the stream the sweeper has ever seen staging for."""
        return self._get_partitions(stream)

    def register_partitions(self, stream: str, partitions: Iterable[PartitionId]) -> None:
        """Remember partitions (idempotent, additive: a set union in the store)."""
        wanted = set(partitions)
        if wanted:
            self._add_partitions(stream, wanted)

    def hour_marks(self, stream: str, since_hour: str = "") -> list[HourMark]:
        """The stream's hour marks from ``since_hour`` on (every hour that has a commit), in order."""
        return self._query_hour_marks(stream, since_hour)

    def record_manifest(self, mark: HourMark, manifest_key: str, now_ms: int) -> bool:
        """Mark the hour complete up to ``mark.commits``; ``False`` if a commit arrived meanwhile."""
        return self._set_if_commits(
            mark, {"manifest_commits": mark.commits, "manifest_key": manifest_key, "completed_ms": now_ms}
        )

    def mark_dirty(self, mark: HourMark) -> bool:
        """Make the hour dirty for the Spark job (a backfill is about to rewrite its items): a run
        that dies before it records the hour aggregated leaves it for the next scheduled run,
        never half rewritten for good. ``False`` if a commit arrived meanwhile (dirty anyway)."""
        return self._set_if_commits(mark, {"aggregated_commits": -1})

    def record_aggregated(self, mark: HourMark) -> bool:
        """The Spark job aggregated the hour's objects up to ``mark.commits``; ``False`` (the hour
        stays dirty) if an object was committed since the job read the mark."""
        return self._set_if_commits(mark, {"aggregated_commits": mark.commits})

    def record_run(self, stream: str, run_id: str, finished_ms: int, report: dict[str, object]) -> None:
        """Keep what a job run did (hours, object set, counts) next to the marks it consumed."""
        self._put_run(stream, run_id, finished_ms, report)

    def record_reconciled(self, mark: HourMark) -> bool:
        """The hour's objects up to ``mark.commits`` were checked against S3 in full."""
        return self._set_if_commits(mark, {"reconciled_commits": mark.commits})

    def recovery(self, stream: str, partition: PartitionId) -> Recovery:
        """The partition's recoveries (``tidemark recover``): a strongly consistent read."""
        found = self._get_recovery(stream, partition)
        return found if found is not None else Recovery(stream, partition)

    def claim_recovery(self, previous: Recovery, unit: RecoveryUnit) -> Recovery:
        """Fix ``unit`` as the partition's pending recovery, only if the generation is still
        ``previous.generation`` (``LedgerConflictError`` otherwise: another run moved it)."""
        if previous.pending is not None:
            raise InvalidTransitionError(f"{previous.stream}/{previous.partition}: a recovery is already pending")
        claimed = replace(previous, generation=previous.generation + 1, pending=unit)
        self._put_recovery(claimed, previous.generation, ())
        return claimed

    def finish_recovery(self, previous: Recovery, committed: Sequence[CommittedObject]) -> Recovery:
        """Record the pending unit's objects (each new, each hour's mark counting it as a
        commit) and clear the unit, in one transaction, only if the generation is still
        ``previous.generation`` (``LedgerConflictError`` otherwise: another run finished it)."""
        if previous.pending is None:
            raise InvalidTransitionError(f"{previous.stream}/{previous.partition}: no recovery is pending")
        finished = replace(previous, generation=previous.generation + 1, pending=None)
        self._put_recovery(finished, previous.generation, tuple(committed))
        return finished

    @staticmethod
    def _check_successor(new: PartitionState, previous: PartitionState) -> None:
        if (new.stream, new.partition) != (previous.stream, previous.partition) or new.version != previous.version + 1:
            raise ValueError("new state must be the direct successor of previous")

    # -- storage primitives ------------------------------------------------------------------

    @abstractmethod
    def _get_state(self, stream: str, partition: PartitionId) -> PartitionState | None: ...

    def _prepare_state(self, state: PartitionState) -> Any:
        """The backend's wire form of ``state`` for ``_put_state``; ``None`` if it has none."""
        return None

    @abstractmethod
    def _put_state(self, state: PartitionState, expected_version: int, payload: Any = None) -> None:
        """Conditional put of the state item (``payload``: ``_prepare_state(state)``, or ``None``
        to build it now); checks the item's size with ``check_item_size`` first."""

    @abstractmethod
    def _put_state_and_object(
        self, state: PartitionState, expected_version: int, committed: CommittedObject
    ) -> None: ...

    @abstractmethod
    def _put_state_and_epoch(self, state: PartitionState, expected_version: int, record: EpochStart) -> None: ...

    @abstractmethod
    def _get_recovery(self, stream: str, partition: PartitionId) -> Recovery | None: ...

    @abstractmethod
    def _put_recovery(self, recovery: Recovery, expected_generation: int, committed: Sequence[CommittedObject]) -> None:
        """Write ``recovery`` if the stored generation is ``expected_generation`` (0: no item
        yet), with the ``committed`` object items (each new) and their hours' marks, atomically;
        ``LedgerConflictError`` when the generation moved."""

    @abstractmethod
    def _put_state_and_abandoned(
        self, state: PartitionState, expected_version: int, record: AbandonedFlush
    ) -> None: ...

    @abstractmethod
    def _query_abandoned(self, stream: str, partition: PartitionId) -> list[AbandonedFlush]: ...

    @abstractmethod
    def _query_epochs(self, stream: str, partition: PartitionId) -> list[EpochStart]: ...

    @abstractmethod
    def _state_item_size(self, state: PartitionState) -> int: ...

    @abstractmethod
    def _add_marks(
        self, stream: str, partition: PartitionId, epoch: int, marks: Sequence[tuple[int, int]], now_ms: int
    ) -> None: ...

    @abstractmethod
    def _get_marks(
        self, stream: str, partition: PartitionId, epoch: int, offsets: Sequence[int]
    ) -> dict[int, frozenset[int]]: ...

    @abstractmethod
    def _get_object(
        self, stream: str, hour: str, kind: str, partition: PartitionId, first: int, epoch: int
    ) -> CommittedObject | None:
        """The committed-object item of that identity, if any (a consistent read)."""

    def committed_object(
        self, stream: str, hour: str, kind: str, partition: PartitionId, first: int, epoch: int = 0
    ) -> CommittedObject | None:
        return self._get_object(stream, hour, kind, partition, first, epoch)

    @abstractmethod
    def _query_objects(self, stream: str, hour: str) -> list[CommittedObject]: ...

    @abstractmethod
    def _get_partitions(self, stream: str) -> set[PartitionId]: ...

    @abstractmethod
    def _add_partitions(self, stream: str, partitions: set[PartitionId]) -> None: ...

    @abstractmethod
    def _put_run(self, stream: str, run_id: str, finished_ms: int, report: dict[str, object]) -> None: ...

    @abstractmethod
    def _query_hour_marks(self, stream: str, since_hour: str) -> list[HourMark]: ...

    @abstractmethod
    def _set_if_commits(self, mark: HourMark, values: dict[str, int | str]) -> bool:
        """Set ``values`` on the hour's mark only if its ``commits`` still equals ``mark.commits``."""
