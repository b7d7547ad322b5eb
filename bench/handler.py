"""Throughput and memory benchmark of the archiver Lambda handler, end to end, in one process.

What is measured
    ``functions/archiver/handler.py::lambda_handler`` invoked once per MSK event source mapping
    batch, exactly as Lambda would call it: Powertools decorators, event parsing, dedupe,
    routing by event time, framing, segment write + fsync on the staging directory, the
    conditional ledger write to DynamoDB, rotation, and every flush that the example config
    (``config/tidemark.yaml``: 100k records / 64 MiB / 15 min) triggers during the run (render
    gzip JSON Lines, upload to S3, ledger commit, segment cleanup). S3 and DynamoDB are moto,
    in-process (``mock_aws``), so their emulation cost is included; real services are network
    round trips instead, so treat the absolute numbers as "CPU cost of the handler on this box",
    not as Lambda latency.

Baseline
    On the same events, in the same run, timed the same way: base64-decode every record value,
    append the bytes to one file and fsync once per batch. That is the floor any durable
    archiver has to pay; ``baseline_ratio = handler_time / baseline_time`` says how far above
    that floor the handler runs.

Events
    ESM-shaped ``aws:kafka`` events (records keyed ``orders-<partition>``, base64 key/value,
    header byte arrays) of ~200-byte JSON orders whose ``created_at`` (epoch ms) moves evenly
    through the two whole hours before the current one (+-30 s jitter; 2% arrive 10-60 min late),
    so the flush pattern does not depend on the time of day. Each batch is built deterministically from
    its index, outside the timed region, just before it is used (the handler pass and the
    baseline pass see identical events; a digest proves it). They are not all kept in memory
    at once so that ``peak_rss_mb`` is the handler's footprint, not the test corpus's.

Memory
    ``peak_rss_mb`` is ``ru_maxrss``; ``rss_mb_after_warmup`` (after the first 10% of batches)
    and ``rss_mb_end`` are current RSS from ``/proc/self/statm`` -- they should be close if
    memory is flat in the number of batches. Both include moto's copy of every committed object
    (~6 MB each here) and whatever the allocator keeps after a flush's transient peak. moto's
    own bookkeeping of every model instance it ever created is dropped after each batch
    (untimed), since it would otherwise keep every version of the ledger item.

Output
    Progress on stderr; the last stdout line is one JSON object. Besides the headline keys it
    carries ``moto_seconds`` (time moto spent serving the handler's requests) and
    ``records_per_s_excl_moto`` / ``baseline_ratio_excl_moto`` (an estimate for an infinitely
    fast AWS), ``ledger_state_item_kb_max`` (sampled size of the partition's ledger item, read
    and rewritten whole by every batch) and a correctness check: records committed (S3
    metadata) + records still buffered (ledger) == records produced. ``--profile`` runs
    cProfile around the handler calls only and prints the top functions and a per-package
    split on stderr (``--profile-out`` keeps the raw pstats file).

Run: ``.venv/bin/python bench/handler.py [--batches N --batch-size M --partitions P]``
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import cProfile
import gc
import hashlib
import importlib.util
import io
import json
import os
import pstats
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tidemark.embedded.lambda_runtime import LocalContext

ROOT = Path(__file__).resolve().parents[1]
HANDLER_PATH = ROOT / "functions" / "archiver" / "handler.py"
CONFIG_PATH = ROOT / "config" / "tidemark.yaml"
BUCKET = "tidemark-bench"
TABLE = "tidemark-bench-ledger"
STREAM = "orders"
TOPIC = "orders"
CLUSTER_ARN = "arn:aws:kafka:us-east-1:123456789012:cluster/tidemark-demo/4f3e2d1c-0b9a-4c8d-9e7f-6a5b4c3d2e1f-1"
BOOTSTRAP = (
    "b-1.tidemark-demo.abc123.c2.kafka.us-east-1.amazonaws.com:9098,"
    "b-2.tidemark-demo.abc123.c2.kafka.us-east-1.amazonaws.com:9098"
)
SEED = 20_251_121
HOUR_MS = 3_600_000
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def current_rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * PAGE_SIZE / MIB


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    batches: int
    batch_size: int
    partitions: int
    start_ms: int  # event time of the first record; the last one is two hours later
    late_fraction: float = 0.02

    @property
    def records(self) -> int:
        return self.batches * self.batch_size


def order_value(rng: random.Random, created_at: int) -> bytes:
    """One ~200-byte JSON order."""
    return (
        f'{{"order_id":"{rng.getrandbits(128):032x}","customer_id":"cust-{rng.randrange(1_000_000):07d}",'
        f'"product_id":"sku-{rng.randrange(5_000):05d}","price":{rng.randrange(100, 100_000) / 100:.2f},'
        f'"quantity":{rng.randrange(1, 10)},"currency":"EUR","channel":"web","status":"placed",'
        f'"created_at":{created_at}}}'
    ).encode()


def build_event(workload: Workload, index: int) -> dict[str, Any]:
    """Batch ``index`` as the MSK ESM delivers it; a pure function of (workload, index)."""
    rng = random.Random(SEED * 1_000_003 + index)
    groups: dict[str, list[dict[str, Any]]] = {}
    per_partition = workload.batch_size // workload.partitions
    extra = workload.batch_size % workload.partitions
    total_span = 2 * HOUR_MS
    for partition in range(workload.partitions):
        count = per_partition + (1 if partition < extra else 0)
        first_offset = index * count  # every batch gives a partition the same number of records
        records: list[dict[str, Any]] = []
        for position in range(count):
            offset = first_offset + position
            global_position = index * workload.batch_size + position * workload.partitions + partition
            event_ms = workload.start_ms + total_span * global_position // max(workload.records, 1)
            event_ms += rng.randrange(-30_000, 30_000)
            if rng.random() < workload.late_fraction:
                event_ms -= rng.randrange(10 * 60_000, HOUR_MS)
            value = order_value(rng, event_ms)
            records.append(
                {
                    "topic": TOPIC,
                    "partition": partition,
                    "offset": offset,
                    "timestamp": event_ms + rng.randrange(0, 2_000),
                    "timestampType": "CREATE_TIME",
                    "key": base64.b64encode(f"o-{offset}".encode()).decode("ascii"),
                    "value": base64.b64encode(value).decode("ascii"),
                    "headers": [{"source": list(b"web")}],
                }
            )
        groups[f"{TOPIC}-{partition}"] = records
    return {
        "eventSource": "aws:kafka",
        "eventSourceArn": CLUSTER_ARN,
        "bootstrapServers": BOOTSTRAP,
        "records": groups,
    }


def event_digest(event: dict[str, Any], digest: Any) -> None:
    for records in event["records"].values():
        for record in records:
            digest.update(record["value"].encode("ascii"))


# -- harness ---------------------------------------------------------------------------------


def set_environment(staging: Path, spool: Path) -> None:
    for name in [name for name in os.environ if name.startswith(("AWS_ENDPOINT_URL", "AWS_PROFILE"))]:
        del os.environ[name]
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SECURITY_TOKEN": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "POWERTOOLS_TRACE_DISABLED": "1",
            "POWERTOOLS_METRICS_NAMESPACE": "TidemarkBench",
            "POWERTOOLS_SERVICE_NAME": "tidemark-archiver",
            "TIDEMARK_BUCKET": BUCKET,
            "TIDEMARK_LEDGER_TABLE": TABLE,
            "TIDEMARK_STAGING_ROOT": str(staging),
            "TIDEMARK_SPOOL_DIR": str(spool),
            "TIDEMARK_CONFIG": str(CONFIG_PATH),
        }
    )


def import_handler(stdout_sink: io.TextIOBase) -> ModuleType:
    """Import the handler file like Lambda does (it is not in a package); Powertools' Logger binds
    to ``sys.stdout`` at import, so importing under the redirect sends its lines to the sink."""
    spec = importlib.util.spec_from_file_location("tidemark_archiver_handler", HANDLER_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with contextlib.redirect_stdout(stdout_sink):
        spec.loader.exec_module(module)
    return module


class MotoTimer:
    """Wall time moto spends serving requests made during handler calls (harness-only wrapper
    around moto's in-process request hook; S3 uploads run in s3transfer threads while the
    handler waits, so their time is counted too). ``handler - moto`` estimates the handler's own
    cost with an infinitely fast AWS -- an estimate, not a real-AWS number (no network here)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.requests = 0
        self.active = False
        self._lock = threading.Lock()

    def install(self) -> None:
        from moto.core.models import botocore_stubber

        original = botocore_stubber.process_request

        def timed(request: Any) -> Any:
            if not self.active:
                return original(request)
            started = time.perf_counter()
            try:
                return original(request)
            finally:
                elapsed = time.perf_counter() - started
                with self._lock:
                    self.seconds += elapsed
                    self.requests += 1

        botocore_stubber.process_request = timed  # type: ignore[method-assign]


