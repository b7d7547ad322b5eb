"""The ledger's public operations; backends implement only the storage primitives."""

from __future__ import annotations

from abc import ABC, abstractmethod

from tidemark.ledger.model import CommittedObject, PartitionState


class Ledger(ABC):
    def load(self, stream: str, partition: int) -> PartitionState:
        """The partition's current state (a strongly consistent read)."""
        state = self._get_state(stream, partition)
        return state if state is not None else PartitionState(stream=stream, partition=partition)

    def save(self, new: PartitionState, previous: PartitionState) -> PartitionState:
        """Write ``new`` only if the stored version is still ``previous.version``.

        Raises ``LedgerConflictError`` (carrying the winning state when the store returns it)
        when another writer got there first.
        """
        self._check_successor(new, previous)
        self._put_state(new, expected_version=previous.version)
        return new

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

    @staticmethod
    def _check_successor(new: PartitionState, previous: PartitionState) -> None:
        if (new.stream, new.partition) != (previous.stream, previous.partition) or new.version != previous.version + 1:
            raise ValueError("new state must be the direct successor of previous")

    # -- storage primitives ------------------------------------------------------------------

    @abstractmethod
    def _get_state(self, stream: str, partition: int) -> PartitionState | None: ...

    @abstractmethod
    def _put_state(self, state: PartitionState, expected_version: int) -> None: ...

    @abstractmethod
    def _put_state_and_object(
        self, state: PartitionState, expected_version: int, committed: CommittedObject
    ) -> None: ...

    @abstractmethod
    def _query_objects(self, stream: str, hour: str) -> list[CommittedObject]: ...
