"""Cost of the flush path per record: render, compress, upload, for each codec, in one process.

What is measured
    What ``PartitionWriter._flush_one`` does with a sealed buffer, minus reading its segments:
    the frames (built in memory before timing, so the segment format does not matter here) go
    through ``ContentDigest.wrap`` into ``JsonLinesFormat.write`` and the codec, into the object
    store's hashing spool file, which ``ObjectStore.put`` then uploads with boto3's transfer
    manager (multipart above 8 MiB) to moto, in-process (``mock_aws``), as ``bench/handler.py``
    does. Separately, on the same frames: rendering alone (codec ``none`` into a sink that keeps
    nothing), the content digest alone, and rendering plus compression without the spool file.
    Each figure is the best of ``--runs`` runs.

Codecs
    ``none``, ``gzip-6`` (the former default), ``gzip-1``, ``zstd-1`` (the default), ``zstd-3``
    (the level of buffers staged before the level was configurable) and ``--codecs`` more.

Baseline
    On the same values, in the same run: base64-decode every value, append it to one file and
    fsync once per 1,000 records (``bench/handler.py``'s baseline). ``*_ratio`` figures are a
    cost divided by the baseline's per record.

Frames
    ~200-byte JSON orders (``bench/handler.py``'s generator), keyed ``o-<offset>``, a ``source``
    header on each, event times moving through one hour (+-30 s jitter), record timestamps up
    to 2 s after them. ``--values workload``: the ~145-byte orders of
    ``tests/support/workload.py``'s ``make_orders`` instead (``bench/formats.py``'s; their
    values repeat more, so every codec compresses them further).

Output
    Progress and a table on stderr; the last stdout line is one JSON object: per codec the µs per
    record of ``render`` (shared by every codec), ``compress`` (render+compress minus render),
    ``digest`` (content digest), ``flush`` (the whole ``ObjectStore.put``), ``upload`` (flush
    minus what ran inside the render callback: the transfer manager and moto), the object size
    and its ratio to gzip-6's, and ``flush_ratio`` (flush over the baseline).

Run: ``.venv/bin/python bench/flush.py [--records N --runs R --codecs gzip-6,zstd-1]``;
``--smoke`` (what ``make test`` runs, so the bench cannot rot): 1,000 records, one run, every codec.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other benches, as modules

from formats import CountingSink, log
from handler import order_value

from tidemark.formats import RenderContext, format_for
from tidemark.objects.content import ContentDigest
from tidemark.objects.writer import ObjectStore
from tidemark.staging.frames import RAW, Frame

BUCKET = "tidemark-bench-flush"
SEED = 20_251_121
HOUR_MS = 3_600_000
START_MS = 1_795_244_400_000  # 2026-11-21T07:00:00Z
BASELINE_BATCH = 1_000
DEFAULT_CODECS = ("none", "gzip-6", "gzip-1", "zstd-1", "zstd-3")
#: ``--smoke``: the same measurements on a few records, once each
SMOKE = {"records": 1_000, "runs": 1}


def make_frames(count: int) -> list[Frame]:
    rng = random.Random(SEED)
    frames = []
    for offset in range(count):
        event_ms = START_MS + HOUR_MS * offset // count + rng.randrange(-30_000, 30_000)
        frames.append(
            Frame(
                RAW,
                offset,
                event_ms + rng.randrange(0, 2_000),
                event_ms,
                f"o-{offset}".encode(),
                order_value(rng, event_ms),
                (("source", b"web"),),
            )
        )
    return frames


def workload_frames(count: int) -> list[Frame]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.workload import make_orders

    workload = make_orders(partitions=1, per_partition=count, bad_share=0.0)
    return [
        Frame(RAW, r.offset, r.timestamp_ms, r.timestamp_ms, r.key, r.value, r.headers) for r in workload.all_records()
    ]


def parse_codec(name: str) -> tuple[str, int, int]:
    """``"zstd-1"`` -> ``("zstd", gzip level 6, zstd level 1)``; ``"none"`` -> ``("none", 6, 3)``."""
    codec, _, level = name.partition("-")
    if codec == "gzip":
        return codec, int(level or 6), 3
    if codec == "zstd":
        return codec, 6, int(level or 1)
    if codec == "none" and not level:
        return codec, 6, 3
    raise argparse.ArgumentTypeError(f"not a codec: {name!r} (none, gzip-<1..9>, zstd-<1..22>)")


def best_of(runs: int, action: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - started)
    return best, result


def baseline_seconds(frames: list[Frame], directory: str, runs: int) -> float:
    encoded = [base64.b64encode(frame.value).decode("ascii") for frame in frames]
    decode = base64.b64decode
    path = os.path.join(directory, "baseline.bin")

    def run() -> None:
        with open(path, "wb") as target:
            write = target.write
            for start in range(0, len(encoded), BASELINE_BATCH):
                for value in encoded[start : start + BASELINE_BATCH]:
                    write(decode(value))
                target.flush()
                os.fsync(target.fileno())

    seconds, _ = best_of(runs, run)
    os.unlink(path)
    return seconds


def measure(args: argparse.Namespace, spool: str) -> dict[str, Any]:
    import boto3

    frames = make_frames(args.records) if args.values == "orders" else workload_frames(args.records)
    records = len(frames)
    value_bytes = sum(len(frame.value) for frame in frames)
    log(f"{records:,} frames, {value_bytes / records:.0f} value bytes each")
    context = RenderContext("orders", 0, object_key="raw/orders/bench")
    per_record = 1e6 / records

    baseline = baseline_seconds(frames, spool, args.runs)
    log(f"baseline: {baseline * per_record:.2f} µs/record")

    plain = format_for("jsonl", "none")

    def render_only() -> int:
        sink = CountingSink()
        plain.write(frames, context, cast(BinaryIO, sink))
        return sink.size

    render, lines_bytes = best_of(args.runs, render_only)

    def digest_all() -> str:
        digest = ContentDigest()
        for _ in digest.wrap(frames):
            pass
        return digest.hexdigest()

    digest, _ = best_of(args.runs, digest_all)
    log(f"render {render * per_record:.2f} µs/record, content digest {digest * per_record:.2f} µs/record")

    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    store = ObjectStore(BUCKET, client=s3, spool_dir=spool)
    results: dict[str, dict[str, Any]] = {}
    for name in args.codecs:
        codec, gzip_level, zstd_level = parse_codec(name)
        fmt = format_for("jsonl", codec, gzip_level, zstd_level)

        def render_compress(fmt: Any = fmt) -> int:
            sink = CountingSink()
            fmt.write(frames, context, cast(BinaryIO, sink))
            return sink.size

        compressed, size = best_of(args.runs, render_compress)
        flushes: list[tuple[float, float]] = []
        for run in range(args.runs):
            inside = [0.0]
            content = ContentDigest()

            def rendered(out: BinaryIO, fmt: Any = fmt, content: ContentDigest = content, inside: Any = inside) -> int:
                started = time.perf_counter()
                count: int = fmt.write(content.wrap(frames), context, out)
                inside[0] = time.perf_counter() - started
                return count

            key = f"raw/orders/{name}-{run}.jsonl"
            gc.collect()
            started = time.perf_counter()
            uploaded = store.put(key, rendered, first=0, last=records - 1, content_type="application/x-ndjson")
            flushes.append((time.perf_counter() - started, inside[0]))
            assert uploaded.records == records and uploaded.size == size, (name, uploaded)
            s3.delete_object(Bucket=BUCKET, Key=key)  # moto keeps objects in memory
        flush, flush_inside = min(flushes)
        results[name] = {
            "render_us": round(render * per_record, 3),
            "compress_us": round(max(compressed - render, 0.0) * per_record, 3),
            "render_compress_us": round(compressed * per_record, 3),
            "digest_us": round(digest * per_record, 3),
            "flush_us": round(flush * per_record, 3),
            "flush_render_us": round(flush_inside * per_record, 3),  # digest + render + compress + spool + sha256
            "upload_us": round((flush - flush_inside) * per_record, 3),
            "object_bytes": size,
            "flush_ratio": round(flush / baseline, 2),
            "render_compress_ratio": round(compressed / baseline, 2),
        }
        log(f"{name}: {results[name]}")
    reference = results.get("gzip-6", {}).get("object_bytes")
    for result in results.values():
        result["size_vs_gzip6"] = round(result["object_bytes"] / reference, 3) if reference else None
    return {
        "records": records,
        "values": args.values,
        "value_bytes_per_record": round(value_bytes / records, 1),
        "line_bytes_per_record": round(lines_bytes / records, 1) if lines_bytes else None,
        "baseline_us": round(baseline * per_record, 3),
        "render_us": round(render * per_record, 3),
        "digest_us": round(digest * per_record, 3),
        "runs": args.runs,
        "codecs": results,
    }


def table(report: dict[str, Any]) -> str:
    rows = [
        f"baseline {report['baseline_us']:.2f} µs/record; render {report['render_us']:.2f}; "
        f"digest {report['digest_us']:.2f}",
        f"{'codec':<8} {'compress':>9} {'render+cmp':>10} {'flush':>7} {'upload':>7} {'ratio':>6} {'size':>6}",
    ]
    for name, result in report["codecs"].items():
        rows.append(
            f"{name:<8} {result['compress_us']:>9.2f} {result['render_compress_us']:>10.2f} "
            f"{result['flush_us']:>7.2f} {result['upload_us']:>7.2f} {result['flush_ratio']:>6.2f} "
            f"{result['size_vs_gzip6'] or 0:>6.3f}"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--values", choices=("orders", "workload"), default="orders")
    parser.add_argument(
        "--codecs", type=lambda text: [name for name in text.split(",") if parse_codec(name)], default=DEFAULT_CODECS
    )
    parser.add_argument("--smoke", action="store_true", help="1,000 records, one run (unless given)")
    args = parser.parse_args(argv)
    if args.smoke:  # smaller defaults; options given still win
        parser.set_defaults(**SMOKE)
        args = parser.parse_args(argv)
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SECURITY_TOKEN": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    for name in [name for name in os.environ if name.startswith(("AWS_ENDPOINT_URL", "AWS_PROFILE"))]:
        del os.environ[name]
    from moto import mock_aws

    with tempfile.TemporaryDirectory(prefix="tidemark-bench-flush-") as spool, mock_aws():
        report = measure(args, spool)
    log("\n" + table(report))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