@dataclass(slots=True)
class PassResult:
    seconds: float
    batch_seconds: list[float]  # per batch, in order
    value_bytes: int
    digest: str
    rss_mb_after_warmup: float
    rss_mb_end: float


def run_pass(
    workload: Workload,
    call: Callable[[int, dict[str, Any]], None],
    *,
    label: str,
    profiler: cProfile.Profile | None = None,
    between: Callable[[int], None] | None = None,
) -> PassResult:
    """Build each batch (untimed), then time ``call`` on it; the sum of the calls is the pass time.
    ``between`` runs untimed after every batch (harness housekeeping)."""
    elapsed = 0.0
    batch_seconds: list[float] = []
    value_bytes = 0
    digest = hashlib.sha256()
    warmup = max(workload.batches // 10, 1)
    rss_after_warmup = 0.0
    report_every = max(workload.batches // 10, 1)
    for index in range(workload.batches):
        event = build_event(workload, index)
        event_digest(event, digest)
        value_bytes += sum(
            len(base64.b64decode(record["value"])) for records in event["records"].values() for record in records
        )
        if profiler is not None:
            profiler.enable()
        started = time.perf_counter()
        call(index, event)
        took = time.perf_counter() - started
        elapsed += took
        batch_seconds.append(took)
        if profiler is not None:
            profiler.disable()
        del event
        if between is not None:
            between(index)
        if index + 1 == warmup:
            rss_after_warmup = current_rss_mb()
        if (index + 1) % report_every == 0 or index + 1 == workload.batches:
            done = (index + 1) * workload.batch_size
            log(
                f"{label}: {index + 1}/{workload.batches} batches, {done / elapsed:,.0f} records/s, "
                f"rss {current_rss_mb():.1f} MiB"
            )
    return PassResult(elapsed, batch_seconds, value_bytes, digest.hexdigest(), rss_after_warmup, current_rss_mb())


def baseline_call(target: io.BufferedWriter) -> Callable[[int, dict[str, Any]], None]:
    decode = base64.b64decode

    def call(_index: int, event: dict[str, Any]) -> None:
        write = target.write
        for records in event["records"].values():
            for record in records:
                write(decode(record["value"]))
        target.flush()
        os.fsync(target.fileno())

    return call


def handler_call(
    module: ModuleType, sink: io.TextIOBase, moto_timer: MotoTimer, flushing_batches: set[int]
) -> Callable[[int, dict[str, Any]], None]:
    """Invoke the handler; note which batches also flushed (committed objects)."""
    lambda_handler = module.lambda_handler

    def call(index: int, event: dict[str, Any]) -> None:
        moto_timer.active = True
        try:
            with contextlib.redirect_stdout(sink):  # EMF documents are print()ed
                response = lambda_handler(event, LocalContext(aws_request_id=f"00000000-0000-4000-8000-{index:012d}"))
        finally:
            moto_timer.active = False
        if response.get("status") != "ok":
            raise AssertionError(f"batch {index}: handler returned {response!r}")
        summary = response["streams"][STREAM]
        if summary["flush_errors"] or summary["dead_lettered"] or summary["duplicates"]:
            raise AssertionError(f"batch {index}: unexpected outcome {summary!r}")
        if summary["objects_committed"]:
            flushing_batches.add(index)

    return call


def moto_housekeeping(workload: Workload, dynamodb: Any, item_kb: list[float]) -> Callable[[int], None]:
    """Untimed, after every handler batch.

    moto keeps every model instance it ever created (``instances_tracked``, for its dashboard),
    so each version of the ledger's STATE item would stay in memory: that is moto's memory, not
    the handler's, and it would make ``rss_mb_end`` meaningless. Drop it after every batch.
    Every 10% of batches, also sample the size of the partition's STATE item (the JSON wire size
    of its attributes): every batch reads and rewrites it whole.
    """
    from moto.core.model_instances import reset_model_data

    every = max(workload.batches // 10, 1)

    def between(index: int) -> None:
        reset_model_data()
        if (index + 1) % every == 0 or index + 1 == workload.batches:
            for partition in range(workload.partitions):
                item = dynamodb.get_item(
                    TableName=TABLE, Key={"pk": {"S": f"PART#{STREAM}#{partition}"}, "sk": {"S": "STATE"}}
                ).get("Item", {})
                wire = json.dumps(item, separators=(",", ":"), default=lambda raw: "b" * len(raw))
                item_kb.append(len(wire) / 1024)

    return between


def iter_objects(s3: Any) -> Iterator[dict[str, Any]]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        yield from page.get("Contents", ())


def account(module: ModuleType, s3: Any, workload: Workload) -> dict[str, int]:
    """Committed (S3 metadata) + still buffered (ledger) must equal what was produced."""
    objects = 0
    committed = 0
    for item in iter_objects(s3):
        objects += 1
        committed += int(s3.head_object(Bucket=BUCKET, Key=item["Key"])["Metadata"]["tidemark-records"])
    ledger = module.ARCHIVER.runtime.ledger
    buffered = 0
    sealed = 0
    for partition in range(workload.partitions):
        state = ledger.load(STREAM, partition)
        buffered += sum(buffer.records for buffer in state.buffers.values())
        sealed += len(state.sealed)
    if committed + buffered != workload.records or sealed:
        raise AssertionError(
            f"accounting: committed {committed} + buffered {buffered} != produced {workload.records} "
            f"(sealed left: {sealed})"
        )
    return {"objects_committed": objects, "records_committed": committed, "records_buffered": buffered}


def package_of(filename: str) -> str:
    for marker, name in (
        ("/tidemark/", "tidemark"),
        ("/functions/", "handler"),
        ("/moto/", "moto"),
        ("/botocore/", "botocore"),
        ("/boto3/", "boto3"),
        ("/s3transfer/", "s3transfer"),
        ("/aws_lambda_powertools/", "powertools"),
        ("/pydantic", "pydantic"),
        ("/werkzeug/", "werkzeug"),
        ("/jinja2/", "jinja2"),
        ("/responses/", "responses"),
        ("/xmltodict", "xmltodict"),
        ("/dateutil/", "dateutil"),
    ):
        if marker in filename:
            return name
    if filename.startswith("~") or filename == "<built-in>":
        return "builtins (C)"
    return "stdlib/other"


def print_profile(profiler: cProfile.Profile, top: int) -> None:
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    print(stream.getvalue(), file=sys.stderr)
    by_package: dict[str, float] = {}
    total = 0.0
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        by_package[package_of(filename)] = by_package.get(package_of(filename), 0.0) + tottime
        total += tottime
    log("self time by package (profiled handler calls only):")
    for name, seconds in sorted(by_package.items(), key=lambda item: -item[1]):
        log(f"  {name:<14} {seconds:8.3f} s  {100 * seconds / total:5.1f}%")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--batches", type=int, default=250, help="ESM batches to deliver (default 250)")
    parser.add_argument("--batch-size", type=int, default=1000, help="records per batch (default 1000)")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per batch (default 1)")
    parser.add_argument("--profile", action="store_true", help="cProfile the handler calls (slower)")
    parser.add_argument("--profile-top", type=int, default=25, help="functions to list with --profile")
    parser.add_argument("--profile-out", help="with --profile: also dump the raw pstats file here")
    args = parser.parse_args(argv)
    if args.batches < 1 or args.batch_size < 1 or not 1 <= args.partitions <= args.batch_size:
        parser.error("need batches >= 1, batch-size >= 1 and 1 <= partitions <= batch-size")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    staging, spool, baseline_dir = scratch / "staging", scratch / "spool", scratch / "baseline"
    for directory in (staging, spool, baseline_dir):
        directory.mkdir()
    set_environment(staging, spool)
    # Event time runs through the two whole hours before the current one, so the flush pattern
    # (which hour buffer reaches 100k records when) does not depend on the time of day.
    this_hour_ms = int(time.time() * 1000) // HOUR_MS * HOUR_MS
    workload = Workload(args.batches, args.batch_size, args.partitions, start_ms=this_hour_ms - 2 * HOUR_MS)

    import boto3
    from moto import mock_aws

    from tidemark.ledger.dynamodb import ledger_table_schema

    sink = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 -- lives for the whole run
    try:
        with mock_aws():
            s3 = boto3.client("s3", region_name="us-east-1")
            s3.create_bucket(Bucket=BUCKET)
            dynamodb = boto3.client("dynamodb", region_name="us-east-1")
            dynamodb.create_table(**ledger_table_schema(TABLE))
            module = import_handler(sink)
            moto_timer = MotoTimer()
            moto_timer.install()
            log(
                f"{workload.batches} batches x {workload.batch_size} records over {workload.partitions} "
                f"partition(s) = {workload.records:,} records; staging {staging}"
            )
            profiler = cProfile.Profile() if args.profile else None
            gc.collect()
            rss_start = current_rss_mb()
            item_kb: list[float] = []
            flushing: set[int] = set()
            handler = run_pass(
                workload,
                handler_call(module, sink, moto_timer, flushing),
                label="handler",
                profiler=profiler,
                between=moto_housekeeping(workload, dynamodb, item_kb),
            )
            accounting = account(module, s3, workload)
            log(
                f"accounting ok: {accounting['objects_committed']} objects with "
                f"{accounting['records_committed']:,} records committed, {accounting['records_buffered']:,} buffered"
            )
        with open(baseline_dir / "values.bin", "ab") as target:
            baseline = run_pass(workload, baseline_call(target), label="baseline")
        if baseline.digest != handler.digest:
            raise AssertionError("the baseline pass did not see the same events as the handler pass")
    finally:
        sink.close()
        shutil.rmtree(scratch, ignore_errors=True)

    if profiler is not None:
        print_profile(profiler, args.profile_top)
        if args.profile_out:
            profiler.dump_stats(args.profile_out)
            log(f"raw profile written to {args.profile_out} (python -m pstats {args.profile_out})")
    # The staging path alone: the batches that flushed nothing, against the baseline's time for
    # the very same batches.
    staging_batches = [i for i in range(workload.batches) if i not in flushing]
    staging_seconds = sum(handler.batch_seconds[i] for i in staging_batches)
    staging_baseline = sum(baseline.batch_seconds[i] for i in staging_batches)
    staging_records = len(staging_batches) * workload.batch_size
    flush_seconds = sum(handler.batch_seconds[i] for i in flushing) - sum(
        staging_seconds / max(len(staging_batches), 1) for _ in flushing
    )
    result = {
        "records_per_s": round(workload.records / handler.seconds, 1),
        "mb_per_s": round(handler.value_bytes / 1e6 / handler.seconds, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "baseline_ratio": round(handler.seconds / baseline.seconds, 2),
        "records": workload.records,
        "batches": workload.batches,
        "batch_size": workload.batch_size,
        "partitions": workload.partitions,
        "value_mb": round(handler.value_bytes / 1e6, 2),
        "handler_seconds": round(handler.seconds, 3),
        "baseline_seconds": round(baseline.seconds, 3),
        "baseline_records_per_s": round(workload.records / baseline.seconds, 1),
        "moto_seconds": round(moto_timer.seconds, 3),
        "moto_requests": moto_timer.requests,
        "records_per_s_excl_moto": round(workload.records / max(handler.seconds - moto_timer.seconds, 1e-9), 1),
        "baseline_ratio_excl_moto": round((handler.seconds - moto_timer.seconds) / baseline.seconds, 2),
        "objects_committed": accounting["objects_committed"],
        "records_committed": accounting["records_committed"],
        "records_buffered": accounting["records_buffered"],
        "rss_mb_start": round(rss_start, 1),
        "rss_mb_after_warmup": round(handler.rss_mb_after_warmup, 1),
        "rss_mb_end": round(handler.rss_mb_end, 1),
        "ledger_state_item_kb_max": round(max(item_kb, default=0.0), 1),
        "profiled": bool(args.profile),
        "staging_records_per_s": round(staging_records / max(staging_seconds, 1e-9), 1),
        "staging_baseline_ratio": round(staging_seconds / max(staging_baseline, 1e-9), 2),
        "flushing_batches": len(flushing),
        "flush_records_per_s": round(accounting["records_committed"] / flush_seconds, 1) if flushing else None,
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
