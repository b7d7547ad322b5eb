"""The dedupe index: which message ids a partition has accepted, and since when.

The ledger's accept is the commit point: an id is "seen" exactly when its record is in an
accepted segment. The index is written after the accept (``record``), so a crash between the
two leaves it behind the ledger -- by the positions ``(indexed_through, staged_offset]`` -- and
whoever loads the partition next indexes those first, from the staged segments, before it
dedupes or flushes anything (``PartitionWriter``'s catch-up; DESIGN.md, "RabbitMQ"). Writes are
idempotent (an id already there keeps its first position and time) and ``indexed_through`` only
grows, so two writers indexing the same positions agree.

Per invocation the index costs O(batch): a lookup of the batch's digests, an insert of the
accepted ones, and the deletion of at most ``prune_limit`` expired entries, so it stays within
the window's volume without a scan. A backend implements the storage primitives only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence


class DedupeIndex(ABC):
    """Public methods; a backend implements ``_seen``, ``_record`` and ``_indexed_through``."""

    def seen(self, digests: Iterable[bytes], since_ms: int) -> set[bytes]:
        """The digests among ``digests`` accepted at or after ``since_ms``."""
        wanted = set(digests)
        return self._seen(wanted, since_ms) if wanted else set()

    def record(
        self,
        entries: Sequence[tuple[bytes, int]],
        through: int,
        now_ms: int,
        *,
        expired_before_ms: int,
        prune_limit: int,
    ) -> int:
        """Add ``(digest, position)`` entries accepted at ``now_ms`` (an entry already there keeps
        its first acceptance unless it expired) and move ``indexed_through`` to at least
        ``through``, in one transaction; delete up to ``prune_limit`` entries older than
        ``expired_before_ms``. Returns how many were deleted."""
        return self._record(entries, through, now_ms, expired_before_ms, prune_limit)

    def indexed_through(self) -> int:
        """Every accepted position up to this one is in the index (-1: none yet)."""
        return self._indexed_through()

    def replace(self, entries: Sequence[tuple[bytes, int, int]], through: int) -> str | None:
        """Replace the whole index by ``entries`` ((digest, position, accepted_ms)) with
        ``indexed_through = through``, atomically (a rebuild after damage). Returns where the
        replaced index was set aside, if anywhere."""
        return self._replace(entries, through)

    def close(self) -> None:
        return None

    def _replace(self, entries: Sequence[tuple[bytes, int, int]], through: int) -> str | None:
        raise NotImplementedError(f"{type(self).__name__} cannot be rebuilt")

    @abstractmethod
    def _seen(self, digests: set[bytes], since_ms: int) -> set[bytes]: ...

    @abstractmethod
    def _record(
        self, entries: Sequence[tuple[bytes, int]], through: int, now_ms: int, expired_before_ms: int, prune_limit: int
    ) -> int: ...

    @abstractmethod
    def _indexed_through(self) -> int: ...
