"""Which processes the embedded runner starts (broker, moto, chaos children) are running, read
from /proc."""

from __future__ import annotations

from pathlib import Path

MARKERS = (b"tansu", b"tidemark.embedded.moto_server", b"tidemark.embedded.esm.child")
CHILD = b"tidemark.embedded.esm.child"


def service_processes() -> set[tuple[int, bytes]]:
    found: set[tuple[int, bytes]] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if any(marker in cmdline for marker in MARKERS):
            found.add((int(entry.name), cmdline))
    return found
