"""Chaos for the embedded runner: real process deaths at random crash points, lost commits.

* A share of invocations (``crash_rate``) runs in a fresh child process armed with a random
  crash point of the protocol and a random occurrence (``point:nth``); when the child gets
  there it dies with ``os._exit``, mid-write, with no cleanup. The mapping then retries the
  whole batch in the warm container, whose cached ledger state is now stale.
* A share of successful batches (``lost_commit_rate``) never gets its offsets committed: the
  mapping rejoins the group and receives the batch again, as after a rebalance.
* The end-of-run drain of each partition first runs in a child armed at a flush-side point
  (seal, upload, commit, cleanup; first occurrence), so those points are hit in every chaos run,
  however few size rotations happened; the next drain recovers what the child left.

Every choice comes from one seeded ``random.Random``: a failing run is replayed with its seed.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tidemark.embedded.esm.invokers import ChildInvoker, Invocation, Invoker
from tidemark.faults import (
    AFTER_COMMIT,
    AFTER_SEAL,
    AFTER_UPLOAD,
    ALL_CRASH_POINTS,
    BEFORE_UPLOAD,
    DURING_CLEANUP,
)

FLUSH_POINTS: tuple[str, ...] = (AFTER_SEAL, BEFORE_UPLOAD, AFTER_UPLOAD, AFTER_COMMIT, DURING_CLEANUP)


@dataclass
class ChaosLog:
    armed: int = 0
    crashes: Counter[str] = field(default_factory=Counter)  # crash point -> processes killed there
    not_reached: int = 0  # armed children that finished without reaching their point
    lost_commits: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "armed": self.armed,
            "crashes": sum(self.crashes.values()),
            "crash_points": dict(sorted(self.crashes.items())),
            "not_reached": self.not_reached,
            "lost_commits": self.lost_commits,
        }


class Chaos:
    def __init__(self, seed: int, *, crash_rate: float = 0.1, lost_commit_rate: float = 0.03) -> None:
        for name, rate in (("crash_rate", crash_rate), ("lost_commit_rate", lost_commit_rate)):
            if not 0 <= rate <= 1:
                raise ValueError(f"{name} must be between 0 and 1, got {rate}")
        self.rng = random.Random(seed)
        self.crash_rate = crash_rate
        self.lost_commit_rate = lost_commit_rate
        self.log = ChaosLog()

    def arm(self, points: tuple[str, ...] = ALL_CRASH_POINTS, max_nth: int = 3) -> str:
        """A random ``point:nth`` for ``TIDEMARK_CRASH_AT`` (die the nth time ``point`` is hit)."""
        self.log.armed += 1
        return f"{self.rng.choice(points)}:{self.rng.randint(1, max_nth)}"

    def record(self, crash_at: str, result: Invocation) -> Invocation:
        if result.crashed:
            self.log.crashes[crash_at.split(":", 1)[0]] += 1
        elif result.ok:
            self.log.not_reached += 1
        return result

    def lose_commit(self) -> bool:
        if self.rng.random() < self.lost_commit_rate:
            self.log.lost_commits += 1
            return True
        return False

    def invoker(self, warm: Invoker, cold: ChildInvoker) -> Invoker:
        return ChaosInvoker(self, warm, cold)


class ChaosInvoker:
    """Most invocations go to the warm container; some to a cold one that is set up to die."""

    def __init__(self, chaos: Chaos, warm: Invoker, cold: ChildInvoker) -> None:
        self.chaos = chaos
        self.warm = warm
        self.cold = cold

    def invoke(self, event: dict[str, Any]) -> Invocation:
        if self.chaos.rng.random() >= self.chaos.crash_rate:
            return self.warm.invoke(event)
        crash_at = self.chaos.arm()
        return self.chaos.record(crash_at, self.cold.invoke(event, crash_at=crash_at))
