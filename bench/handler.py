"""Throughput, memory and cold-start benchmark of the archiver Lambda handler, end to end, in one process.

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

Workloads
    ``--partitions`` is a list (default ``1,10``): one workload per entry, measured one after the
    other in the same run, each with the same ``--batches`` x ``--batch-size`` records spread over
    that many partitions of the topic in every event (MSK batches mix partitions; with 10
    partitions and 1,000-record batches each partition gets 100 records per batch). Every
    workload gets its own handler pass from a fresh state -- a new staging/spool directory, a new
    ``mock_aws()`` context with a new bucket and table, every ``tidemark`` module dropped from
    ``sys.modules`` and the handler file imported again (a new ``ARCHIVER``/``Runtime``, so no
    writer, partition state or module-level cache of one workload reaches the next) -- and its
    own baseline pass over the very same events. After its handler pass the harness undoes the
    ``gc.freeze()`` the handler does at import (frozen objects are never collected) and
    collects, so the workload's handler module, ARCHIVER and clients are freed before the next
    one starts (``handler_released`` says whether they were).

Baseline
    On the same events, in the same run, timed the same way: base64-decode every record value,
    append the bytes to one file and fsync once per batch. That is the floor any durable
    archiver has to pay; ``baseline_ratio = handler_time / baseline_time`` says how far above
    that floor the handler runs, end to end with its flushes. ``staging_baseline_ratio`` is the
    same on the batches that flushed nothing (the staging path, the conditional ledger write
    included) against the baseline's time for those very batches; ``flush_records_per_s`` is
    records committed / (time of the flushing batches - as many mean staging batches), an
    estimate of the flush path alone.

Events
    ESM-shaped ``aws:kafka`` events (records keyed ``orders-<partition>``, base64 key/value,
    header byte arrays) of ~200-byte JSON orders whose ``created_at`` (epoch ms) moves evenly
    through the two whole hours before the current one (+-30 s jitter; 2% arrive 10-60 min late),
    so the flush pattern does not depend on the time of day. Record ``n`` of the run (in batch
    order, the partitions of a batch interleaved) sits at ``n / records`` of the two hours,
    whatever the number of partitions, and each partition's offsets are contiguous across
    batches. Each batch is built deterministically from its index, outside the timed region,
    just before it is used (the handler pass and the baseline pass see identical events; a
    digest proves it). They are not all kept in memory at once so that ``peak_rss_mb`` is the
    handler's footprint, not the test corpus's.

Memory
    ``peak_rss_mb`` is the workload's peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs``
    when a workload starts, so it includes what earlier workloads left allocated -- see
    ``rss_mb_start``; without that reset it falls back to ``ru_maxrss`` of the whole process and
    ``peak_rss_scope`` says ``process``). ``rss_mb_after_warmup`` (after the first 10% of batches)
    and ``rss_mb_end`` are current RSS from ``/proc/self/statm``; ``rss_growth_mb`` is their
    difference and should stay near 0 if memory is flat in the number of batches (try
    ``--batches 600``); ``rss_mb_samples`` is current RSS after every 10% of the batches, to tell
    a step from a climb. RSS includes whatever the allocator keeps after a flush's transient
    peak (a step at the first flush, which may come after the warm-up). It does not include
    moto's copy of the committed objects (``s3_object_mb``): moto keeps each one in a spooled
    temporary file, which this harness makes spill to disk at once
    (``MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=1``; by default only objects above ~5 MiB do, and 600
    batches over 10 partitions left ~27 MiB of smaller objects in RSS). moto's own bookkeeping
    of every model instance it ever created is dropped after each batch (untimed), since it
    would otherwise keep every version of the ledger item.

Cold start
    ``cold_start_ms`` is the time to import the handler module (which builds the Archiver at
    import: reads the config, creates the boto3 clients) plus its first invocation on one batch
    (batch 0 of the first workload), in a fresh interpreter: this file run again with a hidden
    ``--cold-start-child`` flag, ``--cold-start-runs`` times (default 5) after one discarded
    warm-up child. The child starts ``mock_aws`` and creates the bucket and table (through a
    private boto3 session, so the handler still builds the default session and loads the service
    models itself) BEFORE the timer starts, then imports the handler exactly like Lambda
    (``spec_from_file_location``). Reported: the fastest child (``cold_start_ms`` and its split
    ``cold_start_import_ms`` + ``cold_start_first_invoke_ms``), plus ``cold_start_median_ms`` and
    every sample. The minimum, not the median: on a shared machine the noise is one-sided (a
    neighbour's job only ever adds time) and comes in bursts, so with 5 samples the median jumps
    between "quiet" and "contended" (seen: 544-551 ms vs 1165-1212 ms in one run); the minimum
    is the figure least affected (still: if every child was contended, it is too -- look at
    the samples). Caveats: it is a relative figure, to compare commits on one machine, not a
    Lambda init duration. ``.pyc`` caches are warm (the interpreter is the normal one and the
    warm-up child writes any missing bytecode), as in a Lambda whose layer ships bytecode. Every
    module moto imported before the timer is not counted -- boto3, botocore, s3transfer, yaml,
    dateutil, urllib3 and more -- so ``cold_start_boto3_import_ms`` (the child's ``import boto3``,
    its first statement) is reported on the side: in Lambda it is paid on top.

Output
    Progress on stderr; the last stdout line is one JSON object. Its top-level keys are the
    FIRST workload's (as before this file measured several: ``records_per_s``, ``baseline_ratio``,
    ``staging_baseline_ratio``, ``peak_rss_mb``, ...), plus ``workloads`` (one object per
    workload, the same keys each, ``partitions`` included), ``max_baseline_ratio`` and
    ``max_staging_baseline_ratio`` (over the workloads), the ``cold_start_*`` keys,
    ``process_peak_rss_mb`` (the whole run's peak) and ``source_changed_during_run``
    (the core, handler and config files hashed before and after: the workloads and the cold
    start import them afresh, so an edit during the run would mix versions). Per workload:
    ``moto_seconds`` (time moto spent serving the handler's requests),
    ``records_per_s_excl_moto`` / ``baseline_ratio_excl_moto`` (an estimate for an infinitely
    fast AWS), ``ledger_state_item_kb_max`` (sampled size of the partitions' ledger items, each
    read and rewritten whole by every batch), ``ledger_state_item_bytes_mean`` / ``_max`` (the
    STATE item after every batch, sized by the ledger's ``item_size``: what an accept is billed
    by) and a correctness check: records committed (S3
    metadata) + records still buffered (ledger) == records produced. ``--profile`` runs cProfile
    around the handler calls only, for every workload (one profiler each), and prints each
    one's top functions and per-package split on stderr; ``--profile-out PATH`` keeps the raw
    pstats files (the first workload's at PATH, the others' at ``PATH.p<partitions>``).

Run: ``.venv/bin/python bench/handler.py [--batches N --batch-size M --partitions P1,P2,...
--cold-start-runs K]`` (``--partitions 1 --cold-start-runs 0`` measures what this file measured
before it had workloads and cold start). ``--flush-records N`` runs on a copy of the example config
whose buffers flush at N records instead of 100k.

Smoke mode
    ``--smoke`` (what ``make test`` runs, so the bench cannot rot): 20 batches of 50 records, the
    workloads ``1,2``, one cold-start child after its warm-up, and flushes at 200 records, so that
    the flushing batches, the flush estimate and the accounting of committed objects run too.
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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

# Nothing from ``tidemark`` (nor boto3/moto) is imported at module level: the cold-start child
# runs this file, and what it has imported before its timer starts is not counted.

ROOT = Path(__file__).resolve().parents[1]
HANDLER_PATH = ROOT / "functions" / "archiver" / "handler.py"
CONFIG_PATH = ROOT / "config" / "tidemark.yaml"
CORE_PATH = ROOT / "layers" / "core" / "tidemark"
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
CHILD_TIMEOUT_S = 600
#: ``--smoke``: every pass, check and figure of a full run on 1,000 records (options given still win)
SMOKE: dict[str, Any] = {
    "batches": 20,
    "batch_size": 50,
    "partitions": [1, 2],
    "cold_start_runs": 1,
    "flush_records": 200,
}


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def current_rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * PAGE_SIZE / MIB


def process_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (``VmHWM``) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def peak_rss_since_reset_mb() -> float | None:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return None


def source_digest(config: Path = CONFIG_PATH) -> str:
    """The code and config a handler import reads (to notice an edit made during the run)."""
    digest = hashlib.sha256()
    files = [*sorted(CORE_PATH.rglob("*.py")), *sorted(HANDLER_PATH.parent.rglob("*.py")), config]
    for path in files:
        digest.update(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path).encode())
        with contextlib.suppress(OSError):
            digest.update(path.read_bytes())
    return digest.hexdigest()


def two_hours_before_this_one_ms() -> int:
    """Event time runs through the two whole hours before the current one, so the flush pattern
    (which hour buffer reaches 100k records when) does not depend on the time of day."""
    return int(time.time() * 1000) // HOUR_MS * HOUR_MS - 2 * HOUR_MS


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
    """Batch ``index`` as the MSK ESM delivers it; a pure function of (workload, index).

    Record ``position`` of ``partition`` in this batch is record ``global_position`` of the run
    (the partitions interleaved), whose event time is ``global_position / records`` of the way
    through the two hours: the run's event time is spread evenly whatever the partition count."""
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


