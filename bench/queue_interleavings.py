"""Exactly once for a RabbitMQ stream under many seeded schedules.

What is run
    ``tests/support/queue_schedule.run_schedule`` for each seed: warm and cold containers, sweeps,
    crashes at every crash point, invocations inside invocations, sweeps that adopt a dead
    archiver's accept, and time passing, drawn from ``random.Random(seed)``; then every published
    id is checked in S3 (archived or dead-lettered exactly once). One moto server (its own,
    loopback, a free port), a fresh bucket, ledger table and staging directory per seed.

What it reports
    ``seeds``, ``passed`` (how many held exactly once), ``failed`` (the seeds that did not: replay one with
    ``--first <seed> --seeds 1``), the totals of ``lost``, ``duplicated``, ``crashes`` and
    ``refused`` (invocations failed for a conflict, the broker redelivered them), and seconds.
    A correctness run: nothing here is a timing to compare; ``seconds_per_seed`` is for planning.

Prints one JSON document; exits 1 if any seed failed. ``python bench/queue_interleavings.py
--seeds 200``; ``--smoke`` runs two seeds (``make test`` does, so the bench cannot rot).
"""

from __future__ import annotations

import sys

from seeded import run_seeds

from tests.support.queue_schedule import run_schedule


def main(argv: list[str] | None = None) -> int:
    return run_seeds(
        "queue_interleavings",
        __doc__.split("\n")[0],
        run_schedule,
        lambda result: result.exactly_once,
        ("lost", "duplicated", "crashes", "refused"),
        argv,
        seeds=200,
        steps=14,
    )


if __name__ == "__main__":
    sys.exit(main())
