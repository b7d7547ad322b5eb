"""The sweeper and a live archiver on the same partition at the same moment, for real (threads),
many rounds: the ledger's conditional writes keep it exactly once, and a buffer the sweeper
sealed is never appended to -- the archiver opens a new one. And two sweeps of one partition
at once (overlapping executions: one outlasting its interval, or the schedule delivered twice),
the second run at every point of the first one's flush."""

from __future__ import annotations

import threading

import pytest

from tests.support.events import msk_event
from tests.support.harness import (
    EsmModel,
    RunOtherAt,
    assert_exactly_once,
    assert_objects_describe_themselves,
    small_config,
    staged_files,
)
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.faults import AFTER_COMMIT, AFTER_SEAL, AFTER_UPLOAD, BEFORE_UPLOAD, DURING_CLEANUP
from tidemark.sweeper.sweep import SweepOutcome, sweep_partition
from tidemark.verify import verify_archive
from tidemark.writer.outcome import BatchOutcome


def test_sweeper_and_archiver_on_one_partition_many_rounds(archive):
    config = small_config(max_records=70)
    workload = make_orders(partitions=1, per_partition=900, hours=2, seed=33)
    records = workload.records[0]
    archiver = Archiver(archive.runtime(config))  # a warm container
    sweeper = archive.runtime(config)  # the sweeper's own Lambda
    deliveries: list[BatchOutcome] = []
    sweeps: list[SweepOutcome] = []
    errors: list[BaseException] = []
    rounds = 0
    for start in range(0, len(records), 30):
        batch = records[start : start + 30]
        barrier = threading.Barrier(2)

        def deliver(batch=batch, barrier=barrier) -> None:
            barrier.wait()
            try:
                deliveries.append(archiver.handle(msk_event(batch))["orders"])
            except BaseException as exc:  # noqa: BLE001 - a failed invocation: the ESM redelivers
                errors.append(exc)
                deliveries.append(archiver.handle(msk_event(batch))["orders"])

        def sweep(barrier=barrier) -> None:
            barrier.wait()
            sweeps.append(sweep_partition(sweeper, "orders", 0))

        threads = [threading.Thread(target=deliver), threading.Thread(target=sweep)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        rounds += 1
        archive.clock.advance(minutes=4)  # every few rounds a buffer passes max age (15m) for the sweeper

    archive.clock.advance(minutes=31)
    sweep_partition(sweeper, "orders", 0)

    report = verify_archive(archive.s3, archive.bucket, "orders", workload.expected)
    assert report.summary() == {**report.summary(), "produced": 900, "lost": 0, "duplicated": 0, "misfiled": 0}
    assert report.ok and report.archived + report.dead_lettered == 900
    assert_objects_describe_themselves(archive, config)
    assert staged_files(archive) == set()
    assert rounds == 30
    swept_flushes = sum(sum(outcome.flushed.values()) for outcome in sweeps)
    archiver_flushes = sum(len(outcome.flushes) for outcome in deliveries)
    assert swept_flushes > 0 and archiver_flushes > 0  # both sides really flushed this partition
    assert sum(outcome.conflicts for outcome in deliveries) > 0  # and really collided in the ledger


@pytest.mark.parametrize("point", [AFTER_SEAL, BEFORE_UPLOAD, AFTER_UPLOAD, AFTER_COMMIT, DURING_CLEANUP])
def test_two_overlapping_sweeps_of_one_partition_archive_it_exactly_once(archive, point):
    """Executions overlap: one can outlast its interval (its TimeoutSeconds is longer, and a
    timed-out execution does not stop a running invocation), and EventBridge may start the
    same rule's target twice. Two SweepPartition invocations of one partition are then two
    writers fenced by the ledger's version, like two archiver invocations: the second sweep runs
    whole at ``point`` of the first one's first flush, and the first one carries on after it."""
    config = small_config(max_records=10_000)  # nothing rotates by size: max age, in the sweeps
    workload = make_orders(partitions=1, per_partition=90, hours=3, seed=8)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    esm.drain(30)
    archive.clock.advance(minutes=16)  # every buffer past max age
    due = len(archive.runtime(config).ledger.load("orders", 0).buffers)
    overlapping: list[SweepOutcome] = []
    hook = RunOtherAt(point, lambda: overlapping.append(sweep_partition(archive.runtime(config), "orders", 0)))

    first = sweep_partition(archive.runtime(config, hook), "orders", 0)

    assert hook.fired and len(overlapping) == 1
    flushed = sum(first.flushed.values()) + sum(overlapping[0].flushed.values())
    state = archive.runtime(config).ledger.load("orders", 0)
    assert state.idle and not state.sealed and not state.quarantined
    assert flushed == due  # each flush committed once, by one of them
    assert first.flush_errors == overlapping[0].flush_errors == 0
    assert_exactly_once(archive, config, esm)
    assert staged_files(archive) == set()
