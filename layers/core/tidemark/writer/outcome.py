"""What one writer run did, for metrics and logs (the core emits nothing itself)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tidemark.sources import PartitionId


@dataclass(frozen=True, slots=True)
class FlushOutcome:
    stream: str
    partition: PartitionId
    key: str
    kind: str
    hour: str
    reason: str
    records: int
    size: int
    latency_ms: int  # from seal to commit; includes any crash downtime of resumed flushes
    resumed: bool  # sealed by an earlier, interrupted run


@dataclass(slots=True)
class BatchOutcome:
    records_in: int = 0
    duplicates: int = 0
    staged: int = 0
    bytes_staged: int = 0
    segments_written: int = 0
    conflicts: int = 0
    dead_lettered: Counter[str] = field(default_factory=Counter)
    flushes: list[FlushOutcome] = field(default_factory=list)
    flush_errors: int = 0
    quarantined: int = 0
    garbage_segments_deleted: int = 0
    chunks: int = 0  # extra ledger accepts a batch needed to keep the item within its budget
    adopted_objects: int = 0  # flushes whose object was already in S3 (same records)
    flushes_deferred: int = 0  # left SEALED because the run's deadline had passed (a sweep's budget)

    def merge(self, other: BatchOutcome) -> BatchOutcome:
        self.records_in += other.records_in
        self.duplicates += other.duplicates
        self.staged += other.staged
        self.bytes_staged += other.bytes_staged
        self.segments_written += other.segments_written
        self.conflicts += other.conflicts
        self.dead_lettered.update(other.dead_lettered)
        self.flushes.extend(other.flushes)
        self.flush_errors += other.flush_errors
        self.quarantined += other.quarantined
        self.garbage_segments_deleted += other.garbage_segments_deleted
        self.chunks += other.chunks
        self.adopted_objects += other.adopted_objects
        self.flushes_deferred += other.flushes_deferred
        return self

    def summary(self) -> dict[str, object]:
        return {
            "records_in": self.records_in,
            "duplicates": self.duplicates,
            "staged": self.staged,
            "dead_lettered": sum(self.dead_lettered.values()),
            "objects_committed": len(self.flushes),
            "flush_errors": self.flush_errors,
            "quarantined": self.quarantined,
        }
