"""Exactly once for a RabbitMQ stream under many seeded schedules.

What is run
    ``tests/support/queue_schedule.run_schedule`` for each seed: warm and cold containers, sweeps,
    crashes at every crash point, invocations inside invocations, sweeps that adopt a dead
    archiver's accept, and time passing, drawn from ``random.Random(seed)``; then every published
    id is checked in S3 (archived or dead-lettered exactly once). One moto server (its own,
    loopback, a free port), a fresh bucket, ledger table and staging directory per seed.

What it reports
    ``seeds``, ``exactly_once`` (how many held), ``failed`` (the seeds that did not: replay one with
    ``--first <seed> --seeds 1``), the totals of ``lost``, ``duplicated``, ``crashes`` and
    ``refused`` (invocations failed for a conflict, the broker redelivered them), and seconds.
    A correctness run: nothing here is a timing to compare; ``seconds_per_seed`` is for planning.

Prints one JSON document; exits 1 if any seed failed. ``python bench/queue_interleavings.py
--seeds 200``; ``--smoke`` runs two seeds (``make test`` does, so the bench cannot rot).
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
from tests.support.queue_schedule import run_schedule  # noqa: E402
from tidemark.embedded.moto_server import moto_server  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="how many schedules (default 200)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--steps", type=int, default=14, help="steps per schedule (default 14)")
    parser.add_argument("--smoke", action="store_true", help="two seeds: proves the bench runs")
    args = parser.parse_args(argv)
    seeds = range(args.first, args.first + (2 if args.smoke else args.seeds))
    started = time.perf_counter()
    totals = {"lost": 0, "duplicated": 0, "crashes": 0, "refused": 0}
    failed: list[int] = []
    with moto_server() as endpoint, tempfile.TemporaryDirectory(prefix="tidemark-queue-bench-") as root:
        for seed in seeds:
            result = run_schedule(make_archive(endpoint, Path(root) / str(seed)), seed, steps=args.steps)
            for name in totals:
                totals[name] += getattr(result, name)
            if not result.exactly_once:
                failed.append(seed)
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "bench": "queue_interleavings",
                "seeds": len(seeds),
                "first_seed": args.first,
                "steps": args.steps,
                "exactly_once": len(seeds) - len(failed),
                "failed": failed,
                **totals,
                "seconds": round(seconds, 1),
                "seconds_per_seed": round(seconds / len(seeds), 2),
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
