"""One partition's sweep: the archiver's own maintenance path, then directory cleanup.

Everything that touches the ledger goes through ``PartitionWriter.maintain`` -- the same
seal/upload/commit code and the same conditional writes as the archiver -- so a sweep and a
live invocation on the same partition are fenced by the ledger version like two invocations:
a buffer the sweeper sealed is never appended to again; the archiver opens a new one. Two
sweeps of one partition (overlapping executions) are fenced the same way.

``deadline_ms`` is the step's time budget (``tidemark.sweeper.budget``): no flush starts after
it; the flushes left stay SEALED (``deferred``) and the next sweep resumes them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tidemark.runtime import Runtime
from tidemark.sources import PartitionId


@dataclass
class SweepOutcome:
    stream: str
    partition: PartitionId
    flushed: Counter[str] = field(default_factory=Counter)  # objects committed, by rotation reason
    resumed: int = 0  # sealed flushes left by a crashed run, finished here
    garbage_deleted: int = 0  # unaccepted or already-committed segment files removed
    flush_errors: int = 0
    quarantined: int = 0
    deferred: int = 0  # flushes left SEALED for the next sweep: the step's deadline had passed
    directory_removed: bool = False

    def summary(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "partition": self.partition,
            "flushed": dict(self.flushed),
            "resumed": self.resumed,
            "garbage_deleted": self.garbage_deleted,
            "flush_errors": self.flush_errors,
            "quarantined": self.quarantined,
            "deferred": self.deferred,
            "directory_removed": self.directory_removed,
        }


def sweep_partition(
    runtime: Runtime, stream_name: str, partition: PartitionId, *, deadline_ms: int | None = None
) -> SweepOutcome:
    stream = runtime.config.stream(stream_name)
    result = runtime.writer(stream, partition).maintain(deadline_ms=deadline_ms)
    outcome = SweepOutcome(stream_name, partition)
    for flush in result.flushes:
        outcome.flushed[flush.reason] += 1
        outcome.resumed += flush.resumed
    outcome.garbage_deleted = result.garbage_segments_deleted
    outcome.flush_errors = result.flush_errors
    outcome.quarantined = result.quarantined
    outcome.deferred = result.flushes_deferred
    state = runtime.ledger.load(stream_name, partition)
    if state.idle and not state.quarantined and not runtime.staging.segments(stream_name, partition):
        outcome.directory_removed = runtime.staging.remove_partition_dir(stream_name, partition)
    return outcome
