"""Which processes the embedded runner starts (broker, moto, chaos children) are running, read
from /proc.

Under pytest-xdist, only those of this worker count: they inherit its ``PYTEST_XDIST_WORKER``
(also once orphaned, which is what the tests look for), while another worker's demo or moto
server comes and goes on its own schedule.
"""

from __future__ import annotations

import os
from pathlib import Path

MARKERS = (b"tansu", b"tidemark.embedded.moto_server", b"tidemark.embedded.esm.child")
CHILD = b"tidemark.embedded.esm.child"


def _worker_mark() -> bytes | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return None if worker is None else f"PYTEST_XDIST_WORKER={worker}".encode()


def _of_this_worker(process: Path, mark: bytes | None) -> bool:
    if mark is None:
        return True
    try:
        return mark in (process / "environ").read_bytes().split(b"\0")
    except OSError:  # gone meanwhile
        return False


def service_processes() -> set[tuple[int, bytes]]:
    found: set[tuple[int, bytes]] = set()
    mark = _worker_mark()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if any(marker in cmdline for marker in MARKERS) and _of_this_worker(entry, mark):
            found.add((int(entry.name), cmdline))
    return found
