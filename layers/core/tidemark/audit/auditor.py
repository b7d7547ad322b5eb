"""Prove an archive whole: the ledger, S3 and (where reachable) the source log agree.

For every object in the hours audited, from the ledger's records *and* from an S3 listing:

* each object the ledger records is in S3, and each object in S3 is recorded;
* its bytes have the SHA-256 the ledger recorded (and its own metadata names);
* it holds as many records as the ledger says, at positions within the range its key names.

Then, per partition and position epoch, the positions of every object must *tile*: no position
is in two objects, and -- when every hour is audited, so that no object is left out -- none is
missing between the epoch's bounds as the ledger knows them: from its first position (epoch 0:
the first offset the ledger accepted, ``PartitionState.first_accepted``; a later epoch: its
``EpochStart.first_offset``) to the last one committed (below anything of the epoch still
staged: an open, sealed or quarantined buffer; else its staged offset -- an earlier epoch's as
the next epoch's start recorded it). Every partition with a ledger state is tiled, every epoch
of it, objects or none: accepted records with no object left are a gap. The bounds are read
*before* the objects are listed, so a flush that commits while the audit runs lies past them.
Records of one offset range are spread over the hours their event times fall in, so tiling is
proven on the records themselves, never on objects' ranges.

An object of a format that keeps no positions (``text``) is known by its range and its record
count: one with a record at every position of its range holds them all; the others are
*counted*, per stretch of positions they cover, against the positions the source holds there
(or every position, without a source to ask).

"Missing" depends on the source. A Kafka log may hold no record at an offset (a transaction
marker, a record compacted away): a gap is a finding only where the source, when it is
reachable (``SourceProbe``), still holds records -- or when it cannot be asked, or no longer
retains them, or the ledger accepted a record there (epoch 0's first). The source speaks for the
partition's current epoch only: an earlier epoch's log (a topic since recreated) is not the one
it reads. Kinesis sequence numbers are never contiguous: a shard's objects must only chain
without overlap, and hold the first record accepted. Dead letters count as present. A
quarantined flush is a finding of its own: its range is not in S3 until it is re-archived.

What can be neither proven nor faulted is reported as ``Unchecked``, never as clean.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import ClientError

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
    Abandoned,
    AuditReport,
    Finding,
    PartitionSummary,
    Unchecked,
)
from tidemark.config.model import TidemarkConfig
from tidemark.exceptions import SourceUnavailableError, TidemarkError
from tidemark.formats import RenderSpec, format_of
from tidemark.ledger.base import Ledger
from tidemark.ledger.model import AbandonedFlush, CommittedObject, EpochStart, PartitionState
from tidemark.objects.keys import epoch_of_key, hour_of_key, positions_of_key
from tidemark.objects.writer import META_SHA256
from tidemark.sources import KAFKA, KINESIS, PartitionId, partition_sort_key
from tidemark.staging.store import SegmentRef
from tidemark.verify import spec_of_key
from tidemark.writer.stream import render_spec

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

Progress = Callable[[int, int], None]  # (objects read, objects to read)

#: stands for the partitions an audit may not know of (``Unchecked.partition``)
UNREGISTERED = "(unregistered)"
#: listings at most (each after the snapshots of the partitions the one before first showed)
_LISTINGS = 3


class SourceProbe(Protocol):
    """Asks the source log itself (``tidemark.kafka_log.KafkaLog``)."""

    def records_between(self, partition: PartitionId, first: int, last: int) -> int | None:
        """Records the source holds at positions ``first..last``; ``None``: it no longer retains them."""

    def partitions(self) -> list[int]:
        """The source's partitions: each is audited, even one neither the registry nor an object names."""


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
        report.gaps_checked = first_hour is None and last_hour is None
        report.gaps_against_source = report.gaps_checked and self._probe is not None
        within = _hour_filter(first_hour, last_hour)
        registered = set(self._ledger.partitions(self.stream.name))
        # The ledger's bounds first, the objects after: every position a snapshot proves
        # committed was committed before the listing, so its object is listed (and recorded). A
        # flush committing while the audit lists or reads lies past the snapshot: never a gap.
        snapshots: dict[PartitionId, PartitionState] = {}
        unbounded: dict[PartitionId, str] = {}  # partitions tiled without bounds, and why
        if report.gaps_checked:
            known = registered | set(self._source_partitions(report))
            snapshots = {partition: self._ledger.load(self.stream.name, partition) for partition in known}
        for listing in range(1, _LISTINGS + 1):
            recorded = {obj.key: obj for obj in self._recorded(within)}
            listed = {key: None for key in self._listed(within)}
            late = {obj.partition for obj in recorded.values()} | {positions_of_key(key)[0] for key in listed}
            late -= snapshots.keys()
            if not report.gaps_checked or not late:
                break
            # Partitions no registry named (the sweeper has not seen them yet): their snapshot is
            # taken now, and the listing done again after it -- but not forever.
            snapshots.update((partition, self._ledger.load(self.stream.name, partition)) for partition in late)
            if listing == _LISTINGS:  # still new ones: those have no bounds the listing follows
                for partition in late:
                    del snapshots[partition]
                    unbounded[partition] = "first seen while the audit listed the archive: run it again"
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
            sealed |= self._claimed(unknown)
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
        report.partitions = self._tile(reads, recorded.values(), snapshots, unbounded, registered, report)
        report.findings.sort(key=lambda f: (f.kind, partition_sort_key(f.partition), f.epoch, f.first, f.key))
        return report

    # -- what the ledger and S3 hold ---------------------------------------------------------

    def _source_partitions(self, report: AuditReport) -> list[int]:
        """The source's partitions, audited even where neither the registry nor an object names
        them; a topic the probe cannot list (deleted, say) is said, not fatal."""
        if self._probe is None:
            return []
        try:
            return self._probe.partitions()
        except SourceUnavailableError as exc:
            report.unchecked.append(
                Unchecked(
                    UNREGISTERED,
                    0,
                    None,
                    None,
                    f"the source's partitions could not be listed ({exc}): one neither registered by the "
                    "sweeper nor holding an object is not audited",
                )
            )
            return []

    def _states(self, keys: Iterable[str]) -> list[PartitionState]:
        partitions = {positions_of_key(key)[0] for key in keys}
        return [self._ledger.load(self.stream.name, partition) for partition in partitions]

    def _claimed(self, keys: Iterable[str]) -> set[str]:
        """The object keys of recoveries claimed and not finished (``tidemark recover``) in the
        partitions of ``keys``: like a sealed flush's, their uploads are not the archive's yet."""
        if self.stream.source.shape.kind != KAFKA:
            return set()
        partitions = {positions_of_key(key)[0] for key in keys}
        claimed: set[str] = set()
        for partition in partitions:
            pending = self._ledger.recovery(self.stream.name, partition).pending
            if pending is not None:
                claimed.update(key for key, _records in pending.objects)
        return claimed

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

    def _has(self, key: str) -> bool:
        listed = self._s3.list_objects_v2(Bucket=self._bucket, Prefix=key, MaxKeys=1).get("Contents", [])
        return any(item["Key"] == key for item in listed)

    def _read(self, key: str, recorded: CommittedObject | None, report: AuditReport) -> _Read | None:
        partition, first, last = positions_of_key(key)
        epoch = epoch_of_key(key)
        try:
            response = self._s3.get_object(Bucket=self._bucket, Key=key)
        except ClientError as exc:
            # A missing key is 404 to a caller allowed s3:ListBucket on the bucket, 403 to one whose
            # ListBucket is scoped by prefix (the operator's): a 403 is settled by listing the key.
            code = exc.response.get("Error", {}).get("Code")
            gone = code in ("NoSuchKey", "404", "NotFound") or (code in ("403", "AccessDenied") and not self._has(key))
            if not gone:
                raise
            # Tidemark never deletes an archived object: one listed and gone before it was read is lost.
            report.findings.append(
                Finding(MISSING_OBJECT, partition, first, last, key, "listed in S3, gone before it was read", epoch)
            )
            return None
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
        self,
        reads: list[_Read],
        recorded: Iterable[CommittedObject],
        snapshots: dict[PartitionId, PartitionState],
        unbounded: dict[PartitionId, str],
        registered: set[PartitionId],
        report: AuditReport,
    ) -> list[PartitionSummary]:
        groups: dict[tuple[PartitionId, int], list[_Read]] = defaultdict(list)
        for read in reads:
            groups[(read.partition, read.epoch)].append(read)
        for obj in recorded:  # a partition whose every object is missing is still audited
            groups.setdefault((obj.partition, obj.epoch), [])
        for partition, state in snapshots.items():  # so is every epoch the ledger knows, objects or not
            if state.version:
                for epoch in range(state.epoch + 1):
                    groups.setdefault((partition, epoch), [])
        # Every partition the sweeper registered is asked about quarantines, whether or not the
        # hours audited hold any of its objects (its first flush may be the quarantined one). The
        # state is read again here: a quarantine rearchived since the snapshot is no finding.
        partitions = {partition for partition, _epoch in groups} | registered | set(snapshots)
        lost: dict[PartitionId, list[AbandonedFlush]] = {}
        for partition in sorted(partitions, key=partition_sort_key):
            lost[partition] = self._ledger.abandoned(self.stream.name, partition)
            for item in lost[partition]:
                report.abandoned.append(
                    Abandoned(
                        partition,
                        item.epoch,
                        item.first,
                        item.last,
                        item.records,
                        item.object_key,
                        item.reason,
                        item.abandoned_ms,
                    )
                )
            state = self._ledger.load(self.stream.name, partition)
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
                        epoch_of_key(held.flush.object_key),
                    )
                )
        starts: dict[PartitionId, dict[int, EpochStart]] = {}
        summaries = []
        for partition, epoch in sorted(groups, key=lambda pe: (partition_sort_key(pe[0]), pe[1])):
            group = groups[(partition, epoch)]
            bounds = None
            snapshot = snapshots.get(partition)
            if report.gaps_checked and snapshot is not None and snapshot.version:
                if snapshot.epoch and partition not in starts:
                    starts[partition] = {
                        start.epoch: start for start in self._ledger.epochs(self.stream.name, partition)
                    }
                bounds = epoch_bounds(snapshot, epoch, starts.get(partition, {}))
                if bounds.empty and not group:
                    continue  # nothing accepted in this epoch, and nothing archived under it
            why = unbounded.get(partition, "the ledger holds no state for this partition: no bounds")
            abandoned = [item for item in lost.get(partition, []) if item.epoch == epoch]
            summaries.append(self._tile_one(partition, epoch, group, bounds or why, report, abandoned))
        return summaries

    def _tile_one(
        self,
        partition: PartitionId,
        epoch: int,
        reads: list[_Read],
        bounds: EpochBounds | str,
        report: AuditReport,
        abandoned: Sequence[AbandonedFlush] = (),
    ) -> PartitionSummary:
        """Tile one epoch of a partition within its ``bounds`` (or, a string: why it has none).
        Positions of ``abandoned`` flushes no object holds are accounted for by those records,
        up to as many as each segment of them held."""
        summary = PartitionSummary(partition, epoch, objects=len(reads), records=sum(read.records for read in reads))
        # Positions held, by the objects that keep them -- and by those that keep none but hold a
        # record at every position of their range (as many records as positions: no choice left).
        kept: list[tuple[str, Iterable[int]]] = []
        vague: list[_Read] = []  # the others: only their ranges and counts are known
        for read in reads:
            if read.positions is not None:
                kept.append((read.key, read.positions))
            elif read.records == read.last - read.first + 1:
                kept.append((read.key, range(read.first, read.last + 1)))
            else:
                vague.append(read)
        summary.positions_known = not vague
        owners: dict[int, str] = {}
        overlaps: dict[tuple[str, str], list[int]] = defaultdict(list)  # (first holder, other) -> positions
        for key, positions in kept:
            seen: set[int] = set()
            for position in positions:
                if position in seen:
                    overlaps[(key, key)].append(position)
                    continue
                seen.add(position)
                other = owners.setdefault(position, key)
                if other != key:
                    overlaps[(other, key)].append(position)
        for (one, two), twice in sorted(overlaps.items()):
            for first, last in _runs(sorted(set(twice))):
                report.findings.append(
                    Finding(
                        OVERLAP, partition, first, last, two, f"also in {one}" if one != two else "twice in it", epoch
                    )
                )
        held = sorted(owners)
        lowest = min([*held[:1], *(read.first for read in vague)], default=None)
        highest = max([*held[-1:], *(read.last for read in vague)], default=None)
        summary.first, summary.last = lowest, highest
        if not report.gaps_checked:
            return summary
        if isinstance(bounds, str):
            report.unchecked.append(Unchecked(partition, epoch, None, None, bounds))
            return summary
        summary.staged_offset = bounds.staged_offset
        if self.stream.source.kind == KINESIS:
            self._chain(partition, epoch, held, vague, lowest, bounds, report)
            return summary
        lo, hi = bounds.first, bounds.last
        if hi is None:  # where the epoch ends is not known: up to the highest position archived
            if lowest is None or highest is None or lo is None:
                report.unchecked.append(Unchecked(partition, epoch, None, None, bounds.unknown))
                return summary
            hi = highest
            report.unchecked.append(Unchecked(partition, epoch, highest + 1, None, bounds.unknown))
        if lo is None:  # where the epoch begins is not known: from the lowest position archived
            if lowest is None:
                if epoch > 0:  # its start is not known, so neither is whether it accepted anything
                    report.unchecked.append(Unchecked(partition, epoch, None, hi, bounds.unknown))
                elif hi >= 0:  # epoch 0 begins at -1: a staged offset past it accepted records
                    report.findings.append(
                        Finding(
                            GAP,
                            partition,
                            hi,
                            hi,
                            "",
                            f"the ledger accepted records through offset {hi} and no object holds any of them "
                            f"({bounds.unknown})",
                            epoch,
                        )
                    )
                return summary
            if lowest > 0:
                report.unchecked.append(Unchecked(partition, epoch, None, lowest - 1, bounds.unknown))
            lo = lowest
        elif lowest is not None and lowest < lo:
            lo = lowest  # objects below the epoch's known start (a state item written again): tiled too
        summary.checked_from, summary.checked_through = lo, hi
        if hi < lo:
            return summary
        regions = _merged((read.first, read.last, read.records) for read in vague)
        given_up = _merged(segment for item in abandoned for segment in item.segments)
        for first, last in missing_ranges(held, lo, hi):
            for gap_first, gap_last in _outside(first, last, regions):
                for part_first, part_last in _outside(gap_first, gap_last, given_up):
                    self._gap(partition, epoch, part_first, part_last, None, bounds, summary, report)
        for first, last, records in given_up:  # never more positions missing than were given up
            unheld = last - first + 1 - (bisect_right(held, last) - bisect_left(held, first))
            if unheld > records:
                report.findings.append(
                    Finding(
                        GAP,
                        partition,
                        first,
                        last,
                        "",
                        f"{unheld} positions here are in no object; the flush abandoned here held {records}",
                        epoch,
                    )
                )
        for first, last, records in regions:  # what keeps no positions is counted
            if first < lo or last > hi:
                report.unchecked.append(
                    Unchecked(
                        partition,
                        epoch,
                        first,
                        last,
                        f"objects here keep no positions (their {records} records are counted only over a "
                        f"range the ledger proves committed, {lo}..{hi})",
                    )
                )
                continue
            present = records + bisect_right(held, last) - bisect_left(held, first)
            span = last - first + 1
            if present > span:
                report.findings.append(
                    Finding(
                        OVERLAP,
                        partition,
                        first,
                        last,
                        "",
                        f"{present} records in objects for {span} positions (objects here keep no positions: "
                        "which are archived twice is not known)",
                        epoch,
                    )
                )
            elif present < span:
                self._gap(partition, epoch, first, last, present, bounds, summary, report)
        return summary

    def _chain(
        self,
        partition: PartitionId,
        epoch: int,
        held: list[int],
        vague: list[_Read],
        lowest: int | None,
        bounds: EpochBounds,
        report: AuditReport,
    ) -> None:
        """Kinesis sequence numbers are never contiguous: no tiling, but an epoch whose accepted
        records are in no object, or whose first accepted record is in none, is found."""
        first, last = bounds.first, bounds.last
        if (first is None or last is None) and not bounds.empty:
            # Where the epoch begins or ends is not known (a state from before ``first_accepted``,
            # a missing epoch start, an epoch begun during the audit): neither its first record
            # nor whether it has objects is proven -- never "clean".
            report.unchecked.append(
                Unchecked(partition, epoch, None, None, bounds.unknown or "the epoch's bounds are not known")
            )
        if first is None or last is None or last < first:
            if vague:
                report.unchecked.append(
                    Unchecked(partition, epoch, lowest, None, "objects here keep no positions: overlaps not checked")
                )
            return
        if lowest is None:
            report.findings.append(
                Finding(
                    GAP, partition, first, last, "", "the ledger accepted these records and no object holds any", epoch
                )
            )
        elif bounds.record_at_first and first < lowest:
            report.findings.append(
                Finding(
                    GAP,
                    partition,
                    first,
                    lowest - 1,
                    "",
                    f"the first record the ledger accepted, at {first}, is in no object",
                    epoch,
                )
            )
        if vague:
            report.unchecked.append(
                Unchecked(partition, epoch, lowest, None, "objects here keep no positions: overlaps not checked")
            )

    def _gap(
        self,
        partition: PartitionId,
        epoch: int,
        first: int,
        last: int,
        present: int | None,
        bounds: EpochBounds,
        summary: PartitionSummary,
        report: AuditReport,
    ) -> None:
        """Positions ``first..last`` that objects do not account for: no object holds any of them
        (``present`` None), or objects that keep no positions hold only ``present`` records there."""
        span = last - first + 1
        counted = (
            ""
            if present is None
            else f"; objects that keep no positions hold {present} records for these {span} positions"
        )
        if self._probe is None or not bounds.probe:
            if self.stream.source.shape.assigns_positions:
                why = "no object holds these positions (a queue's are the ledger's own: records are missing)"
            elif self._probe is None:
                why = "no object holds these offsets (source not asked)"
            else:
                why = (
                    f"no object holds these offsets (the source asked is epoch {bounds.current}'s log, "
                    f"not epoch {epoch}'s: it cannot explain them)"
                )
            if present is not None:
                why = f"{span - present} of these {span} positions are in no object{counted}"
            report.findings.append(Finding(GAP, partition, first, last, "", why, epoch))
            return
        there = self._probe.records_between(partition, first, last)
        accepted = present is None and bounds.record_at_first and first <= (bounds.first or 0) <= last
        if there is None:
            why = f"the source no longer retains these offsets{counted}"
        elif there > (present or 0):
            why = f"the source still holds {there} records here{counted}"
        elif accepted:
            why = f"the ledger accepted a record at offset {bounds.first}, and no object holds it"
        else:
            summary.gaps_explained += 1
            return
        report.findings.append(Finding(GAP, partition, first, last, "", why, epoch))


