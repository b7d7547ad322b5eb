"""tidemark.embedded.chaos: seeded, bounded choices of where processes die."""

from __future__ import annotations

import pytest

from tidemark.embedded.chaos import FLUSH_POINTS, Chaos
from tidemark.embedded.esm.invokers import Invocation
from tidemark.faults import ALL_CRASH_POINTS


def test_armed_points_are_real_crash_points_and_replay_with_the_seed():
    assert [Chaos(5).arm() for _ in range(3)] == [Chaos(5).arm()] * 3
    chaos = Chaos(5)
    specs = [chaos.arm() for _ in range(200)]
    points = {spec.split(":")[0] for spec in specs}
    assert points == set(ALL_CRASH_POINTS)
    assert {int(spec.split(":")[1]) for spec in specs} == {1, 2, 3}
    assert chaos.log.armed == 200
    assert all(Chaos(9).arm(FLUSH_POINTS).split(":")[0] in FLUSH_POINTS for _ in range(20))


def test_outcomes_are_logged_by_point():
    chaos = Chaos(1)
    chaos.record("after_seal:2", Invocation(ok=False, crashed=True))
    chaos.record("after_seal:1", Invocation(ok=False, crashed=True))
    chaos.record("after_accept:1", Invocation(ok=True))
    assert chaos.log.summary() == {
        "armed": 0,
        "crashes": 2,
        "crash_points": {"after_seal": 2},
        "not_reached": 1,
        "lost_commits": 0,
    }


def test_lost_commit_rate_is_honoured():
    never, always, some = Chaos(1, lost_commit_rate=0.0), Chaos(1, lost_commit_rate=1.0), Chaos(1, lost_commit_rate=0.3)
    assert not any(never.lose_commit() for _ in range(100))
    assert all(always.lose_commit() for _ in range(100))
    lost = sum(some.lose_commit() for _ in range(100))
    assert 15 < lost < 45
    assert (never.log.lost_commits, always.log.lost_commits, some.log.lost_commits) == (0, 100, lost)


@pytest.mark.parametrize("rates", [{"crash_rate": -0.1}, {"crash_rate": 1.1}, {"lost_commit_rate": 2.0}])
def test_rates_are_validated(rates):
    with pytest.raises(ValueError):
        Chaos(1, **rates)
