"""The aggregation job's stored items against a plain-Python reference, on generated values.

What is run
    ``tests/support/aggregation_properties.py`` for each seed: ``make_case(seed)`` generates
    records over 2 to 4 event hours and 2 or 3 partitions -- integers around and beyond 2^53,
    2^63 and 38 digits, tiny and huge floats, decimal tokens, fields whose type changes between
    objects and hours, nested objects with ISO-8601 timestamps, lists, unicode text and group
    keys beyond 1,024 bytes, value fields named like the envelope's columns or differing only in
    case, values that are no JSON object, and a few that are no JSON -- in one format Spark's
    readers take (JSON Lines gzip or plain, Parquet, CSV); the real archiver archives them into
    moto and flushes them; the job runs with the Arrow reader and with Spark's own readers
    (``--archive-root`` over a ``file://`` copy), and an aggregation naming a shadowed value
    field must be refused. Every item of both tables is compared with the reference: exactly,
    float sums within 1e-12 of their terms' magnitudes. One moto server and one Spark session
    (``local[2]``, both loopback) for the run; a fresh bucket, ledger table and aggregates tables
    per seed.

What it reports
    ``seeds``, ``passed``, ``failed`` (replay one with ``--first <seed> --seeds 1``; ``problems``
    names the first few), the totals of ``records``, ``dead_letters``, ``objects``, ``hours``,
    ``items`` (reference items, each compared in both tables), ``float_sums``, ``hashed_keys``,
    ``native_objects`` (objects Spark's readers read; hours whose text fields hold floats,
    objects or arrays go through the Arrow reader) and ``refusals``, and seconds. A correctness
    run: ``seconds_per_seed`` is for planning. ``--steps`` is the records per case (default 120).
    ``failed_hours`` counts hours the reference says must fail alone (a sum of booleans or objects,
    ``meta.region`` over text, an integer sum beyond int64 or 38 digits): the job must report
    exactly those, leave them dirty and aggregate every other hour of the run.

Prints one JSON document; exits 1 if any seed failed. ``python bench/aggregation_properties.py
--seeds 40``; ``--smoke`` runs two seeds of 40 records (``make test`` does, so the bench cannot
rot).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from seeded import REPO, run_seeds

from tests.support.aggregation_properties import make_case, run_case

SMOKE_RECORDS = 40  # records per case in --smoke (unless --steps says otherwise)


class Runner:
    """Runs one seed; the Spark session starts with the first (after the moto server: its Python
    workers reach moto through the environment they inherit)."""

    def __init__(self) -> None:
        self.spark: Any = None

    def __call__(self, archive: Any, seed: int, *, steps: int) -> Any:
        if self.spark is None:
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
            os.environ["AWS_ENDPOINT_URL"] = archive.endpoint
            from jobs.aggregation.session import local_session

            self.spark = local_session("tidemark-aggregation-properties", shuffle_partitions=4)
        case = make_case(seed, records=steps)
        workdir = Path(archive.staging_root).parent / f"native-{seed}"
        workdir.mkdir(parents=True, exist_ok=True)
        result = run_case(self.spark, archive, case, workdir)
        result.problems = [f"({case.shape}) {problem}" for problem in result.problems]
        return result


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--smoke" in args and not any(arg.startswith("--steps") for arg in args):
        args += ["--steps", str(SMOKE_RECORDS)]
    runner = Runner()
    try:
        return run_seeds(
            "aggregation_properties",
            __doc__.split("\n")[0],
            runner,
            lambda result: result.ok,
            (
                "records",
                "dead_letters",
                "objects",
                "hours",
                "items",
                "float_sums",
                "hashed_keys",
                "native_objects",
                "refusals",
                "failed_hours",
                "absent_fields",
            ),
            args,
            seeds=40,
            steps=120,
        )
    finally:
        if runner.spark is not None:
            runner.spark.stop()


if __name__ == "__main__":
    sys.exit(main())
