"""The replay beside a live archive, under a seeded scheduler (``tests/support/replay_schedule.py``):
archiver deliveries (cold containers dying at crash points too), sweeps and drains -- also at the
replay plan's ledger reads -- and the same replay command killed at its plan, its tail read or a
record it produced, then run again. Every run that completes must leave each record it planned
once in the target, and the last one (everything flushed) every record of the command's hours:
exactly once, nothing else. ``bench/replay_interleavings.py`` runs hundreds of seeds."""

from __future__ import annotations

from tests.conftest import make_archive
from tests.support.benches import assert_smoke_passes
from tests.support.replay_schedule import run_schedule

#: 1: ``key`` over a window of hours; 8: ``same`` over two partitions, kills; 9: a window of hours,
#: many reruns; 12: two partitions, flushes committed while runs plan are left to reruns (a plan
#: that kept them, past what its partition's state had reached, loses records here)
SEEDS = (1, 8, 9, 12)


def test_every_seeded_replay_ends_with_each_record_once_in_the_target(archive, kafka_bootstrap):
    results = []
    for seed in SEEDS:  # an archive and a target topic of their own each
        result = run_schedule(
            make_archive(archive.endpoint, archive.staging_root / f"seed-{seed}"), kafka_bootstrap, seed
        )
        assert result.exact, "\n".join([f"seed {seed}:", *result.problems, "steps:", *result.steps])
        assert result.replays >= 2 and result.records > 0, result
        results.append(result)
    # The seeds are not idle: together they kill runs, refuse some, write while runs plan, and
    # leave flushes committed during a plan to the rerun.
    steps = [step for result in results for step in result.steps]
    assert sum(result.interruptions for result in results) >= 3
    assert sum(result.refused for result in results) >= 1
    assert any("at a plan read of" in step for step in steps)
    assert sum(result.later_objects for result in results) >= 1
    assert any(" key into " in step for step in steps) and any(" same into " in step for step in steps)


def test_the_bench_runs_in_smoke_mode():
    assert_smoke_passes("replay_interleavings.py")