@dataclass(frozen=True, slots=True)
class EpochBounds:
    """What the ledger's snapshot (read before the listing) says one epoch of a partition holds."""

    first: int | None  # the epoch's first position; None: not known (``unknown`` says why)
    last: int | None  # every position accepted up to here is committed; None: not known
    record_at_first: bool  # ``first`` is a record the ledger accepted (epoch 0's first accepted offset)
    probe: bool  # the source probe reads this epoch's log: the partition's current epoch only
    current: int  # the partition's current epoch
    staged_offset: int | None  # the ledger's (current epoch only)
    empty: bool = False  # nothing accepted in this epoch
    unknown: str = ""


def epoch_bounds(state: PartitionState, epoch: int, starts: dict[int, EpochStart]) -> EpochBounds:
    """Epoch ``epoch``'s bounds by the partition's state and its epoch starts: from its first
    position -- epoch 0's first accepted offset, a later epoch's start -- to the last one committed:
    below anything of it still staged (open, sealed or quarantined), else its staged offset (the
    current epoch's own, an earlier epoch's as the next one's start recorded it)."""
    current = state.epoch
    if epoch > current:
        return EpochBounds(
            None,
            None,
            False,
            False,
            current,
            None,
            unknown="its epoch began after the audit read the ledger: run it again",
        )
    unknown = []
    if epoch == 0:
        first = state.first_accepted
        if first is None:
            unknown.append("the ledger's first accepted offset is not known (a state item written before it was kept)")
        empty = first == -1  # nothing accepted in epoch 0 (objects of it anyway: a state item written again)
        if empty:
            unknown.append("the ledger's state has accepted nothing in epoch 0, yet objects of it exist")
        first = None if first is None or first < 0 else first
    else:
        start = starts.get(epoch)
        first = start.first_offset if start is not None else None
        if start is None:
            unknown.append(f"epoch {epoch}'s start is not in the ledger")
        empty = False
    if epoch == current:
        staged: int | None = state.staged_offset
    else:
        following = starts.get(epoch + 1)
        staged = following.previous_staged_offset if following is not None else None
        if following is None:
            unknown.append(f"epoch {epoch + 1}'s start is not in the ledger: where epoch {epoch} ends is not known")
    pending = [segment.first for segment in _staged_in(state, epoch)]
    last = min(pending) - 1 if pending else staged
    if first is not None and staged is not None and staged < first:
        empty = True  # begun, and nothing accepted since
    return EpochBounds(
        first,
        last,
        record_at_first=epoch == 0 and first is not None,
        probe=epoch == current,
        current=current,
        staged_offset=state.staged_offset if epoch == current else None,
        empty=empty and not pending,
        unknown="; ".join(unknown),
    )


