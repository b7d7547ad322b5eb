"""What the seeded-schedule benches share: their options, one moto server and a fresh archive per
seed, the totals, and the JSON line they print (``queue_interleavings``, ``audit_interleavings``).

A schedule runner takes ``(archive, seed, steps=...)`` and returns a result with the attributes
named in ``totals`` and a ``passed`` verdict (plus, optionally, ``problems``: lines to show).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "layers" / "core"), str(REPO)]

from tests.conftest import make_archive  # noqa: E402
from tidemark.embedded.moto_server import moto_server  # noqa: E402


def run_seeds(
    name: str,
    description: str,
    run: Callable[..., Any],
    passed: Callable[[Any], bool],
    totals: Sequence[str],
    argv: list[str] | None,
    *,
    seeds: int,
    steps: int,
) -> int:
    """Parse the options, run every seed, print one JSON document; 1 if any seed failed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, default=seeds, help=f"how many schedules (default {seeds})")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--steps", type=int, default=steps, help=f"steps per schedule (default {steps})")
    parser.add_argument("--smoke", action="store_true", help="two seeds: proves the bench runs")
    args = parser.parse_args(argv)
    chosen = range(args.first, args.first + (2 if args.smoke else args.seeds))
    started = time.perf_counter()
    summed = dict.fromkeys(totals, 0)
    failed: list[int] = []
    problems: list[str] = []
    with moto_server() as endpoint, tempfile.TemporaryDirectory(prefix=f"tidemark-{name}-") as root:
        for seed in chosen:
            result = run(make_archive(endpoint, Path(root) / str(seed)), seed, steps=args.steps)
            for total in summed:
                summed[total] += getattr(result, total)
            if not passed(result):
                failed.append(seed)
                problems.extend(f"seed {seed}: {problem}" for problem in getattr(result, "problems", [])[:3])
    seconds = time.perf_counter() - started
    report = {
        "bench": name,
        "seeds": len(chosen),
        "first_seed": args.first,
        "steps": args.steps,
        "passed": len(chosen) - len(failed),
        "failed": failed,
        "problems": problems[:10],
        **summed,
        "seconds": round(seconds, 1),
        "seconds_per_seed": round(seconds / len(chosen), 2),
    }
    print(json.dumps(report))
    return 1 if failed else 0