def set_environment(staging: Path, spool: Path, config: Path = CONFIG_PATH) -> None:
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
            "TIDEMARK_CONFIG": str(config),
            # moto keeps each object in a SpooledTemporaryFile: spill every one to disk (page
            # cache, not this process's RSS), so the RSS figures are the handler's, not moto's copy.
            "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": "1",
        }
    )


def scratch_dirs(prefix: str) -> tuple[Path, Path, Path, Path]:
    """(scratch, staging, spool, baseline): a new, empty tree."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    staging, spool, baseline_dir = scratch / "staging", scratch / "spool", scratch / "baseline"
    for directory in (staging, spool, baseline_dir):
        directory.mkdir()
    return scratch, staging, spool, baseline_dir


def forget_core_modules() -> int:
    """Drop every ``tidemark`` module, so the next handler import builds them (and any
    module-level cache they keep) afresh, as a new Lambda container would."""
    names = [name for name in sys.modules if name == "tidemark" or name.startswith("tidemark.")]
    for name in names:
        del sys.modules[name]
    return len(names)


def import_handler(stdout_sink: io.TextIOBase) -> ModuleType:
    """Import the handler file like Lambda does (it is not in a package); Powertools' Logger binds
    to ``sys.stdout`` at import, so importing under the redirect sends its lines to the sink.
    Every call executes the file again: a new module object, a new ``ARCHIVER``."""
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
    cost with an infinitely fast AWS -- an estimate, not a real-AWS number (no network here).
    Installed once per process (the hook outlives ``mock_aws`` contexts); ``reset`` per workload."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.requests = 0
        self.active = False
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.seconds = 0.0
            self.requests = 0

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
    rss_mb_samples: list[float]  # current RSS after every 10% of the batches


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
    rss_samples: list[float] = []
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
            rss_samples.append(current_rss_mb())
            log(
                f"{label}: {index + 1}/{workload.batches} batches, {done / elapsed:,.0f} records/s, "
                f"rss {rss_samples[-1]:.1f} MiB"
            )
    return PassResult(
        elapsed, batch_seconds, value_bytes, digest.hexdigest(), rss_after_warmup, current_rss_mb(), rss_samples
    )


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


def checked_summary(index: int, response: Any) -> dict[str, Any]:
    """The stream's summary of a batch that must have gone through cleanly."""
    if not isinstance(response, dict) or response.get("status") != "ok":
        raise AssertionError(f"batch {index}: handler returned {response!r}")
    summary: dict[str, Any] = response["streams"][STREAM]
    if summary["flush_errors"] or summary["dead_lettered"] or summary["duplicates"]:
        raise AssertionError(f"batch {index}: unexpected outcome {summary!r}")
    return summary


