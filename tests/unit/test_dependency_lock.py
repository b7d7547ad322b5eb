"""Issue 31, part 6: the development environment installs from a lock with hashes, and the lock
agrees with ``pyproject.toml`` (a requirement changed in one and not the other fails here)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cdk import REPO
from tests.support.dependency_lock import disagreements, pins

LOCK = REPO / "requirements" / "dev.lock"


def test_the_lock_pins_every_requirement_of_the_project_by_hash() -> None:
    assert disagreements(REPO / "pyproject.toml", LOCK) == []
    locked = pins(LOCK.read_text(encoding="utf-8"))
    assert {"boto3", "aws-lambda-powertools", "aws-cdk-lib", "pyspark", "moto", "pytest"} <= set(locked)
    assert all(len(pin.hashes) >= 1 for pin in locked.values())


def test_a_requirement_the_lock_does_not_satisfy_is_reported(tmp_path: Path) -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    pyspark = pins(LOCK.read_text(encoding="utf-8"))["pyspark"].version
    changed = tmp_path / "pyproject.toml"
    changed.write_text(
        pyproject.replace('"pyspark>=3.5,<3.6"', '"pyspark>=3.6"').replace(
            '"pika>=1.3,<2"', '"pika>=1.3,<2", "nosuch-package>=1"'
        ),
        encoding="utf-8",
    )
    problems = disagreements(changed, LOCK)
    assert f"pyspark>=3.6: the lock pins {pyspark}" in problems
    assert "nosuch-package>=1: not in the lock" in problems
    assert len(problems) == 2
