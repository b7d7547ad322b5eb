"""Reconciliation: the ledger's committed objects and the bucket must agree, both ways.

Per event hour (every hour inside ``sweeper.reconcile_lookback``, and any older hour with
commits not yet checked in full):

* every object the ledger committed exists in S3 with the recorded size (listing), and -- the
  first time an hour's commits are checked -- the recorded SHA-256 (``HEAD`` metadata);
* no object exists under the stream's raw or error prefix for that hour that the ledger does not
  know, except the object of a flush that is SEALED right now (uploaded, commit in flight); and
  none directly under the stream's prefixes, outside every hour folder.

What it does not do, for cost: re-list hours older than the lookback once their commits were
checked, or re-read checksums of objects already checked (a same-size overwrite inside the
lookback shows up only through S3's own versioning and access logs).

A time budget (``deadline_ms``, ``tidemark.sweeper.budget``): no hour is started after it; the
hours left are counted (``hours_deferred``) and the next run checks them, since an hour is
recorded as checked only once it was checked clean.

Findings are logged and counted; nothing in S3 is ever deleted or rewritten. The order of reads
(read the ledger's objects, list S3 under the hour's folders; only for keys the ledger does not
know: the SEALED flushes, then the ledger's objects once more) means an object committed while
the check runs is never reported: it is uploaded before its commit, so listed if the first read
saw it, and committed, or in flight, by the time it is looked up again otherwise.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from tidemark.eventtime import HourBucketer
from tidemark.ledger.model import CommittedObject, HourMark
from tidemark.objects.keys import hour_folder_of_key, hour_folders
from tidemark.objects.writer import META_SHA256
from tidemark.runtime import Runtime
from tidemark.sources import PartitionId
from tidemark.sweeper.budget import passed
from tidemark.sweeper.discovery import discover

logger = logging.getLogger(__name__)

MISSING = "missing_object"  # committed in the ledger, absent from S3
SIZE_MISMATCH = "size_mismatch"
CHECKSUM_MISMATCH = "checksum_mismatch"
UNKNOWN = "unknown_object"  # in S3 under the stream's prefix, unknown to the ledger
HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    stream: str
    hour: str
    key: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "stream": self.stream, "hour": self.hour, "key": self.key, "detail": self.detail}


@dataclass
class ReconcileReport:
    hours_checked: int = 0
    objects_checked: int = 0
    checksums_checked: int = 0
    hours_deferred: int = 0  # not started: the step's deadline had passed (the next run checks them)
    findings: list[Finding] = field(default_factory=list)

    def counts(self) -> Counter[str]:
        return Counter(finding.kind for finding in self.findings)

    def summary(self) -> dict[str, Any]:
        return {
            "hours_checked": self.hours_checked,
            "objects_checked": self.objects_checked,
            "checksums_checked": self.checksums_checked,
            "hours_deferred": self.hours_deferred,
            "findings": dict(self.counts()),
            "details": [finding.to_dict() for finding in self.findings[:50]],
        }


class Reconciler:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.s3 = runtime.objects.client
        self.bucket = runtime.objects.bucket
        self.archive = runtime.config.archive

    def _folders(self, stream: str, hour: str, committed: list[CommittedObject]) -> set[str]:
        """The folders the hour's objects are in: the hour folder of each prefix in the configured
        layout, and the folder of every committed object (partition-by folders, an older layout).

        A partitioned stream's hour is spread over one folder per partition value, which no
        prefix of the hour covers; its unknown objects are looked for in the folders the ledger
        knows of (listing the whole stream on every sweep would cost more than it finds)."""
        config = self.runtime.config.stream(stream)
        hours = hour_folders(hour, config.partition_by.hour_folders == "hive")
        folders = {f"{self.archive.errors_prefix}/{stream}/{hours}/"}
        if not config.partition_by.fields:
            folders.add(f"{self.archive.raw_prefix}/{stream}/{hours}/")
        folders.update(hour_folder_of_key(item.key) for item in committed)
        return folders

    def _listing(self, folders: set[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for folder in sorted(folders):
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=folder):
                found.update((item["Key"], item["Size"]) for item in page.get("Contents", []))
        return found

    def _head(self, key: str) -> dict[str, Any] | None:
        """The metadata of an object the listing just showed, or ``None`` if it is gone since.

        Existence is the listing's to decide, never a HEAD's: S3 answers a HEAD of a missing key
        with 404 only to a caller allowed ``s3:ListBucket`` on the bucket, and with 403 otherwise
        (HeadObject API reference, Permissions), and this step's ``s3:ListBucket`` is scoped by
        ``s3:prefix``, which a HEAD does not carry. So a 403 is looked up once more by listing
        the key itself: gone, it is missing; still there, the denial is real and raised."""
        try:
            return dict(self.s3.head_object(Bucket=self.bucket, Key=key))
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code in ("404", "NoSuchKey", "NotFound"):
                return None
            if code in ("403", "AccessDenied") and not self._listed(key):
                return None
            raise

    def _listed(self, key: str) -> bool:
        page = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
        return any(item["Key"] == key for item in page.get("Contents", []))

    def hours_to_check(self, stream: str, now_ms: int) -> tuple[list[str], dict[str, HourMark]]:
        timezone = self.runtime.config.stream(stream).event_time.timezone
        labels = HourBucketer(timezone)
        lookback = self.runtime.config.sweeper.reconcile_lookback_ms
        window = {labels.label(ms) for ms in range(now_ms - lookback, now_ms + 1, HOUR_MS // 4)}
        marks = {mark.hour: mark for mark in self.runtime.ledger.hour_marks(stream)}
        unchecked = {hour for hour, mark in marks.items() if mark.reconciled_commits < mark.commits}
        return sorted(window | unchecked), marks

    def _strays_at_the_root(self, stream: str, report: ReconcileReport) -> None:
        """Objects directly under ``<prefix>/<stream>/`` (outside any hour folder): never Tidemark's."""
        for prefix in (self.archive.raw_prefix, self.archive.errors_prefix):
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{prefix}/{stream}/", Delimiter="/"
            )
            for page in pages:
                for item in page.get("Contents", []):
                    report.findings.append(Finding(UNKNOWN, stream, "", item["Key"], f"{item['Size']} bytes"))

    def reconcile_stream(
        self, stream: str, now_ms: int, report: ReconcileReport, deadline_ms: int | None = None
    ) -> None:
        self._strays_at_the_root(stream, report)
        hours, marks = self.hours_to_check(stream, now_ms)
        hours = self._in_budget_order(hours, marks, now_ms)
        partitions = [ref.partition for ref in discover(self.runtime, stream)]
        checked_before = report.hours_checked
        for index, hour in enumerate(hours):
            # at least one hour per stream and run, whatever the time: a backlog never stops the
            # reconciliation of a stream, nor one stream's backlog that of the streams after it
            if report.hours_checked > checked_before and passed(self.runtime.clock.now_ms(), deadline_ms):
                report.hours_deferred += len(hours) - index
                break
            committed = self.runtime.ledger.committed_objects(stream, hour)
            listing = self._listing(self._folders(stream, hour, committed))
            strangers = set(listing) - {item.key for item in committed}
            if strangers:  # rare: an upload whose commit is in flight, or a real stranger
                strangers -= self._in_flight(stream, hour, partitions)
                strangers -= {item.key for item in self.runtime.ledger.committed_objects(stream, hour)}
            mark = marks.get(hour)
            full = mark is not None and mark.reconciled_commits < mark.commits
            before = len(report.findings)
            self._compare(stream, hour, listing, committed, full, report)
            for key in sorted(strangers):
                report.findings.append(Finding(UNKNOWN, stream, hour, key, f"{listing[key]} bytes"))
            report.hours_checked += 1
            if full and mark is not None and len(report.findings) == before:
                self.runtime.ledger.record_reconciled(mark)

    def _in_budget_order(self, hours: list[str], marks: dict[str, HourMark], now_ms: int) -> list[str]:
        """The order a run with a time budget checks hours in: those with commits not yet checked
        first (oldest first), then the lookback's rechecks starting at a place that moves with
        every interval, so a run cut short by its deadline never leaves the same hours out twice."""
        unchecked = [h for h in hours if (m := marks.get(h)) is not None and m.reconciled_commits < m.commits]
        rest = [h for h in hours if h not in set(unchecked)]
        if rest:
            turn = (now_ms // self.runtime.config.sweeper.interval_ms) % len(rest)
            rest = rest[turn:] + rest[:turn]
        return unchecked + rest

    def _in_flight(self, stream: str, hour: str, partitions: list[PartitionId]) -> set[str]:
        """Object keys of the hour's SEALED flushes: uploaded or about to be, not yet committed."""
        return {
            flush.object_key
            for partition in partitions
            for flush in self.runtime.ledger.load(stream, partition).sealed.values()
            if flush.buffer.key.hour == hour
        }

    def _compare(
        self,
        stream: str,
        hour: str,
        listing: dict[str, int],
        committed: list[CommittedObject],
        full: bool,
        report: ReconcileReport,
    ) -> None:
        for item in committed:
            report.objects_checked += 1
            size = listing.get(item.key)
            head = self._head(item.key) if size is not None and full else None
            if size is None or (full and head is None):
                report.findings.append(Finding(MISSING, stream, hour, item.key, f"{item.records} records"))
                continue
            actual = size
            if actual != item.size:
                report.findings.append(
                    Finding(SIZE_MISMATCH, stream, hour, item.key, f"ledger {item.size} bytes, S3 {actual}")
                )
            if head is not None:
                report.checksums_checked += 1
                digest = head.get("Metadata", {}).get(META_SHA256, "")
                if digest != item.sha256:
                    report.findings.append(
                        Finding(CHECKSUM_MISMATCH, stream, hour, item.key, f"ledger {item.sha256}, S3 {digest!r}")
                    )

    def run(self, now_ms: int, deadline_ms: int | None = None) -> ReconcileReport:
        report = ReconcileReport()
        for stream in self.runtime.config.streams:
            self.reconcile_stream(stream.name, now_ms, report, deadline_ms)
        for finding in report.findings:
            logger.error("reconciliation finding", extra=finding.to_dict())
        return report
