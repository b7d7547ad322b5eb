"""``tidemark recover`` beside a live Kafka archive under many seeded schedules.

What is run
    ``tests/support/recover_schedule.run_schedule`` for each seed: a fresh topic (1 or 2
    partitions) produced to the embedded broker, a mapping withholding random records of its
    batches (or whole batches) as it delivers them, warm and cold containers dying at crash
    points, flushes, and ``tidemark recover`` runs -- whole, dying at each of its crash points,
    and with another recovery, a delivery or a flush run inside their claim or upload windows
    (and recoveries inside a flush's) -- drawn from ``random.Random(seed)``. Then everything is
    delivered, flushed and recovered, and the archive compared with the plain reference: every
    produced record exactly once (archived, or dead-lettered), every object uploaded once (a
    versioned bucket), the audit against the log clean. One embedded Kafka broker and one moto
    server (their own, loopback, free ports); a fresh topic, bucket, ledger table and staging
    directory per seed.

What it reports
    ``seeds``, ``passed`` (how many held exactly once, and clean), ``failed`` (the seeds that did
    not: replay one with ``--first <seed> --seeds 1``; ``problems`` names the first few), the
    totals of ``withheld`` (records the mapping skipped), ``recovered`` (records recover runs
    archived), ``recoveries``, ``crashes``, ``lost`` and ``duplicated``, and seconds.
    A correctness run: nothing here is a timing to compare; ``seconds_per_seed`` is for planning.

Prints one JSON document; exits 1 if any seed failed. ``python bench/recover_interleavings.py
--seeds 300``; ``--smoke`` runs two seeds (``make test`` does, so the bench cannot rot).
"""

from __future__ import annotations

import sys
from functools import partial

from seeded import run_seeds

from tests.support.recover_schedule import run_schedule
from tidemark.embedded.broker import kafka_broker


def main(argv: list[str] | None = None) -> int:
    with kafka_broker() as bootstrap:
        return run_seeds(
            "recover_interleavings",
            __doc__.split("\n")[0],
            partial(run_schedule, bootstrap=bootstrap),
            lambda result: result.ok,
            ("withheld", "recovered", "recoveries", "crashes", "lost", "duplicated"),
            argv,
            seeds=300,
            steps=40,
        )


if __name__ == "__main__":
    sys.exit(main())
