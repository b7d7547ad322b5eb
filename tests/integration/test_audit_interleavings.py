"""The audit beside a live archive, under a seeded scheduler (``tests/support/audit_schedule.py``):
archiver writes, sweeps, a recreated topic's new epoch, objects and ledger items deleted at
random -- also while the audit reads. Every audit must report exactly the damage done (each
fault done before it began, nothing that was not done), and the last one, once everything is
flushed, every fault. ``bench/audit_interleavings.py`` runs hundreds of seeds."""

from __future__ import annotations

from tests.conftest import make_archive
from tests.support.audit_schedule import run_schedule
from tests.support.benches import assert_smoke_passes

SEEDS = (0, 1, 2, 3)


def test_every_audit_of_seeded_schedules_reports_exactly_the_damage_done(archive):
    results = []
    for seed in SEEDS:  # an archive of its own each
        result = run_schedule(make_archive(archive.endpoint, archive.staging_root / f"seed-{seed}"), seed)
        assert result.exact, "\n".join([f"seed {seed}:", *result.problems, f"steps: {result.steps}"])
        assert result.audits >= 2, result
        results.append(result)
    # The seeds are not idle: together they damage the archive, find it, and audit while writing.
    assert sum(result.faults for result in results) >= 3
    assert sum(result.findings for result in results) >= 3
    assert any("(in an audit)" in step for result in results for step in result.steps)
    assert any(step == "recreate" for result in results for step in result.steps)


def test_the_bench_runs_in_smoke_mode():
    assert_smoke_passes("audit_interleavings.py")