def request_id(index: int) -> str:
    return f"00000000-0000-4000-8000-{index:012d}"


def archiver_ref(module: ModuleType) -> weakref.ref[Any] | None:
    try:
        return weakref.ref(module.ARCHIVER)
    except TypeError:  # not weak-referenceable
        return None


def handler_call(
    module: ModuleType, sink: io.TextIOBase, moto_timer: MotoTimer, flushing_batches: set[int]
) -> Callable[[int, dict[str, Any]], None]:
    """Invoke the handler; note which batches also flushed (committed objects)."""
    from tidemark.embedded.lambda_runtime import LocalContext

    lambda_handler = module.lambda_handler

    def call(index: int, event: dict[str, Any]) -> None:
        moto_timer.active = True
        try:
            with contextlib.redirect_stdout(sink):  # EMF documents are print()ed
                response = lambda_handler(event, LocalContext(aws_request_id=request_id(index)))
        finally:
            moto_timer.active = False
        if checked_summary(index, response)["objects_committed"]:
            flushing_batches.add(index)

    return call


def moto_housekeeping(
    workload: Workload, dynamodb: Any, item_kb: list[float], item_bytes: list[int] | None = None
) -> Callable[[int], None]:
    """Untimed, after every handler batch.

    moto keeps every model instance it ever created (``instances_tracked``, for its dashboard),
    so each version of the ledger's STATE item would stay in memory: that is moto's memory, not
    the handler's, and it would make ``rss_mb_end`` meaningless. Drop it after every batch.
    Every 10% of batches, also sample the size of each partition's STATE item (the JSON wire
    size of its attributes): every batch reads and rewrites it whole. With ``item_bytes``, after
    EVERY batch, also the size of each partition's STATE item as DynamoDB bills it (the ledger's
    ``item_size``): the item the batch's accept (or its flush's commit) left, so their mean is the
    mean item an accept writes (``ledger_state_item_bytes_mean``: the cost model's WRUs per accept).
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
        if item_bytes is not None:
            for partition in range(workload.partitions):
                raw = dynamodb.get_item(
                    TableName=TABLE, Key={"pk": {"S": f"PART#{STREAM}#{partition}"}, "sk": {"S": "STATE"}}
                ).get("Item")
                if raw is not None:
                    item_bytes.append(state_item_bytes(raw))

    return between


def state_item_bytes(raw: dict[str, Any]) -> int:
    """The size DynamoDB bills a STATE item written by an accept, as the ledger counts it
    (``tidemark.ledger.dynamodb.item_size``: names plus values, numbers at their 21-byte maximum)."""
    from boto3.dynamodb.types import Binary, TypeDeserializer

    from tidemark.ledger.dynamodb import item_size

    deserializer = TypeDeserializer()
    plain: dict[str, Any] = {}
    for name, value in raw.items():
        decoded = deserializer.deserialize(value)
        plain[name] = bytes(decoded) if isinstance(decoded, Binary) else decoded  # type: ignore[call-overload]
    return item_size(plain)


def iter_objects(s3: Any) -> Iterator[dict[str, Any]]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        yield from page.get("Contents", ())


def account(module: ModuleType, s3: Any, workload: Workload) -> dict[str, int]:
    """Committed (S3 metadata) + still buffered (ledger, every partition) must equal what was
    produced, and no sealed buffer may be left behind."""
    objects = 0
    object_bytes = 0
    committed = 0
    for item in iter_objects(s3):
        objects += 1
        object_bytes += int(item["Size"])
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
    return {
        "objects_committed": objects,
        "object_bytes": object_bytes,
        "records_committed": committed,
        "records_buffered": buffered,
    }


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


def print_profile(profiler: cProfile.Profile, top: int, label: str) -> None:
    log(f"profile of the handler calls, {label}:")
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
    log(f"self time by package (profiled handler calls only, {label}):")
    for name, seconds in sorted(by_package.items(), key=lambda item: -item[1]):
        log(f"  {name:<14} {seconds:8.3f} s  {100 * seconds / max(total, 1e-9):5.1f}%")


# -- one workload ----------------------------------------------------------------------------


def run_workload(
    workload: Workload,
    sink: io.TextIOBase,
    moto_timer: MotoTimer,
    profiler: cProfile.Profile | None,
    config: Path = CONFIG_PATH,
) -> dict[str, Any]:
    """Handler pass from a fresh state, then the baseline pass on the same events; the result."""
    scratch, staging, spool, baseline_dir = scratch_dirs(f"tidemark-bench-p{workload.partitions}-")
    set_environment(staging, spool, config)  # read by the handler import (Runtime.from_env)
    forgotten = forget_core_modules()
    peak_scope = "workload" if reset_peak_rss() else "process"

    import boto3
    from moto import mock_aws

    from tidemark.ledger.dynamodb import ledger_table_schema

    try:
        with mock_aws():  # a new context: moto's backends start empty
            s3 = boto3.client("s3", region_name="us-east-1")
            s3.create_bucket(Bucket=BUCKET)
            dynamodb = boto3.client("dynamodb", region_name="us-east-1")
            dynamodb.create_table(**ledger_table_schema(TABLE))
            module = import_handler(sink)
            moto_timer.reset()
            log(
                f"workload: {workload.batches} batches x {workload.batch_size} records over {workload.partitions} "
                f"partition(s) = {workload.records:,} records; staging {staging} "
                f"({forgotten} tidemark modules re-imported)"
            )
            gc.collect()
            rss_start = current_rss_mb()
            item_kb: list[float] = []
            item_bytes: list[int] = []
            flushing: set[int] = set()
            handler = run_pass(
                workload,
                handler_call(module, sink, moto_timer, flushing),
                label=f"handler p={workload.partitions}",
                profiler=profiler,
                between=moto_housekeeping(workload, dynamodb, item_kb, item_bytes),
            )
            accounting = account(module, s3, workload)
            log(
                f"accounting ok: {accounting['objects_committed']} objects with "
                f"{accounting['records_committed']:,} records committed, {accounting['records_buffered']:,} buffered "
                f"over {workload.partitions} partition(s)"
            )
            archiver = archiver_ref(module)
            del module, s3, dynamodb
        # The handler may gc.freeze() what its import built (it lives as long as the container);
        # frozen objects are never collected, so undo that: this workload's handler module,
        # ARCHIVER and clients go before the next workload imports new ones.
        gc.unfreeze()
        gc.collect()
        released = None if archiver is None else archiver() is None
        if released is False:
            log("WARNING: the handler's ARCHIVER outlived its workload (later workloads start with it in memory)")
        with open(baseline_dir / "values.bin", "ab") as target:
            baseline = run_pass(workload, baseline_call(target), label=f"baseline p={workload.partitions}")
        if baseline.digest != handler.digest:
            raise AssertionError("the baseline pass did not see the same events as the handler pass")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    peak = peak_rss_since_reset_mb() if peak_scope == "workload" else None
    if peak is None:
        peak, peak_scope = process_peak_rss_mb(), "process"

    # The staging path alone: the batches that flushed nothing, against the baseline's time for
    # the very same batches.
    staging_batches = [i for i in range(workload.batches) if i not in flushing]
    staging_seconds = sum(handler.batch_seconds[i] for i in staging_batches)
    staging_baseline = sum(baseline.batch_seconds[i] for i in staging_batches)
    staging_records = len(staging_batches) * workload.batch_size
    mean_staging_batch = staging_seconds / max(len(staging_batches), 1)
    flush_seconds = sum(handler.batch_seconds[i] for i in flushing) - mean_staging_batch * len(flushing)
    return {
        "records_per_s": round(workload.records / handler.seconds, 1),
        "mb_per_s": round(handler.value_bytes / 1e6 / handler.seconds, 3),
        "peak_rss_mb": round(peak, 1),
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
        "ledger_state_item_bytes_mean": round(statistics.fmean(item_bytes), 1) if item_bytes else None,
        "ledger_state_item_bytes_max": max(item_bytes, default=None),
        "profiled": profiler is not None,
        "staging_records_per_s": round(staging_records / staging_seconds, 1) if staging_batches else None,
        "staging_baseline_ratio": round(staging_seconds / staging_baseline, 2) if staging_batches else None,
        "flushing_batches": len(flushing),
        "flush_records_per_s": (
            round(accounting["records_committed"] / flush_seconds, 1) if flushing and flush_seconds > 0 else None
        ),
        "flush_seconds_est": round(flush_seconds, 3) if flushing else None,
        "rss_growth_mb": round(handler.rss_mb_end - handler.rss_mb_after_warmup, 1),
        "rss_mb_samples": [round(sample, 1) for sample in handler.rss_mb_samples],
        "peak_rss_scope": peak_scope,
        "s3_object_mb": round(accounting["object_bytes"] / MIB, 1),
        "handler_released": released,
    }


# -- cold start ------------------------------------------------------------------------------


def cold_start_child(args: argparse.Namespace) -> int:
    """In a fresh interpreter: emulate AWS, then time the handler import and its first call."""
    started = time.perf_counter()
    import boto3

    boto3_import = time.perf_counter() - started
    from moto import mock_aws

    scratch, staging, spool, _ = scratch_dirs("tidemark-bench-cold-")
    set_environment(staging, spool, args.config or CONFIG_PATH)
    mock = mock_aws()
    mock.start()
    try:
        # A private session: the handler's boto3.client() calls must still build the default
        # session and load the S3 and DynamoDB service models themselves, as at a real cold start.
        setup = boto3.session.Session(region_name="us-east-1")
        setup.client("s3").create_bucket(Bucket=BUCKET)
        setup.client("dynamodb").create_table(**json.loads(args.cold_start_schema))
        del setup
        workload = Workload(args.batches, args.batch_size, args.partitions[0], start_ms=two_hours_before_this_one_ms())
        event = build_event(workload, 0)
        preloaded = sorted(name for name in sys.modules if name == "tidemark" or name.startswith("tidemark."))
        if preloaded:
            raise AssertionError(f"tidemark modules imported before the cold-start timer: {preloaded}")
        with open(os.devnull, "w", encoding="utf-8") as sink:
            gc.collect()
            started = time.perf_counter()
            module = import_handler(sink)
            imported = time.perf_counter()
            from tidemark.embedded.lambda_runtime import LocalContext  # untimed: harness, not handler

            context = LocalContext(aws_request_id=request_id(0))
            invoked = time.perf_counter()
            with contextlib.redirect_stdout(sink):
                response = module.lambda_handler(event, context)
            done = time.perf_counter()
        summary = checked_summary(0, response)
        if summary["records_in"] != workload.batch_size:
            raise AssertionError(f"cold start: {summary['records_in']} records in, expected {workload.batch_size}")
    finally:
        mock.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    sample = {
        "import_ms": round((imported - started) * 1000, 1),
        "first_invoke_ms": round((done - invoked) * 1000, 1),
        "boto3_import_ms": round(boto3_import * 1000, 1),
    }
    print(json.dumps(sample), flush=True)
    return 0


def run_cold_start_child(args: argparse.Namespace, schema: str) -> dict[str, float]:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--cold-start-child",
        "--cold-start-schema",
        schema,
        "--batches",
        str(args.batches),
        "--batch-size",
        str(args.batch_size),
        "--partitions",
        str(args.partitions[0]),
        *(["--config", str(args.config)] if args.config else []),
    ]
    child = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    lines = child.stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        raise RuntimeError(f"cold-start child failed (exit {child.returncode}):\n{child.stderr[-4000:]}")
    sample: dict[str, float] = json.loads(lines[-1])
    sample["total_ms"] = round(sample["import_ms"] + sample["first_invoke_ms"], 1)
    return sample


def median_run(samples: list[dict[str, float]]) -> dict[str, float]:
    """The run whose total is the median (for an even count, the mean of the two middle runs,
    component by component), so that import + first invoke add up to the reported total."""
    ordered = sorted(samples, key=lambda sample: sample["total_ms"])
    middle = ordered[(len(ordered) - 1) // 2 : len(ordered) // 2 + 1]
    return {key: round(statistics.fmean(run[key] for run in middle), 1) for key in ordered[0]}


def measure_cold_start(args: argparse.Namespace) -> dict[str, Any]:
    from tidemark.ledger.dynamodb import ledger_table_schema  # here, not in the child (see cold_start_child)

    schema = json.dumps(ledger_table_schema(TABLE))
    log(f"cold start: 1 warm-up + {args.cold_start_runs} fresh interpreter(s), partitions={args.partitions[0]}")
    warmup = run_cold_start_child(args, schema)
    samples = [run_cold_start_child(args, schema) for _ in range(args.cold_start_runs)]
    fastest = min(samples, key=lambda sample: sample["total_ms"])
    median = median_run(samples)
    log(
        f"cold start: min {fastest['total_ms']:.1f} ms (import {fastest['import_ms']:.1f} + first invoke "
        f"{fastest['first_invoke_ms']:.1f}), median {median['total_ms']:.1f}; "
        f"samples {[sample['total_ms'] for sample in samples]}; warm-up {warmup['total_ms']:.1f}"
    )
    return {
        "cold_start_ms": fastest["total_ms"],
        "cold_start_import_ms": fastest["import_ms"],
        "cold_start_first_invoke_ms": fastest["first_invoke_ms"],
        "cold_start_stat": "min",
        "cold_start_median_ms": median["total_ms"],
        "cold_start_samples_ms": [sample["total_ms"] for sample in samples],
        "cold_start_import_samples_ms": [sample["import_ms"] for sample in samples],
        "cold_start_warmup_ms": warmup["total_ms"],
        "cold_start_boto3_import_ms": fastest["boto3_import_ms"],
        "cold_start_runs": len(samples),
        "cold_start_partitions": args.partitions[0],
    }


NO_COLD_START: dict[str, Any] = {
    "cold_start_ms": None,
    "cold_start_import_ms": None,
    "cold_start_first_invoke_ms": None,
    "cold_start_runs": 0,
}


# -- main ------------------------------------------------------------------------------------


def partition_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("need at least one partition count")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--batches", type=int, default=250, help="ESM batches to deliver (default 250)")
    parser.add_argument("--batch-size", type=int, default=1000, help="records per batch (default 1000)")
    parser.add_argument(
        "--partitions",
        type=partition_list,
        default=[1, 10],
        help="partitions per event, one workload per entry, comma-separated (default 1,10)",
    )
    parser.add_argument(
        "--cold-start-runs",
        type=int,
        default=5,
        help="fresh interpreters timed for cold_start_ms, after one warm-up (default 5; 0 skips)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the handler calls of every workload (slower)")
    parser.add_argument("--profile-top", type=int, default=25, help="functions to list with --profile")
    parser.add_argument(
        "--profile-out", help="with --profile: raw pstats file of the first workload (others: PATH.p<partitions>)"
    )
    parser.add_argument(
        "--flush-records",
        type=int,
        default=None,
        help="flush buffers at this many records (a copy of the example config; default: its 100k)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a quick run that proves the bench works: 20 batches of 50, partitions 1,2, one cold-start run, "
        "flushes at 200 records (options given still win)",
    )
    parser.add_argument("--cold-start-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cold-start-schema", help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)  # the run's config, for the children
    args = parser.parse_args(argv)
    if args.smoke:  # smaller defaults; options given still win
        parser.set_defaults(**SMOKE)
        args = parser.parse_args(argv)
    if args.batches < 1 or args.batch_size < 1:
        parser.error("need batches >= 1 and batch-size >= 1")
    if not all(1 <= partitions <= args.batch_size for partitions in args.partitions):
        parser.error("need 1 <= partitions <= batch-size for every workload")
    if len(set(args.partitions)) != len(args.partitions):
        parser.error("each partition count once")
    if args.cold_start_runs < 0:
        parser.error("need cold-start-runs >= 0")
    if args.flush_records is not None and args.flush_records < 1:
        parser.error("need flush-records >= 1")
    if args.cold_start_child and not args.cold_start_schema:
        parser.error("--cold-start-child needs --cold-start-schema")
    return args


def flush_config(flush_records: int, directory: Path) -> Path:
    """A copy of the example config in ``directory`` whose streams flush at ``flush_records``."""
    import yaml

    data = yaml.safe_load(CONFIG_PATH.read_text(encoding="utf-8"))
    for stream in data["streams"]:
        stream["flush"]["max_records"] = flush_records
    path = directory / "tidemark.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def profile_path(base: str, position: int, partitions: int) -> str:
    return base if position == 0 else f"{base}.p{partitions}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cold_start_child:
        return cold_start_child(args)
    if args.flush_records is None or args.config is not None:
        return run(args, args.config or CONFIG_PATH)
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-config-") as directory:
        args.config = flush_config(args.flush_records, Path(directory))
        return run(args, args.config)


def run(args: argparse.Namespace, config: Path) -> int:
    """The cold start, every workload, and the JSON line."""
    digest_before = source_digest(config)
    cold_start = measure_cold_start(args) if args.cold_start_runs else dict(NO_COLD_START)

    moto_timer = MotoTimer()
    moto_timer.install()
    workloads: list[dict[str, Any]] = []
    sink = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 -- lives for the whole run
    try:
        for position, partitions in enumerate(args.partitions):
            workload = Workload(args.batches, args.batch_size, partitions, start_ms=two_hours_before_this_one_ms())
            profiler = cProfile.Profile() if args.profile else None
            workloads.append(run_workload(workload, sink, moto_timer, profiler, config))
            if profiler is not None:
                print_profile(profiler, args.profile_top, f"partitions={partitions}")
                if args.profile_out:
                    path = profile_path(args.profile_out, position, partitions)
                    profiler.dump_stats(path)
                    log(f"raw profile written to {path} (python -m pstats {path})")
            gc.collect()
    finally:
        sink.close()
    source_changed = source_digest(config) != digest_before
    if source_changed:
        log("WARNING: core/handler/config files changed during the run: workloads may have measured different code")

    def worst(key: str) -> float | None:
        values = [result[key] for result in workloads if result[key] is not None]
        return max(values, default=None)

    result = {
        **workloads[0],
        "max_baseline_ratio": worst("baseline_ratio"),
        "max_staging_baseline_ratio": worst("staging_baseline_ratio"),
        **cold_start,
        # ru_maxrss follows the VmHWM resets (only threads that exited keep their mark), so the
        # run's peak is the largest of the workloads' peaks and what ru_maxrss saw since.
        "process_peak_rss_mb": round(max([process_peak_rss_mb(), *(r["peak_rss_mb"] for r in workloads)]), 1),
        "source_changed_during_run": source_changed,
        **({"flush_max_records": args.flush_records} if args.flush_records is not None else {}),
        "workloads": workloads,
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
