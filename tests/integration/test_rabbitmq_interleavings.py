"""A RabbitMQ stream under a seeded scheduler: warm and cold containers, sweeps, crashes at every
point, invocations inside invocations and sweeps adopting dead archivers' accepts, interleaved
at random (``tests/support/queue_schedule.py``); every schedule ends with each published id
archived exactly once, checked from S3. ``bench/queue_interleavings.py`` runs hundreds of seeds.
"""

from __future__ import annotations

import pytest

from tests.support.benches import assert_smoke_passes
from tests.support.queue_schedule import run_schedule

#: a few seeds here (29 and 31 lose to the adoption bug of issue 28 without the index caught up on
#: every adopted state); the bench runs many
SEEDS = (0, 1, 2, 3, 29, 31)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_schedule_archives_every_id_exactly_once(archive, seed):
    result = run_schedule(archive, seed)
    assert result.exactly_once, result
    assert result.archived + result.dead_lettered == result.produced > 0, result


def test_the_bench_runs_in_smoke_mode():
    assert_smoke_passes("queue_interleavings.py")
