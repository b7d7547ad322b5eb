"""``tidemark replay`` beside a live Kafka archive, killed and rerun, under many seeded schedules.

What is run
    ``tests/support/replay_schedule.run_schedule`` for each seed: archiver deliveries (cold
    containers dying at crash points too), sweeps and drains -- also at the replay plan's ledger
    reads -- and the same replay command (``same`` or ``key``, every hour or a window of them)
    killed at a plan read, a tail read or a record it produced, then run again, drawn from
    ``random.Random(seed)``. Every run that completes must leave each record it planned once in
    the target topic; the last one (everything flushed) every record of the command's hours,
    exactly once, nothing else -- read back with a consumer. One moto server and one embedded
    Kafka-protocol broker (their own, loopback, free ports), a fresh bucket, ledger table, staging
    directory and target topic per seed.

What it reports
    ``seeds``, ``passed`` (how many ended exactly once), ``failed`` (the seeds that did not: replay
    one with ``--first <seed> --seeds 1``; ``problems`` names the first few), the totals of
    ``replays`` (runs started), ``interruptions`` (runs killed), ``refused`` (runs refused: hours
    still staged), ``later_objects`` (objects committed while a run planned, left to a rerun) and
    ``records`` (what the targets hold at the end), and seconds. A correctness run: nothing here is
    a timing to compare; ``seconds_per_seed`` is for planning.

Prints one JSON document; exits 1 if any seed failed. ``python bench/replay_interleavings.py
--seeds 200``; ``--smoke`` runs two seeds (``make test`` does, so the bench cannot rot).
"""

from __future__ import annotations

import sys
from typing import Any

from seeded import run_seeds

from tests.support.replay_schedule import ScheduleResult, run_schedule
from tidemark.embedded.broker import kafka_broker


def main(argv: list[str] | None = None) -> int:
    with kafka_broker() as bootstrap:

        def run(archive: Any, seed: int, *, steps: int) -> ScheduleResult:
            return run_schedule(archive, bootstrap, seed, steps=steps)

        return run_seeds(
            "replay_interleavings",
            __doc__.split("\n")[0],
            run,
            lambda result: result.exact,
            ("replays", "interruptions", "refused", "later_objects", "records"),
            argv,
            seeds=200,
            steps=24,
        )


if __name__ == "__main__":
    sys.exit(main())
