"""Named crash points of the exactly-once protocol (DESIGN.md lists what each one proves).

Production code calls :meth:`CrashPoints.hit` at every point where a process could die. The
default does nothing; the fault-injection suite passes an injector that raises (in-process) or
calls ``os._exit`` (in a subprocess) at a chosen point.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Protocol

from tidemark.exceptions import ConfigError

BEFORE_SEGMENT_WRITE = "before_segment_write"
DURING_SEGMENT_WRITE = "during_segment_write"  # half the segment's bytes are written, no fsync
AFTER_SEGMENT_WRITE = "after_segment_write"  # segment fsync'd, ledger has not accepted it
AFTER_ACCEPT = "after_accept"
AFTER_SEAL = "after_seal"
BEFORE_UPLOAD = "before_upload"  # object rendered to the spool file, nothing sent
AFTER_UPLOAD = "after_upload"  # object in S3, ledger commit not written
AFTER_COMMIT = "after_commit"  # committed, staging segments not yet deleted
DURING_CLEANUP = "during_cleanup"  # some of a committed flush's segments deleted

# ``tidemark recover`` (its upload passes BEFORE_UPLOAD and AFTER_UPLOAD too)
AFTER_RECOVERY_CLAIM = "after_recovery_claim"  # a unit claimed in the ledger, nothing uploaded
AFTER_RECOVERY_COMMIT = "after_recovery_commit"  # the unit's objects recorded, the report not yet given

ENV_CRASH_AT = "TIDEMARK_CRASH_AT"
CRASH_EXIT_CODE = 137  # what a SIGKILL'd process reports; chaos runs read it as "died at the point"

ALL_CRASH_POINTS: tuple[str, ...] = (
    BEFORE_SEGMENT_WRITE,
    DURING_SEGMENT_WRITE,
    AFTER_SEGMENT_WRITE,
    AFTER_ACCEPT,
    AFTER_SEAL,
    BEFORE_UPLOAD,
    AFTER_UPLOAD,
    AFTER_COMMIT,
    DURING_CLEANUP,
)

#: where ``tidemark recover`` can die, in the order one unit passes them
RECOVERY_CRASH_POINTS: tuple[str, ...] = (AFTER_RECOVERY_CLAIM, BEFORE_UPLOAD, AFTER_UPLOAD, AFTER_RECOVERY_COMMIT)


class CrashPoints(Protocol):
    def hit(self, point: str) -> None: ...


class NoCrashes:
    def hit(self, point: str) -> None:
        return None


class SimulatedCrash(BaseException):
    """Raised by in-process injectors. A ``BaseException`` so no ``except Exception`` swallows it,
    exactly as nothing can catch a real process death."""


class CrashAt:
    """Crash at the ``nth`` time ``point`` is hit (in-process by default, or with ``os._exit``)."""

    def __init__(self, point: str, nth: int = 1, *, hard_exit: bool = False) -> None:
        if point not in ALL_CRASH_POINTS:
            raise ValueError(f"unknown crash point {point!r}; known: {', '.join(ALL_CRASH_POINTS)}")
        self.point = point
        self.nth = nth
        self.hard_exit = hard_exit
        self.hits = 0
        self.fired = False
        self._lock = threading.Lock()  # the partitions of one event hit points from several threads

    def hit(self, point: str) -> None:
        if point != self.point:
            return
        with self._lock:
            if self.fired:
                return
            self.hits += 1
            if self.hits < self.nth:
                return
            self.fired = True
        if self.hard_exit:
            os._exit(CRASH_EXIT_CODE)
        raise SimulatedCrash(point)


def crash_points_from_env(environ: Mapping[str, str] | None = None) -> CrashPoints:
    """``TIDEMARK_CRASH_AT=point[:nth]`` makes a process die for real at that point (chaos runs)."""
    spec = (os.environ if environ is None else environ).get(ENV_CRASH_AT, "")
    if not spec:
        return NoCrashes()
    point, _, nth = spec.partition(":")
    try:
        return CrashAt(point, int(nth or 1), hard_exit=True)
    except ValueError as exc:
        raise ConfigError(f"{ENV_CRASH_AT}={spec!r}: {exc}") from None
