"""Two invocations on one partition at the same time, for real (threads), many rounds."""

from __future__ import annotations

import threading

import pytest

from tests.support.events import event_of
from tests.support.harness import small_config
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.sources import KAFKA, KINESIS
from tidemark.writer.outcome import BatchOutcome


@pytest.mark.parametrize("kind", [KAFKA, KINESIS])
def test_two_concurrent_invocations_many_rounds(archive, kind):
    config = small_config(max_records=40, kind=kind)
    workload = make_orders(partitions=1, per_partition=600, seed=21, kind=kind)
    (partition,) = workload.records
    records = workload.records[partition]
    outcomes: list[BatchOutcome] = []
    errors: list[BaseException] = []
    start = 0
    rounds = 0
    # Two warm containers, each keeping its (soon stale) ledger state between rounds.
    containers = [Archiver(archive.runtime(config)), Archiver(archive.runtime(config))]
    while start < len(records):
        barrier = threading.Barrier(2)
        # A rebalance overlap: the old and the new owner both got the same uncommitted batch,
        # one of them a little more.
        batches = [records[start : start + 30], records[start : start + 45]]

        def run(archiver, batch, barrier=barrier):
            barrier.wait()
            try:
                outcomes.append(archiver.handle(event_of(batch, kind))["orders"])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=pair) for pair in zip(containers, batches, strict=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        start += 45
        rounds += 1
        archive.clock.advance(seconds=20)
    assert errors == []
    archive.clock.advance(minutes=31)
    archive.runtime(config).writer(config.streams[0], partition).maintain()

    from tidemark.verify import verify_archive

    report = verify_archive(archive.s3, archive.bucket, "orders", workload.expected)
    assert (report.produced, report.lost, report.duplicated, report.misfiled, report.corrupted) == (
        600,
        [],
        [],
        [],
        [],
    )
    # Every record was staged exactly once across both invocations of every round.
    assert sum(outcome.staged for outcome in outcomes) == 600
    assert rounds == 14
    assert sum(outcome.conflicts for outcome in outcomes) > 0  # the two really did collide
    assert sorted(p.name for p in archive.staging_root.rglob("*.seg")) == []
