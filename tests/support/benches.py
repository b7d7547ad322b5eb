"""Running a seeded bench in its smoke mode, as ``make test`` does so that no bench rots."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.support.cdk import REPO


def assert_smoke_passes(script: str) -> dict[str, Any]:
    """Run ``bench/<script> --smoke``; its JSON line must report two seeds, both passed, exit 0."""
    done = subprocess.run(
        [sys.executable, f"bench/{script}", "--smoke"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert (done.returncode, report["seeds"], report["passed"], report["failed"]) == (0, 2, 2, []), done.stderr
    return report
