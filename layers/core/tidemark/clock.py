"""Injected clocks: time-based behaviour (max age, grace periods) is testable without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class MonotonicClock:
    """Milliseconds on a clock that never steps back: for timeouts and windows, not timestamps."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start_ms: int = 1_795_248_000_000) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, *, ms: int = 0, seconds: float = 0, minutes: float = 0) -> None:
        self._now += ms + int(seconds * 1000) + int(minutes * 60_000)
