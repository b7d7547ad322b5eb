"""The audit beside a live, damaged Kafka archive under many seeded schedules.

What is run
    ``tests/support/audit_schedule.run_schedule`` for each seed: archiver writes, sweeps, a
    recreated topic's new epoch, objects and ledger items deleted at random, and audits -- with
    any of those steps run in the middle of an audit's reads -- drawn from ``random.Random(seed)``.
    Every audit must report exactly the damage done: each fault done before it began, nothing that
    was not done, nothing left unchecked; the last one (everything flushed) every fault. One moto
    server (its own, loopback, a free port), a fresh bucket, ledger table and staging directory per seed.

What it reports
    ``seeds``, ``passed`` (how many audits were exact), ``failed`` (the seeds that did not: replay one with
    ``--first <seed> --seeds 1``; ``problems`` names the first few), the totals of ``audits``,
    ``faults`` and ``findings``, and seconds. A correctness run: nothing here is a timing to compare.

Prints one JSON document; exits 1 if any seed failed. ``python bench/audit_interleavings.py
--seeds 300``; ``--smoke`` runs two seeds.
"""

from __future__ import annotations

import sys

from seeded import run_seeds

from tests.support.audit_schedule import run_schedule


def main(argv: list[str] | None = None) -> int:
    return run_seeds(
        "audit_interleavings",
        __doc__.split("\n")[0],
        run_schedule,
        lambda result: result.exact,
        ("audits", "faults", "findings"),
        argv,
        seeds=300,
        steps=40,
    )


if __name__ == "__main__":
    sys.exit(main())
