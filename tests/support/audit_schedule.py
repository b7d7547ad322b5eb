"""A seeded scheduler that audits a live Kafka archive while it is written, swept and damaged.

``run_schedule(archive, seed)`` draws everything from ``random.Random(seed)`` (a failing seed
replays exactly). Steps (see ``STEPS``):

* ``deliver``: the mapping delivers the next batch of a partition to the warm archiver;
* ``sweep``: time passes (0 to 31 minutes) and the sweeper's ``maintain`` runs on every
  partition (and registers them, as its discovery does);
* ``erase``: a committed object is deleted from S3 *and* its ledger item (nothing records it);
* ``lose_object``: a committed object is deleted from S3 only (the ledger still records it);
* ``lose_item``: a committed object's ledger item is deleted (S3 still holds it);
* ``recreate``: the topic of a partition is recreated (its offsets start again at 0, with other
  records) and the operator starts a new epoch from 0 -- at most once per schedule;
* ``audit``: an audit runs, and at random moments of its reads (its progress hook) any of the
  steps above run too: writes, sweeps and damage interleaved with the audit's own reads.

After every audit, and once more after the archive is drained, the report must hold
*exactly* what was done to the archive:

* no false alarm: a gap holds only positions of objects deleted from S3 (by then), a
  ``missing_object`` names only an object deleted from S3, an ``unknown_object`` only one whose
  ledger item was deleted, and nothing else is reported -- nothing unchecked either;
* nothing missed: every fault done *before* the audit began is reported -- the object's
  ``missing_object`` / ``unknown_object``, and each of its positions the ledger proved committed
  when the audit began in a gap.

The final audit (every record delivered and flushed) must report every fault, each position
of a deleted object in a gap, and be clean when there was none. No source probe: the workload's
offsets hold a record each, so every unheld position is a lost record.

Used by ``tests/integration/test_audit_interleavings.py`` (a few seeds) and
``bench/audit_interleavings.py`` (hundreds).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tests.support.audit import committed, erase
from tests.support.harness import EsmModel, small_config
from tests.support.workload import BASE_MS, HOUR_MS, make_orders
from tidemark.audit import Auditor, AuditReport
from tidemark.audit.findings import GAP, MISSING_OBJECT, UNKNOWN_OBJECT
from tidemark.config import TidemarkConfig
from tidemark.formats import RenderSpec, format_of
from tidemark.ledger.dynamodb import hour_pk, object_sk
from tidemark.ledger.model import CommittedObject
from tidemark.objects.keys import epoch_of_key, positions_of_key
from tidemark.sources import PartitionId
from tidemark.verify import spec_of_key
from tidemark.writer.stream import render_spec

STEPS = ("deliver",) * 6 + ("sweep",) * 3 + ("erase", "lose_object", "lose_item", "recreate") + ("audit",) * 2
DAMAGE = ("erase", "lose_object", "lose_item")
PARTITIONS = 2

Where = tuple[PartitionId, int]  # (partition, epoch)


@dataclass
class ScheduleResult:
    seed: int
    steps: list[str] = field(default_factory=list)
    audits: int = 0
    faults: int = 0
    findings: int = 0  # reported by all audits together
    problems: list[str] = field(default_factory=list)  # each a false alarm or a missed fault

    @property
    def exact(self) -> bool:
        return not self.problems


@dataclass
class _Fault:
    kind: str  # erase | lose_object | lose_item
    obj: CommittedObject
    positions: set[int]


class _Schedule:
    def __init__(self, archive: Any, seed: int) -> None:
        self.archive = archive
        self.rng = random.Random(seed)
        self.config: TidemarkConfig = small_config(max_records=self.rng.choice([20, 50, 120]))
        self.stream = self.config.streams[0]
        workload = make_orders(partitions=PARTITIONS, per_partition=self.rng.randint(120, 260), seed=seed)
        self.esm = EsmModel(workload, lambda crash: archive.runtime(self.config, crash))
        self.faults: list[_Fault] = []
        self.recreated = False
        self.result = ScheduleResult(seed)
        spec = RenderSpec.decode(render_spec(self.stream))
        self._specs = (spec, replace(spec, format="jsonl", compression="gzip", value_schema="", columns=""))

    # -- steps ---------------------------------------------------------------------------------

    def step(self, name: str, *, inside_audit: bool = False) -> None:
        self.result.steps.append(f"{name} (in an audit)" if inside_audit else name)
        partition = self.rng.randrange(PARTITIONS)
        if name == "deliver":
            self.esm.deliver(self.esm.batch(partition, self.rng.randint(1, 40)))
        elif name == "sweep":
            self.archive.clock.advance(minutes=self.rng.choice([0, 5, 16, 31]))
            runtime = self.archive.runtime(self.config)
            runtime.ledger.register_partitions(self.stream.name, range(PARTITIONS))
            for number in range(PARTITIONS):
                runtime.writer(self.stream, number).maintain()
        elif name in DAMAGE:
            self.damage(name)
        elif name == "recreate":
            self.recreate(partition)
        elif name == "audit":
            self.audit(inside=lambda: self.step(self.rng.choice([s for s in STEPS if s != "audit"]), inside_audit=True))

    def damage(self, kind: str) -> None:
        if len(self.faults) >= 4:
            return
        done = {fault.obj.key for fault in self.faults}
        candidates = [obj for obj in committed(self.archive.runtime(self.config).ledger) if obj.key not in done]
        if not candidates:
            return
        obj = self.rng.choice(candidates)
        positions = self.positions_of(obj.key)
        if kind == "erase":
            erase(self.archive, obj)
        elif kind == "lose_object":
            self.archive.s3.delete_object(Bucket=self.archive.bucket, Key=obj.key)
        else:
            key = {
                "pk": {"S": hour_pk(obj.stream, obj.hour)},
                "sk": {"S": object_sk(obj.kind, obj.partition, obj.first, obj.epoch)},
            }
            self.archive.dynamodb.delete_item(TableName=self.archive.table, Key=key)
        self.faults.append(_Fault(kind, obj, positions))
        self.result.faults += 1

    def recreate(self, partition: PartitionId) -> None:
        """The topic recreated: the partition's offsets start again at 0, other records; the
        operator starts a new epoch from 0 (records of the old log not yet delivered are gone)."""
        if self.recreated:
            return
        self.recreated = True
        fresh = make_orders(
            partitions=PARTITIONS,
            per_partition=self.rng.randint(60, 160),
            seed=self.result.seed + 10_000,
            base_ms=BASE_MS + 6 * HOUR_MS,
        )
        self.esm.workload.records[partition] = fresh.records[partition]
        self.esm.committed[partition] = 0
        self.archive.runtime(self.config).writer(self.stream, partition).start_epoch(0, reason="topic recreated")

    def positions_of(self, key: str) -> set[int]:
        raw, errors = self._specs
        spec = spec_of_key(key, errors if key.startswith("errors/") else raw)
        body = self.archive.s3.get_object(Bucket=self.archive.bucket, Key=key)["Body"].read()
        partition = positions_of_key(key)[0]
        return {int(e.offset) for e in format_of(spec).read(body, spec.context(partition, key)) if e.offset is not None}

    # -- audits --------------------------------------------------------------------------------

    def limits(self) -> dict[Where, int]:
        """Per partition and epoch, the last position the ledger proves committed, now."""
        ledger = self.archive.runtime(self.config).ledger
        limits: dict[Where, int] = {}
        for partition in range(PARTITIONS):
            state = ledger.load(self.stream.name, partition)
            starts = {start.epoch: start for start in ledger.epochs(self.stream.name, partition)}
            for epoch in range(state.epoch + 1):
                staged = [
                    segment.first
                    for flush in state.sealed.values()
                    if epoch_of_key(flush.object_key) == epoch
                    for segment in flush.buffer.segments
                ]
                if epoch == state.epoch:
                    staged += [segment.first for buffer in state.buffers.values() for segment in buffer.segments]
                    end = state.staged_offset
                else:
                    end = starts[epoch + 1].previous_staged_offset
                limits[(partition, epoch)] = min(staged) - 1 if staged else end
        return limits

    def audit(self, inside: Callable[[], None] | None = None) -> AuditReport:
        before = len(self.faults)
        limits = self.limits()
        moments = set()
        if inside is not None:
            moments = {self.rng.randint(1, 30) for _ in range(self.rng.randint(0, 3))}

        def progress(done: int, _total: int) -> None:
            if done in moments:
                assert inside is not None
                inside()

        runtime = self.archive.runtime(self.config)
        report = Auditor(self.config, self.stream.name, runtime.ledger, self.archive.s3, self.archive.bucket).run(
            progress=progress
        )
        self.result.audits += 1
        self.result.findings += len(report.findings)
        self.judge(report, self.faults[:before], self.faults, limits)
        return report

    def judge(self, report: AuditReport, earlier: list[_Fault], every: list[_Fault], limits: dict[Where, int]) -> None:
        label = f"audit {self.result.audits} after {len(self.result.steps)} steps"
        gone: dict[Where, set[int]] = defaultdict(set)  # positions of objects S3 no longer holds
        for fault in every:
            if fault.kind != "lose_item":
                gone[(fault.obj.partition, fault.obj.epoch)] |= fault.positions
        s3_gone = {fault.obj.key for fault in every if fault.kind != "lose_item"}
        items_gone = {fault.obj.key for fault in every if fault.kind == "lose_item"}
        gaps: dict[Where, set[int]] = defaultdict(set)
        problems = self.result.problems
        for finding in report.findings:
            where = (finding.partition, finding.epoch)
            if finding.kind == GAP:
                span = set(range(finding.first, finding.last + 1))
                gaps[where] |= span
                if not span <= gone[where]:
                    problems.append(f"{label}: false gap {finding.line()}")
            elif (finding.kind, finding.key in s3_gone, finding.key in items_gone) not in (
                (MISSING_OBJECT, True, False),
                (UNKNOWN_OBJECT, False, True),
            ):
                problems.append(f"{label}: false finding {finding.line()}")
        problems.extend(f"{label}: {unchecked.line()}" for unchecked in report.unchecked)
        named = {(finding.kind, finding.key) for finding in report.findings}
        for fault in earlier:
            obj = fault.obj
            if fault.kind == "lose_object" and (MISSING_OBJECT, obj.key) not in named:
                problems.append(f"{label}: missed {fault.kind} of {obj.key}")
            if fault.kind == "lose_item" and (UNKNOWN_OBJECT, obj.key) not in named:
                problems.append(f"{label}: missed {fault.kind} of {obj.key}")
            if fault.kind != "lose_item":
                limit = limits.get((obj.partition, obj.epoch), -1)
                unreported = {p for p in fault.positions if p <= limit} - gaps[(obj.partition, obj.epoch)]
                if unreported:
                    problems.append(f"{label}: {fault.kind} of {obj.key}: positions {sorted(unreported)} in no gap")

    def finish(self) -> None:
        """Every record delivered and flushed; then the last audit must name every fault."""
        self.esm.drain(40)
        self.archive.clock.advance(minutes=31)
        runtime = self.archive.runtime(self.config)
        for partition in range(PARTITIONS):
            runtime.writer(self.stream, partition).maintain()
        report = self.audit()
        limits = self.limits()
        for fault in self.faults:
            if fault.kind != "lose_item" and max(fault.positions) > limits[(fault.obj.partition, fault.obj.epoch)]:
                self.result.problems.append(f"final: {fault.obj.key} is past what the drained ledger committed")
        if not self.faults and (report.findings or not report.complete):
            self.result.problems.append(f"final: a whole archive is not clean: {[f.line() for f in report.findings]}")


def run_schedule(archive: Any, seed: int, *, steps: int = 40) -> ScheduleResult:
    schedule = _Schedule(archive, seed)
    for _ in range(steps):
        schedule.step(schedule.rng.choice(STEPS))
    schedule.finish()
    return schedule.result
