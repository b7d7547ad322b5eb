"""A seeded scheduler for ``tidemark recover``: records the mapping withheld, archived from Kafka
while the partition keeps archiving, recoveries crash and run inside one another.

``run_schedule(archive, seed, bootstrap=...)`` draws everything from ``random.Random(seed)`` (a
failing seed replays exactly): a fresh topic of 1 or 2 partitions on the embedded broker, the
orders produced to it up front, and a configuration (flush size, format, a schema registry or
not, tombstones or not). Steps (see ``STEPS``):

* ``deliver``: the warm container takes the next batch of a partition, the mapping withholding
  some of its records -- a random subset, or the whole batch (its bounded retries ran out); a
  registry stream's withheld records are those its registry cannot decode, the same ones at
  every delivery -- and the mapping moves past the batch;
* ``crash_deliver``: the same through a cold container dying at a crash point (nothing
  committed: the mapping delivers the batch again later, maybe withholding others);
* ``flush``: time passes (0 to 31 minutes) and ``maintain`` runs on every partition (dying at a
  crash point now and then);
* ``recover``: a ``Recoverer`` runs whole on a partition (its ``Limits`` small now and then, so
  that it makes several units); then no claim may be left, and an audit against the log must
  find no gap of the partition below the bounds the run began with, nor anything but gaps (an
  upload of a unit another partition's run claimed and died with is not the archive's yet: the
  audit excuses it as it does a flush's upload whose commit is in flight);
* ``recover_crash``: a run dying at the n-th hit of a point of ``RECOVERY_CRASH_POINTS``;
* ``recover_inside``: a run during which, at its claim or one of its uploads, another step runs
  whole (another recovery -- maybe one that dies --, a delivery or a flush);
* ``flush_inside``: a flush during which, at a point of its seal, upload or commit, a recovery
  runs whole.

Then every record left is delivered, everything flushed and the recovery run on each partition
to completion (a second run must find nothing), and the archive is compared with the plain
reference: every produced record exactly once (``verify_archive``; a registry stream's withheld
records as dead letters), every object uploaded once (the bucket is versioned: one version a key,
no delete marker) and described by its key and ledger item, no claim left, and the audit
against the log clean and complete.

The partition's first and last records are never withheld: the archive of a partition starts
at the first record the ledger accepted, and a record withheld after the last one delivered
waits for a later delivery (``tidemark.recover.recoverer``).

Used by ``tests/integration/test_recover_interleavings.py`` (a few seeds) and
``bench/recover_interleavings.py`` (hundreds).
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from tests.support.harness import (
    PARTITIONED_FORMATS,
    EsmModel,
    RunOtherAt,
    assert_objects_describe_themselves,
    small_config_data,
)
from tests.support.kafka import produce_records
from tests.support.workload import make_orders
from tidemark.audit import Auditor, AuditReport
from tidemark.audit.auditor import epoch_bounds
from tidemark.audit.findings import GAP
from tidemark.config import parse_config
from tidemark.embedded.workload import ensure_topic
from tidemark.faults import (
    AFTER_COMMIT,
    AFTER_RECOVERY_CLAIM,
    AFTER_SEAL,
    AFTER_UPLOAD,
    ALL_CRASH_POINTS,
    BEFORE_UPLOAD,
    RECOVERY_CRASH_POINTS,
    CrashAt,
    CrashPoints,
    SimulatedCrash,
)
from tidemark.kafka_log import KafkaLog
from tidemark.records.model import Record
from tidemark.recover import Limits, PartitionRecovery, Recoverer
from tidemark.sources import PartitionId
from tidemark.verify import verify_archive

STEPS = ("deliver",) * 5 + ("crash_deliver", "flush", "flush") + ("recover", "recover_crash", "recover_inside")
STEPS += ("flush_inside",)
#: what runs inside a recovery (``recover_inside``)
INSIDE = ("recover", "recover", "recover_crash", "deliver", "flush")
#: where a recovery lets another step run: its claim, and around each object's upload
WINDOWS = (AFTER_RECOVERY_CLAIM, BEFORE_UPLOAD, AFTER_UPLOAD)
#: where a flush lets a recovery run
FLUSH_WINDOWS = (AFTER_SEAL, BEFORE_UPLOAD, AFTER_UPLOAD, AFTER_COMMIT)
LIMITS = (Limits(), Limits(), Limits(objects=1), Limits(records=2))
GLUE = {"kind": "glue", "registry_arn": "arn:aws:glue:us-east-1:123456789012:registry/orders"}


@dataclass
class ScheduleResult:
    seed: int
    steps: list[str] = field(default_factory=list)
    shape: str = ""  # partitions, format, flush size, registry, tombstones
    partitions: int = 0
    produced: int = 0
    withheld: int = 0  # records a delivery that went through withheld
    crashes: int = 0  # deliveries, flushes and recoveries that died at a crash point
    recoveries: int = 0  # recover runs that returned (inner ones included)
    recovered: int = 0  # records those runs archived themselves
    lost: int = 0
    duplicated: int = 0
    other: int = 0  # unexpected, misfiled or corrupted
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def reason(self) -> str:
        return "; ".join(self.problems[:3])


class RecoveryCrash:
    """Die (in-process) at the ``nth`` hit of ``point`` -- a recovery point, or an upload's."""

    def __init__(self, point: str, nth: int = 1) -> None:
        self.point = point
        self.nth = nth
        self.hits = 0

    def hit(self, name: str) -> None:
        if name == self.point:
            self.hits += 1
            if self.hits == self.nth:
                raise SimulatedCrash(name)


