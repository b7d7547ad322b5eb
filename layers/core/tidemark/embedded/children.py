"""Child processes that cannot outlive the process that started them.

Context managers stop the broker and moto on every normal exit, error and interrupt; this covers
the one case they cannot: the parent being killed outright (SIGKILL, OOM killer). On Linux the
kernel then sends the child SIGKILL too (``PR_SET_PDEATHSIG``); elsewhere it is a no-op.
"""

from __future__ import annotations

import ctypes
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
# Looked up once here, in the parent: the child, between fork and exec, only makes the call.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` (``None`` where the kernel has no such option)."""
    return _die_with_parent if _PRCTL is not None else None
