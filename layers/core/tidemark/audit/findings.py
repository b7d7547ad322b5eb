"""What an audit reports: findings, each named by kind, partition, positions and object key."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tidemark.sources import PartitionId

#: an offset range of a partition that no committed object holds, though the source may have records there
GAP = "gap"
#: a position held by more than one object
OVERLAP = "overlap"
#: the ledger records an object that S3 does not have
MISSING_OBJECT = "missing_object"
#: S3 holds an object under the stream's prefixes that the ledger does not record
UNKNOWN_OBJECT = "unknown_object"
#: the object's bytes (or its SHA-256 metadata) are not what the ledger recorded
CHANGED_BYTES = "changed_bytes"
#: the object holds another number of records than the ledger recorded
COUNT_MISMATCH = "count_mismatch"
#: the object holds positions outside the range its key and the ledger name
RANGE_MISMATCH = "range_mismatch"
#: the object cannot be read with the reader of its format
UNREADABLE = "unreadable"
#: a flush the archiver quarantined (damaged segments): its range is not in S3 until re-archived
QUARANTINED = "quarantined"

KINDS = (
    GAP,
    OVERLAP,
    MISSING_OBJECT,
    UNKNOWN_OBJECT,
    CHANGED_BYTES,
    COUNT_MISMATCH,
    RANGE_MISMATCH,
    UNREADABLE,
    QUARANTINED,
)


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    partition: PartitionId
    first: int  # the positions concerned (an object's range, a gap, an overlapping run)
    last: int
    key: str = ""  # the object concerned, if any
    detail: str = ""
    epoch: int = 0

    def line(self) -> str:
        where = f"partition {self.partition}" + (f" epoch {self.epoch}" if self.epoch else "")
        positions = f"offset {self.first}" if self.first == self.last else f"offsets {self.first}..{self.last}"
        text = f"{self.kind}: {where}, {positions}"
        if self.key:
            text += f", {self.key}"
        return f"{text}: {self.detail}" if self.detail else text


@dataclass(frozen=True, slots=True)
class Unchecked:
    """Positions the audit could not prove archived or missing, and why: no finding, but no proof
    either (an audit with any of these is not "clean", whatever its exit code)."""

    partition: PartitionId
    epoch: int
    first: int | None  # None: from wherever the positions begin
    last: int | None  # None: up to wherever they end
    reason: str

    def line(self) -> str:
        where = f"partition {self.partition}" + (f" epoch {self.epoch}" if self.epoch else "")
        if self.first is None and self.last is None:
            positions = "every offset"
        elif self.first is None:
            positions = f"offsets ..{self.last}"
        elif self.last is None:
            positions = f"offsets {self.first}.."
        else:
            positions = f"offset {self.first}" if self.first == self.last else f"offsets {self.first}..{self.last}"
        return f"not checked: {where}, {positions}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Abandoned:
    """A quarantined flush an operator recorded as lost (``tidemark abandon``): its positions are
    accounted for by that record, and the audit says so every time -- no finding, no silence."""

    partition: PartitionId
    epoch: int
    first: int
    last: int
    records: int
    key: str  # the object it would have had
    reason: str
    abandoned_ms: int

    def line(self) -> str:
        where = f"partition {self.partition}" + (f" epoch {self.epoch}" if self.epoch else "")
        positions = f"offset {self.first}" if self.first == self.last else f"offsets {self.first}..{self.last}"
        return f"abandoned: {where}, {positions}, {self.key}: {self.records} records recorded lost: {self.reason}"


@dataclass
class PartitionSummary:
    """What the audit established for one partition (and position epoch)."""

    partition: PartitionId
    epoch: int = 0
    objects: int = 0
    records: int = 0
    first: int | None = None  # lowest position archived
    last: int | None = None  # highest position archived
    staged_offset: int | None = None  # the ledger's (current epoch only)
    checked_from: int | None = None  # positions from here ...
    checked_through: int | None = None  # ... up to here were checked for gaps (the ledger's bounds)
    gaps_explained: int = 0  # gaps the source holds no records in (transaction markers, compaction)
    positions_known: bool = True  # False: objects of a format that keeps no positions (text): counted


@dataclass
class AuditReport:
    stream: str
    first_hour: str | None
    last_hour: str | None
    objects: int = 0
    records: int = 0
    bytes: int = 0
    gaps_checked: bool = False  # tiling is only provable over every hour
    gaps_against_source: bool = False  # gaps were checked against the source's own log
    partitions: list[PartitionSummary] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    unchecked: list[Unchecked] = field(default_factory=list)  # what could be neither proven nor faulted
    abandoned: list[Abandoned] = field(default_factory=list)  # recorded lost by an operator: not in the archive

    @property
    def clean(self) -> bool:
        """No finding (exit code 0). Proven whole only if also ``complete``."""
        return not self.findings

    @property
    def complete(self) -> bool:
        """Every position of every epoch the ledger knows was checked: gaps too, nothing left unchecked."""
        return self.gaps_checked and not self.unchecked

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["clean"] = self.clean
        data["complete"] = self.complete
        return data