def _staged_in(state: PartitionState, epoch: int) -> Iterator[SegmentRef]:
    """The segments of ``epoch`` accepted and not committed: OPEN buffers are the current epoch's;
    a flush sealed by an epoch start keeps the key -- and the epoch -- it was sealed under."""
    if epoch == state.epoch:
        for buffer in state.buffers.values():
            yield from buffer.segments
    for flush in [*state.sealed.values(), *(held.flush for held in state.quarantined.values())]:
        if epoch_of_key(flush.object_key) == epoch:
            yield from flush.buffer.segments


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


def missing_ranges(held: list[int], lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """Ranges of ``lo..hi`` that no position of ``held`` (sorted, distinct) covers."""
    previous = lo - 1
    for position in held[bisect_left(held, lo) :]:
        if position > hi:
            break
        if position > previous + 1:
            yield previous + 1, position - 1
        previous = position
    if hi > previous:
        yield previous + 1, hi


def _merged(ranges: Iterable[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """(first, last, records) ranges merged where they overlap or touch, records summed."""
    merged: list[tuple[int, int, int]] = []
    for first, last, records in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            head, tail, count = merged[-1]
            merged[-1] = (head, max(tail, last), count + records)
        else:
            merged.append((first, last, records))
    return merged


def _outside(first: int, last: int, regions: list[tuple[int, int, int]]) -> Iterator[tuple[int, int]]:
    """The parts of ``first..last`` outside every region (sorted, disjoint)."""
    for head, tail, _records in regions:
        if tail < first:
            continue
        if head > last:
            break
        if head > first:
            yield first, head - 1
        first = tail + 1
        if first > last:
            return
    yield first, last
