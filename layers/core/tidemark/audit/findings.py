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
    checked_through: int | None = None  # positions up to here were checked for gaps
    gaps_explained: int = 0  # gaps the source holds no records in (transaction markers, compaction)
    positions_known: bool = True  # False: a format that keeps no positions (text): counts only


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

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["clean"] = self.clean
        return data
