"""``requirements/dev.lock``: what ``make install`` installs, by hash, and whether it still
matches ``pyproject.toml``.

``python -m tests.support.dependency_lock finish <new> <lock>`` is the last step of ``make lock``:
it drops pip-compile's entry for the project itself (``tidemark @ file://...``: the project
installs separately, editable, without dependencies) and writes the lock with its header.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "tidemark"
HEADER = """\
# The development environment, locked with hashes: `make install` installs exactly this
# (`pip install --require-hashes -r requirements/dev.lock`), then the project itself without its
# dependencies (`pip install --no-deps -e .`). Regenerate after changing pyproject.toml's
# dependencies with `make lock` (pip-tools' pip-compile, Python 3.11); tests/unit/test_dependency_lock.py
# fails while the two disagree.
"""


@dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: str
    hashes: tuple[str, ...]


def entries(text: str) -> list[str]:
    """The lock's entries: each requirement line joined with its continuation lines."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def pins(text: str) -> dict[str, Pin]:
    found = {}
    for entry in entries(text):
        if entry.startswith("--"):
            raise ValueError(f"the lock holds an option, which pip would take from this machine: {entry}")
        match = re.match(r"([A-Za-z0-9._-]+)==([^\s;]+)", entry)
        if match is None:
            raise ValueError(f"not a pinned requirement: {entry[:80]}")
        name = canonicalize_name(match[1])
        found[name] = Pin(name, match[2], tuple(re.findall(r"--hash=sha256:([0-9a-f]{64})", entry)))
    return found


def project_requirements(pyproject: Path) -> list[Requirement]:
    """Every requirement of the project and its extras, but its references to itself."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    listed = [
        *project["dependencies"],
        *(item for extra in project["optional-dependencies"].values() for item in extra),
    ]
    return [
        requirement
        for requirement in (Requirement(text) for text in listed)
        if canonicalize_name(requirement.name) != PROJECT
    ]


def disagreements(pyproject: Path, lock: Path) -> list[str]:
    """Why the lock does not install what ``pyproject.toml`` asks (empty: it does)."""
    locked = pins(lock.read_text(encoding="utf-8"))
    problems = []
    for requirement in project_requirements(pyproject):
        pin = locked.get(canonicalize_name(requirement.name))
        if pin is None:
            problems.append(f"{requirement}: not in the lock")
        elif not requirement.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{requirement}: the lock pins {pin.version}")
    problems += [f"{pin.name}=={pin.version}: no hash" for pin in locked.values() if not pin.hashes]
    if PROJECT in locked:
        problems.append("the lock pins the project itself")
    return problems


def finish(new: Path, lock: Path) -> None:
    """pip-compile's output ``new`` as the lock: without the project's own entry, with the header."""
    kept = [entry for entry in re.split(r"\n(?=\S)", new.read_text(encoding="utf-8")) if entry.strip()]
    kept = [entry for entry in kept if not entry.startswith("#") and not entry.lower().startswith(f"{PROJECT} @")]
    text = HEADER + "\n".join(entry.rstrip() for entry in kept) + "\n"
    pins(text)  # refuses anything but pinned requirements, before the lock is touched
    lock.write_text(text, encoding="utf-8")
    new.unlink()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "finish":
        sys.exit("usage: python -m tests.support.dependency_lock finish <pip-compile output> <lock>")
    try:
        finish(Path(sys.argv[2]), Path(sys.argv[3]))
    except ValueError as exc:
        sys.exit(f"make lock: {exc}")
