"""Render throughput of every object format, on the same frames, in one process.

What is measured
    ``ObjectFormat.write`` of each format (with its default codec, plus JSON Lines + zstd and
    Parquet + zstd, and Parquet with a declared value schema) over the same list of staged
    frames, into a write-only sink that only counts bytes (what the object store's spool file
    wrapper looks like to a format). Frames are built before timing; decoding segments, hashing
    and uploading are not included. Each case is the best of ``--runs`` runs.

Baseline
    JSON Lines + gzip, the default format, measured in the same run: ``ratio_vs_jsonl_gzip`` is
    a case's records/s over the baseline's (above 1.0: renders faster than the default).

Frames
    ``tests/support/workload.py``'s ``make_orders`` (one partition, no malformed records):
    ~180-byte JSON orders keyed ``o-<partition>-<offset>``, a ``source`` header on every third
    record. The typed Parquet case declares the orders' fields (``created_at`` rendered as a
    string in its values, since the workload mixes epoch numbers and ISO strings there).

Output
    Progress on stderr; the last stdout line is one JSON object.

Run: ``.venv/bin/python bench/formats.py [--records N --runs R]``; ``--smoke`` (what ``make test``
runs, so the bench cannot rot): 500 records, best of 2.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.workload import make_orders  # noqa: E402
from tidemark.formats import ObjectFormat, RenderContext, format_for  # noqa: E402
from tidemark.formats.base import ValueColumn  # noqa: E402
from tidemark.staging.frames import RAW, Frame  # noqa: E402

CASES: list[tuple[str, str, str, bool]] = [  # name, format, codec, typed value columns
    ("jsonl+gzip", "jsonl", "gzip", False),
    ("jsonl+zstd", "jsonl", "zstd", False),
    ("parquet+snappy", "parquet", "snappy", False),
    ("parquet+zstd", "parquet", "zstd", False),
    ("parquet+snappy typed", "parquet", "snappy", True),
    ("avro+deflate", "avro", "deflate", False),
    ("csv+gzip", "csv", "gzip", False),
    ("text+gzip", "text", "gzip", False),
    ("bytes+gzip", "bytes", "gzip", False),
]
#: ``--smoke``: the same cases on a few records (best of 2: a format's first call warms it up)
SMOKE = {"records": 500, "runs": 2}
VALUE_SCHEMA = (
    ValueColumn("order_id", "string", False),
    ValueColumn("customer_id", "string", False),
    ValueColumn("product_id", "string", False),
    ValueColumn("price", "double", False),
    ValueColumn("quantity", "long", False),
    ValueColumn("created_at", "string", False),
    ValueColumn("country", "string", False),
)


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


class CountingSink:
    """Write-only output that keeps nothing: what a format sees of the spool file wrapper."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        self.size += size
        return size

    def flush(self) -> None:
        pass


def build_frames(records: int) -> tuple[list[Frame], list[Frame]]:
    workload = make_orders(partitions=1, per_partition=records, bad_share=0.0)
    frames = [
        Frame(RAW, r.offset, r.timestamp_ms, r.timestamp_ms, r.key, r.value, r.headers) for r in workload.all_records()
    ]
    typed = []
    for frame in frames:
        value = orjson.loads(frame.value)
        value["created_at"] = str(value["created_at"])
        typed.append(frame._replace(value=orjson.dumps(value)))
    return frames, typed


def best_of(fmt: ObjectFormat, frames: list[Frame], context: RenderContext, runs: int) -> tuple[float, int]:
    best, size = float("inf"), 0
    for _ in range(runs):
        gc.collect()
        sink = CountingSink()
        started = time.perf_counter()
        count = fmt.write(iter(frames), context, sink)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - started
        assert count == len(frames)
        best, size = min(best, elapsed), sink.size
    return best, size


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="500 records, best of 2 (unless given)")
    args = parser.parse_args(argv)
    if args.smoke:  # smaller defaults; options given still win
        parser.set_defaults(**SMOKE)
        args = parser.parse_args(argv)

    frames, typed = build_frames(args.records)
    value_bytes = sum(len(frame.value) for frame in frames) / len(frames)
    log(f"{len(frames)} frames, {value_bytes:.0f} B values on average, best of {args.runs}")
    results: dict[str, dict[str, Any]] = {}
    for name, type_, codec, with_schema in CASES:
        context = RenderContext("orders", 0, value_schema=VALUE_SCHEMA if with_schema else (), object_key=f"{name}.obj")
        seconds, size = best_of(format_for(type_, codec), typed if with_schema else frames, context, args.runs)
        results[name] = {
            "format": type_,
            "compression": codec,
            "records_per_s": round(len(frames) / seconds),
            "seconds": round(seconds, 4),
            "object_bytes": size,
        }
        log(f"{name:22s} {len(frames) / seconds:>12,.0f} records/s  {size:>12,} bytes")
    baseline = results["jsonl+gzip"]["records_per_s"]
    for result in results.values():
        result["ratio_vs_jsonl_gzip"] = round(result["records_per_s"] / baseline, 2)

    import fastavro
    import pyarrow

    print(
        json.dumps(
            {
                "records": len(frames),
                "value_bytes_avg": round(value_bytes, 1),
                "runs": args.runs,
                "python": sys.version.split()[0],
                "pyarrow": pyarrow.__version__,
                "fastavro": fastavro.__version__,
                "cases": results,
            }
        )
    )


if __name__ == "__main__":
    main()
