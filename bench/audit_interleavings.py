"""The audit beside a live, damaged Kafka archive under many seeded schedules.

What is run
    ``tests/support/audit_schedule.run_schedule`` for each seed: archiver writes, sweeps, a
    recreated topic's new epoch, objects and ledger items deleted at random, and audits -- with
    any of those steps run in the middle of an audit's reads -- drawn from ``random.Random(seed)``.
    Every audit must report exactly the damage done: each fault done before it began, nothing that
    was not done, nothing left unchecked; the last one (everything flushed) every fault. One moto
    server (its own, loopback, a free port), a fresh bucket, ledger table and staging directory per seed.

What it reports
    ``seeds``, ``exact`` (how many held), ``failed`` (the seeds that did not: replay one with
    ``--first <seed> --seeds 1``; ``problems`` names the first few), the totals of ``audits``,
    ``faults`` and ``findings``, and seconds. A correctness run: nothing here is a timing to compare.

Prints one JSON document; exits 1 if any seed failed. ``python bench/audit_interleavings.py
--seeds 300``; ``--smoke`` runs two seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "layers" / "core"), str(REPO)]

from tests.conftest import make_archive  # noqa: E402
from tests.support.audit_schedule import run_schedule  # noqa: E402
from tidemark.embedded.moto_server import moto_server  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=300, help="how many schedules (default 300)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--steps", type=int, default=40, help="steps per schedule (default 40)")
    parser.add_argument("--smoke", action="store_true", help="two seeds: proves the bench runs")
    args = parser.parse_args(argv)
    seeds = range(args.first, args.first + (2 if args.smoke else args.seeds))
    started = time.perf_counter()
    totals = {"audits": 0, "faults": 0, "findings": 0}
    failed: list[int] = []
    problems: list[str] = []
    with moto_server() as endpoint, tempfile.TemporaryDirectory(prefix="tidemark-audit-bench-") as root:
        for seed in seeds:
            result = run_schedule(make_archive(endpoint, Path(root) / str(seed)), seed, steps=args.steps)
            for name in totals:
                totals[name] += getattr(result, name)
            if not result.exact:
                failed.append(seed)
                problems.extend(f"seed {seed}: {problem}" for problem in result.problems[:3])
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "bench": "audit_interleavings",
                "seeds": len(seeds),
                "first_seed": args.first,
                "steps": args.steps,
                "exact": len(seeds) - len(failed),
                "failed": failed,
                "problems": problems[:10],
                **totals,
                "seconds": round(seconds, 1),
                "seconds_per_seed": round(seconds / len(seeds), 2),
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