class _Schedule:
    def __init__(self, archive: Any, seed: int, bootstrap: str) -> None:
        self.archive = archive
        self.rng = rng = random.Random(seed)
        self.result = ScheduleResult(seed)
        self.partitions = rng.choice((1, 2))
        self.registry = rng.random() < 0.25
        self.share = rng.choice((0.05, 0.15, 0.4))  # of a batch's records withheld
        self.topic = f"recover-{seed}-{uuid.uuid4().hex[:8]}"
        fmt, max_records = rng.choice(("jsonl", "jsonl", "parquet", "avro")), rng.choice((10, 30, 10_000))
        data = small_config_data(max_records=max_records, topic=self.topic, **PARTITIONED_FORMATS.get(fmt, {}))
        if self.registry:
            data["streams"][0]["source"]["schema_registry"] = GLUE
            data["streams"][0]["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 2}}
        self.config = parse_config(data)
        self.stream = self.config.streams[0]
        tombstones = rng.choice((0.0, 0.0, 0.05))
        workload = make_orders(
            partitions=self.partitions,
            per_partition=rng.randint(60, 160),
            hours=rng.randint(1, 3),
            seed=seed,
            topic=self.topic,
            tombstone_share=tombstones,
        )
        self.result.partitions = self.partitions
        self.result.shape = ", ".join(
            [f"{self.partitions} partitions", fmt, f"max_records {max_records}", f"{self.share:.0%} withheld"]
            + ["registry"] * self.registry
            + ["tombstones"] * bool(tombstones)
        )
        ensure_topic(bootstrap, self.topic, self.partitions)
        for rows in workload.records.values():
            offsets = produce_records(bootstrap, rows)
            assert offsets == [row.offset for row in rows], f"the broker gave offsets {offsets[:5]}..."
        self.result.produced = len(workload.expected)
        self.esm = EsmModel(workload, lambda crash: archive.runtime(self.config, crash))
        self.ends = {p: {rows[0].offset, rows[-1].offset} for p, rows in workload.records.items()}
        self.undecodable: dict[PartitionId, dict[int, bool]] = {p: {} for p in workload.records}
        self.withheld: dict[PartitionId, set[int]] = {p: set() for p in workload.records}
        archive.s3.put_bucket_versioning(Bucket=archive.bucket, VersioningConfiguration={"Status": "Enabled"})
        self.log: KafkaLog | None = None

    # -- steps ---------------------------------------------------------------------------------

    def step(self, name: str, *, inside: str = "") -> None:
        steps = self.result.steps
        at = len(steps)
        partition = self.rng.randrange(self.partitions)
        where = "" if name.startswith("flush") else f" p{partition}"
        steps.append(f"{name}{where}" + (f" (inside {inside})" if inside else ""))
        if name == "deliver":
            self.deliver(partition)
        elif name == "crash_deliver":
            crash = CrashAt(self.rng.choice(ALL_CRASH_POINTS))
            self.deliver(partition, crash)
            steps[at] += f" at {crash.point}" + (" (died)" if crash.fired else "")
        elif name == "flush":
            crash = CrashAt(self.rng.choice(ALL_CRASH_POINTS)) if self.rng.random() < 0.2 else None
            self.flush(crash)
            steps[at] += f" at {crash.point}" + (" (died)" if crash.fired else "") if crash else ""
        elif name == "recover":
            report = self.recover_and_check(partition, nested=bool(inside))
            steps[at] += f": {report.records} records" if report else ": refused"
        elif name == "recover_crash":
            died = RecoveryCrash(self.rng.choice(RECOVERY_CRASH_POINTS), self.rng.choice((1, 1, 2)))
            report = self.recover(partition, died, self.rng.choice(LIMITS[1:]))
            steps[at] += f" at {died.point}#{died.nth}" + (
                " (died)" if died.hits >= died.nth else f": {report.records} records" if report else ": refused"
            )
        elif name == "recover_inside":
            inner = self.rng.choice(INSIDE)
            hook = RunOtherAt(self.rng.choice(WINDOWS), lambda: self.step(inner, inside=f"a recovery of p{partition}"))
            report = self.recover(partition, hook)
            steps[at] += f" at {hook.point}: " + (f"{report.records} records" if report else "refused")
        elif name == "flush_inside":
            hook = RunOtherAt(self.rng.choice(FLUSH_WINDOWS), lambda: self.step("recover", inside="a flush"))
            self.flush(hook)
            steps[at] += f" at {hook.point}"
        else:
            raise ValueError(name)

    def withhold(self, batch: list[Record]) -> set[int]:
        """The offsets of ``batch`` the mapping does not deliver (never a partition's first or last)."""
        partition = batch[0].partition
        ends = self.ends[partition]
        if self.registry:  # the registry rejects the same records every time
            decided = self.undecodable[partition]
            for record in batch:
                if record.offset not in decided:
                    decided[record.offset] = record.offset not in ends and self.rng.random() < self.share
            return {record.offset for record in batch if decided[record.offset]}
        if self.rng.random() < 0.1:  # the batch ran out of its bounded retries: skipped whole
            return {record.offset for record in batch} - ends
        return {record.offset for record in batch if record.offset not in ends and self.rng.random() < self.share}

    def deliver(self, partition: PartitionId, crash: CrashPoints | None = None) -> bool:
        batch = self.esm.batch(partition, self.rng.randint(1, 40))
        if not batch:
            return True
        withheld = self.withhold(batch)
        crashes = self.esm.crashes
        if not self.esm.deliver([record for record in batch if record.offset not in withheld], crash):
            self.result.crashes += self.esm.crashes - crashes
            return False
        self.esm.committed[partition] = max(self.esm.committed[partition], batch[-1].offset + 1)  # past the batch
        self.withheld[partition] |= withheld
        return True

    def flush(self, crash: CrashPoints | None = None) -> None:
        self.archive.clock.advance(minutes=self.rng.choice((0, 5, 16, 31)))
        runtime = self.archive.runtime(self.config, crash)
        runtime.ledger.register_partitions(self.stream.name, range(self.partitions))
        try:
            for partition in range(self.partitions):
                runtime.writer(self.stream, partition).maintain()
        except SimulatedCrash:  # the next flush resumes
            self.result.crashes += 1

    def recover(
        self, partition: PartitionId, crash: CrashPoints | None = None, limits: Limits | None = None
    ) -> PartitionRecovery | None:
        """One ``tidemark recover`` run on ``partition``, in a process of its own; ``None`` if it
        died at a crash point, or refused (a problem)."""
        assert self.log is not None
        runtime = self.archive.runtime(self.config, crash)
        recoverer = Recoverer(
            runtime.writer(self.stream, partition),
            runtime.ledger,
            self.archive.s3,
            self.archive.bucket,
            self.log,
            clock=self.archive.clock,
            crash_points=crash,
            limits=limits or self.rng.choice(LIMITS),
        )
        try:
            report = recoverer.run()
        except SimulatedCrash:
            self.result.crashes += 1
            return None
        except Exception as exc:  # noqa: BLE001 - a refusal, or worse: the seed fails, the others run
            self.result.problems.append(f"step {len(self.result.steps)}: recover of partition {partition}: {exc!r}")
            return None
        self.result.recoveries += 1
        self.result.recovered += report.records
        return report

    def recover_and_check(self, partition: PartitionId, *, nested: bool) -> PartitionRecovery | None:
        """A whole run; on its own (not inside another step), nothing below the bounds it began
        with is left missing, and no claim is left."""
        hi = None if nested else self.committed_up_to(partition)
        report = self.recover(partition)
        if report is None or nested:
            return report
        label = f"step {len(self.result.steps)} (recover of partition {partition}, to {hi})"
        ledger = self.archive.runtime(self.config).ledger
        if ledger.recovery(self.stream.name, partition).pending is not None:
            self.result.problems.append(f"{label}: a claim is left pending")
        audit = self.audit()
        epoch = ledger.load(self.stream.name, partition).epoch
        for finding in audit.findings:
            if finding.kind != GAP:
                self.result.problems.append(f"{label}: audit: {finding.line()}")
            elif (finding.partition, finding.epoch) == (partition, epoch) and hi is not None and finding.first <= hi:
                self.result.problems.append(f"{label}: left missing: {finding.line()}")
        self.result.problems.extend(f"{label}: audit: {unchecked.line()}" for unchecked in audit.unchecked)
        return report

    def committed_up_to(self, partition: PartitionId) -> int | None:
        """The last position of the current epoch the ledger proves committed, now."""
        ledger = self.archive.runtime(self.config).ledger
        state = ledger.load(self.stream.name, partition)
        starts = {start.epoch: start for start in ledger.epochs(self.stream.name, partition)}
        return epoch_bounds(state, state.epoch, starts).last

    def audit(self) -> AuditReport:
        runtime = self.archive.runtime(self.config)
        auditor = Auditor(
            self.config, self.stream.name, runtime.ledger, self.archive.s3, self.archive.bucket, probe=self.log
        )
        return auditor.run()

    # -- the end -------------------------------------------------------------------------------

    def finish(self) -> None:
        """Every record delivered, everything flushed, every partition recovered to completion;
        then the archive must be exactly the plain reference."""
        problems = self.result.problems
        for partition in range(self.partitions):
            refused = 0
            while self.esm.pending(partition):
                if not self.deliver(partition):
                    refused += 1  # refused once for a state that moved meanwhile, then archived
                    if refused > 3:
                        problems.append(f"final: partition {partition}: a delivery without faults refused")
                        return
        self.archive.clock.advance(minutes=31)
        runtime = self.archive.runtime(self.config)
        runtime.ledger.register_partitions(self.stream.name, range(self.partitions))
        for partition in range(self.partitions):
            runtime.writer(self.stream, partition).maintain()
            state = runtime.ledger.load(self.stream.name, partition)
            if state.buffers or state.sealed or state.quarantined:
                problems.append(f"final: partition {partition} still stages records after the last flush")
        for partition in range(self.partitions):
            if self.recover(partition, limits=Limits()) is None:
                continue
            again = self.recover(partition, limits=Limits())
            if again is not None and again.units:
                problems.append(f"final: partition {partition}: a second run recovered {again.to_dict()['units']}")
            if runtime.ledger.recovery(self.stream.name, partition).pending is not None:
                problems.append(f"final: partition {partition}: a claim is left pending")
        self.compare()

    def expected(self) -> list[Any]:
        expected = self.esm.workload.expected
        if not self.registry:
            return expected
        dead = {(p, offset) for p, decided in self.undecodable.items() for offset, no in decided.items() if no}
        return [replace(e, hour=None) if (e.partition, e.offset) in dead else e for e in expected]

    def compare(self) -> None:
        problems = self.result.problems
        expected = self.expected()
        report = verify_archive(self.archive.s3, self.archive.bucket, "orders", expected, config=self.stream)
        self.result.lost = len(report.lost)
        self.result.duplicated = len(report.duplicated)
        self.result.other = len(report.unexpected) + len(report.misfiled) + len(report.corrupted)
        for kind in ("lost", "duplicated", "unexpected", "misfiled", "corrupted"):
            found = getattr(report, kind)
            if found:
                problems.append(f"final: {len(found)} {kind}: {found[:5]}")
        if report.archived + report.dead_lettered != len(expected):
            found = report.archived + report.dead_lettered
            problems.append(f"final: {found} records archived or dead-lettered, {len(expected)} produced")
        pages = self.archive.s3.get_paginator("list_object_versions").paginate(Bucket=self.archive.bucket)
        versions: Counter[str] = Counter()
        for page in pages:
            versions.update(version["Key"] for version in page.get("Versions", []))
            problems.extend(f"final: {marker['Key']} was deleted" for marker in page.get("DeleteMarkers", []))
        problems.extend(f"final: {key} uploaded {n} times" for key, n in sorted(versions.items()) if n > 1)
        try:
            assert_objects_describe_themselves(self.archive, self.config)
        except (AssertionError, KeyError) as exc:  # KeyError: an object in S3 the ledger does not record
            problems.append(f"final: an object is not what its key and ledger item say: {exc!r}")
        audit = self.audit()
        problems.extend(f"final: audit: {finding.line()}" for finding in audit.findings)
        problems.extend(f"final: audit: {unchecked.line()}" for unchecked in audit.unchecked)
        if not (audit.clean and audit.complete):
            problems.append(f"final: the audit is not clean and complete ({len(audit.findings)} findings)")


def run_schedule(archive: Any, seed: int, *, bootstrap: str, steps: int = 40) -> ScheduleResult:
    schedule = _Schedule(archive, seed, bootstrap)
    with KafkaLog(bootstrap, schedule.topic) as log:
        schedule.log = log
        for _ in range(steps):
            schedule.step(schedule.rng.choice(STEPS))
        schedule.finish()
    schedule.result.withheld = sum(len(offsets) for offsets in schedule.withheld.values())
    return schedule.result
