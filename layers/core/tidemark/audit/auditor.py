"""Prove an archive whole: the ledger, S3 and (where reachable) the source log agree.

For every object in the hours audited, from the ledger's records *and* from an S3 listing:

* each object the ledger records is in S3, and each object in S3 is recorded;
* its bytes have the SHA-256 the ledger recorded (and its own metadata names);
* it holds as many records as the ledger says, at positions within the range its key names.

Then, per partition and position epoch, the positions of every object must *tile*: no position
is in two objects, and -- when every hour is audited, so that no object is left out -- no
position is missing from the lowest archived one up to the last one the ledger proves
committed (below the first position still staged: an open, sealed or quarantined buffer).
Records of one offset range are spread over the hours their event times fall in, so tiling is
proven on the records themselves, never on objects' ranges.

"Missing" depends on the source. A Kafka log may hold no record at an offset (a transaction
marker, a record compacted away): a gap is a finding only where the source, when it is
reachable (``SourceProbe``), still holds records -- or when it cannot be asked. Kinesis
sequence numbers are never contiguous: a shard's objects must only chain without overlap.
Dead letters count as present. A quarantined flush is a finding of its own: its range is not
in S3 until it is re-archived.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from tidemark.audit.findings import (
    CHANGED_BYTES,
    COUNT_MISMATCH,
    GAP,
    MISSING_OBJECT,
    OVERLAP,
    QUARANTINED,
    RANGE_MISMATCH,
    UNKNOWN_OBJECT,
    UNREADABLE,
    AuditReport,
    Finding,
    PartitionSummary,
)
from tidemark.config.model import TidemarkConfig
from tidemark.exceptions import TidemarkError
from tidemark.formats import RenderSpec, format_of
from tidemark.ledger.base import Ledger
from tidemark.ledger.model import CommittedObject, PartitionState
from tidemark.objects.keys import epoch_of_key, hour_of_key, positions_of_key
from tidemark.objects.writer import META_SHA256
from tidemark.sources import KINESIS, PartitionId, partition_sort_key
from tidemark.verify import spec_of_key
from tidemark.writer.stream import render_spec

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

Progress = Callable[[int, int], None]  # (objects read, objects to read)


class SourceProbe(Protocol):
    """Asks the source log itself (``tidemark.kafka_log.KafkaLog``)."""

    def records_between(self, partition: PartitionId, first: int, last: int) -> int | None:
        """Records the source holds at positions ``first..last``; ``None``: it no longer retains them."""


@dataclass(frozen=True, slots=True)
class _Read:
    """One object as read from S3."""

    key: str
    partition: PartitionId
    epoch: int
    first: int
    last: int
    positions: list[int] | None  # None: the format keeps no positions
    records: int


class Auditor:
    def __init__(
        self,
        config: TidemarkConfig,
        stream: str,
        ledger: Ledger,
        s3: S3Client,
        bucket: str,
        *,
        probe: SourceProbe | None = None,
    ) -> None:
        self.stream = config.stream(stream)
        self._archive = config.archive
        self._ledger = ledger
        self._s3 = s3
        self._bucket = bucket
        self._probe = probe
        self._spec = RenderSpec.decode(render_spec(self.stream))
        self._errors_spec = replace(self._spec, format="jsonl", compression="gzip", value_schema="", columns="")

    def run(
        self, first_hour: str | None = None, last_hour: str | None = None, progress: Progress | None = None
    ) -> AuditReport:
        """Audit the hours from ``first_hour`` to ``last_hour`` (labels like ``2026-11-21T07``,
        both included; ``None``: unbounded). Gaps are looked for only over every hour."""
        report = AuditReport(self.stream.name, first_hour, last_hour)
        within = _hour_filter(first_hour, last_hour)
        recorded = {obj.key: obj for obj in self._recorded(within)}
        listed = {key: None for key in self._listed(within)}
        for key in sorted(recorded.keys() - listed.keys()):
            obj = recorded[key]
            report.findings.append(
                Finding(
                    MISSING_OBJECT,
                    obj.partition,
                    obj.first,
                    obj.last,
                    key,
                    "recorded in the ledger, not in S3",
                    obj.epoch,
                )
            )
        unknown = listed.keys() - recorded.keys()
        if unknown:  # committed since the ledger was read, or uploaded with its commit in flight?
            for hour in {hour_of_key(key) for key in unknown}:
                for obj in self._ledger.committed_objects(self.stream.name, hour):
                    if obj.key in unknown:
                        recorded[obj.key] = obj
            sealed = {flush.object_key for state in self._states(unknown) for flush in state.sealed.values()}
            for key in unknown & sealed:  # an upload whose commit is in flight: not the archive's yet
                del listed[key]
        for key in sorted(listed.keys() - recorded.keys()):
            partition, first, last = positions_of_key(key)
            report.findings.append(
                Finding(
                    UNKNOWN_OBJECT, partition, first, last, key, "in S3, not recorded in the ledger", epoch_of_key(key)
                )
            )
        keys = sorted(listed)
        reads: list[_Read] = []
        for done, key in enumerate(keys, start=1):
            read = self._read(key, recorded.get(key), report)
            if read is not None:
                reads.append(read)
            if progress is not None:
                progress(done, len(keys))
        report.gaps_checked = first_hour is None and last_hour is None
        report.gaps_against_source = report.gaps_checked and self._probe is not None
        report.partitions = self._tile(reads, recorded.values(), report)
        report.findings.sort(key=lambda f: (f.kind, partition_sort_key(f.partition), f.epoch, f.first, f.key))
        return report

    # -- what the ledger and S3 hold ---------------------------------------------------------

    def _states(self, keys: Iterable[str]) -> list[PartitionState]:
        partitions = {positions_of_key(key)[0] for key in keys}
        return [self._ledger.load(self.stream.name, partition) for partition in partitions]

    def _recorded(self, within: Callable[[str], bool]) -> Iterator[CommittedObject]:
        for mark in self._ledger.hour_marks(self.stream.name):
            if within(mark.hour):
                yield from self._ledger.committed_objects(self.stream.name, mark.hour)

    def _listed(self, within: Callable[[str], bool]) -> Iterator[str]:
        archive = self._archive
        for prefix in (archive.raw_prefix, archive.errors_prefix):
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self._bucket, Prefix=f"{prefix}/{self.stream.name}/"
            )
            for page in pages:
                for item in page.get("Contents", []):
                    key = item["Key"]
                    try:
                        hour = hour_of_key(key)
                        positions_of_key(key)
                    except TidemarkError:
                        continue  # not an object of ours (a stray upload): not part of the archive
                    if within(hour):
                        yield key

    def _read(self, key: str, recorded: CommittedObject | None, report: AuditReport) -> _Read | None:
        partition, first, last = positions_of_key(key)
        epoch = epoch_of_key(key)
        response = self._s3.get_object(Bucket=self._bucket, Key=key)
        body = response["Body"].read()
        report.objects += 1
        report.bytes += len(body)
        digest = hashlib.sha256(body).hexdigest()
        if recorded is not None:
            named = response.get("Metadata", {}).get(META_SHA256, "")
            if digest != recorded.sha256:
                report.findings.append(
                    Finding(
                        CHANGED_BYTES, partition, first, last, key, f"SHA-256 {digest}, ledger {recorded.sha256}", epoch
                    )
                )
            elif named and named != recorded.sha256:
                report.findings.append(
                    Finding(CHANGED_BYTES, partition, first, last, key, f"metadata names SHA-256 {named}", epoch)
                )
        dead = key.startswith(f"{self._archive.errors_prefix}/")
        spec = spec_of_key(key, self._errors_spec if dead else self._spec)
        try:
            envelopes = list(format_of(spec).read(body, spec.context(partition, key)))
        except Exception as exc:  # noqa: BLE001 -- any reader failure is this object's finding
            report.findings.append(
                Finding(UNREADABLE, partition, first, last, key, f"{type(exc).__name__}: {exc}", epoch)
            )
            return None
        report.records += len(envelopes)
        if recorded is not None and len(envelopes) != recorded.records:
            report.findings.append(
                Finding(
                    COUNT_MISMATCH,
                    partition,
                    first,
                    last,
                    key,
                    f"{len(envelopes)} records, ledger {recorded.records}",
                    epoch,
                )
            )
        offsets = [envelope.offset for envelope in envelopes]
        if not offsets or any(offset is None or offset < 0 for offset in offsets):
            return _Read(key, partition, epoch, first, last, None, len(envelopes))
        positions: list[int] = offsets  # type: ignore[assignment]  # no None left
        expected = (recorded.first, recorded.last) if recorded is not None else (first, last)
        if min(positions) != expected[0] or max(positions) != expected[1]:
            report.findings.append(
                Finding(
                    RANGE_MISMATCH,
                    partition,
                    first,
                    last,
                    key,
                    f"holds offsets {min(positions)}..{max(positions)}, names {expected[0]}..{expected[1]}",
                    epoch,
                )
            )
        return _Read(key, partition, epoch, first, last, positions, len(envelopes))

    # -- tiling ------------------------------------------------------------------------------

    def _tile(
        self, reads: list[_Read], recorded: Iterable[CommittedObject], report: AuditReport
    ) -> list[PartitionSummary]:
        groups: dict[tuple[PartitionId, int], list[_Read]] = defaultdict(list)
        for read in reads:
            groups[(read.partition, read.epoch)].append(read)
        for obj in recorded:  # a partition whose every object is missing is still audited
            groups.setdefault((obj.partition, obj.epoch), [])
        summaries = []
        states: dict[PartitionId, PartitionState] = {}
        # Every partition the sweeper registered is asked about quarantines, whether or not the
        # hours audited hold any of its objects (its first flush may be the quarantined one).
        partitions = {partition for partition, _epoch in groups} | set(self._ledger.partitions(self.stream.name))
        for partition in sorted(partitions, key=partition_sort_key):
            state = states[partition] = self._ledger.load(self.stream.name, partition)
            for held in state.quarantined.values():
                segments = held.flush.buffer.segments
                report.findings.append(
                    Finding(
                        QUARANTINED,
                        partition,
                        min(segment.first for segment in segments),
                        max(segment.last for segment in segments),
                        held.flush.object_key,
                        f"{held.flush.buffer.records} records not in S3: {held.error}",
                        state.epoch,
                    )
                )
        for partition, epoch in sorted(groups, key=lambda pe: (partition_sort_key(pe[0]), pe[1])):
            summaries.append(self._tile_one(partition, epoch, groups[(partition, epoch)], states[partition], report))
        return summaries

    def _tile_one(
        self, partition: PartitionId, epoch: int, reads: list[_Read], state: PartitionState, report: AuditReport
    ) -> PartitionSummary:
        summary = PartitionSummary(partition, epoch, objects=len(reads), records=sum(read.records for read in reads))
        if any(read.positions is None for read in reads):
            summary.positions_known = False
            return summary
        owners: dict[int, str] = {}
        overlaps: dict[tuple[str, str], list[int]] = defaultdict(list)  # (first holder, other) -> positions
        for read in reads:
            assert read.positions is not None
            seen: set[int] = set()
            for position in read.positions:
                if position in seen:
                    overlaps[(read.key, read.key)].append(position)
                    continue
                seen.add(position)
                other = owners.setdefault(position, read.key)
                if other != read.key:
                    overlaps[(other, read.key)].append(position)
        for (one, two), positions in sorted(overlaps.items()):
            for first, last in _runs(sorted(set(positions))):
                report.findings.append(
                    Finding(
                        OVERLAP, partition, first, last, two, f"also in {one}" if one != two else "twice in it", epoch
                    )
                )
        if not owners:
            return summary
        held = sorted(owners)
        summary.first, summary.last = held[0], held[-1]
        if epoch == state.epoch:
            summary.staged_offset = state.staged_offset
        if not report.gaps_checked or self.stream.source.kind == KINESIS:
            return summary  # Kinesis sequence numbers are never contiguous: overlaps only
        through = state.committed_through() if epoch == state.epoch else held[-1]
        summary.checked_through = through
        for first, last in _missing(held, through):
            if self._probe is None:
                why = (
                    "no object holds these positions (a queue's are the ledger's own: records are missing)"
                    if self.stream.source.shape.assigns_positions
                    else "no object holds these offsets (source not asked)"
                )
                report.findings.append(Finding(GAP, partition, first, last, "", why, epoch))
                continue
            present = self._probe.records_between(partition, first, last)
            if present is None:
                report.findings.append(
                    Finding(GAP, partition, first, last, "", "the source no longer retains these offsets", epoch)
                )
            elif present:
                report.findings.append(
                    Finding(GAP, partition, first, last, "", f"the source still holds {present} records here", epoch)
                )
            else:
                summary.gaps_explained += 1
        return summary


def _hour_filter(first_hour: str | None, last_hour: str | None) -> Callable[[str], bool]:
    return lambda hour: (first_hour is None or hour >= first_hour) and (last_hour is None or hour <= last_hour)


def _runs(positions: list[int]) -> Iterator[tuple[int, int]]:
    """Consecutive runs of sorted, distinct positions, as (first, last)."""
    start = previous = positions[0]
    for position in positions[1:]:
        if position != previous + 1:
            yield start, previous
            start = position
        previous = position
    yield start, previous


def _missing(held: list[int], through: int) -> Iterator[tuple[int, int]]:
    """Ranges from ``held[0]`` to ``through`` that no position of ``held`` (sorted) covers."""
    previous = held[0]
    for position in held[1:]:
        if position > through:
            break
        if position > previous + 1:
            yield previous + 1, position - 1
        previous = position
    if through > previous:
        yield previous + 1, through
