"""One step of tests/integration/test_flush_memory.py in a fresh process, so that the process's
peak RSS is that step's alone.

The peak is the kernel's high-water mark of this process's own memory (``VmHWM``), reset once the
runtime is built. Not ``ru_maxrss``: at ``exec`` the kernel carries the forked parent's high-water
mark into it, so a child of pytest reports pytest's size, whatever the step does.

``python -m tests.support.flush_memory_child stage MIB``
    stages about ``MIB`` MiB of ~4 KiB JSON orders into one buffer of partition 0, through the
    real writer (``PartitionWriter.write``: routing, framing, segment files, ledger), in batches
    of :data:`BATCH` records (one segment each);
``python -m tests.support.flush_memory_child drain``
    seals that buffer and flushes it (``PartitionWriter.drain``: segments read back one at a
    time, rendered, compressed, spooled, uploaded with the transfer manager, committed).

The runtime comes from the environment (``Runtime.from_env``: ``TIDEMARK_BUCKET``,
``TIDEMARK_LEDGER_TABLE``, ``TIDEMARK_STAGING_ROOT``, ``TIDEMARK_SPOOL_DIR``,
``TIDEMARK_CONFIG_JSON``, ``AWS_ENDPOINT_URL``). The last stdout line is one JSON object:
``peak_rss_mib``, ``rss_mib_before`` (once the runtime is built, before the step), ``seconds``
and what the step did.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

from tidemark.records.model import Record
from tidemark.runtime import Runtime

BATCH = 4_096  # records per write: one segment of ~16 MiB
VALUE_BYTES = 4_096
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024


def rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * PAGE / MIB


def reset_peak_rss() -> None:
    """Reset the high-water mark (``VmHWM``) to the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
        clear_refs.write("5")


def peak_rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError("/proc/self/status has no VmHWM")


def orders(count: int, start: int, created_ms: int, rng: random.Random, pads: list[bytes]) -> list[Record]:
    """JSON orders of exactly :data:`VALUE_BYTES`, all in the hour of ``created_ms``: one buffer."""
    records = []
    for offset in range(start, start + count):
        head = b'{"order_id":"%032x","created_at":%d,"n":%d,"note":"' % (
            rng.getrandbits(128),
            created_ms + offset % 1_000,
            offset,
        )
        value = head + pads[offset % len(pads)][: VALUE_BYTES - len(head) - 2] + b'"}'
        records.append(Record("orders", 0, offset, created_ms, value, b"o-%d" % offset, (("source", b"web"),)))
    return records


def stage(runtime: Runtime, mib: int) -> dict[str, Any]:
    rng = random.Random(mib)
    words = [b"%x" % rng.getrandbits(24) for _ in range(64)]
    pads = [b" ".join(rng.choices(words, k=VALUE_BYTES // 6)) for _ in range(32)]
    now = runtime.clock.now_ms()
    created_ms = now - now % 3_600_000  # the current hour's first millisecond: never late, never ahead
    writer = runtime.writer(runtime.config.streams[0], 0)
    staged = records = 0
    while staged < mib * MIB:
        batch = orders(BATCH, records, created_ms, rng, pads)
        outcome = writer.write(batch)
        assert not outcome.flushes, "the buffer must stay open until drained"
        staged += sum(len(record.value) for record in batch)
        records += len(batch)
    return {"records": records, "value_bytes": staged}


def drain(runtime: Runtime) -> dict[str, Any]:
    outcome = runtime.writer(runtime.config.streams[0], 0).drain()
    return {"objects": [{"key": f.key, "records": f.records, "size": f.size} for f in outcome.flushes]}


def main() -> None:
    step = sys.argv[1]
    runtime = Runtime.from_env()
    before = rss_mib()
    reset_peak_rss()
    started = time.perf_counter()
    result = stage(runtime, int(sys.argv[2])) if step == "stage" else drain(runtime)
    seconds = time.perf_counter() - started
    print(json.dumps({**result, "peak_rss_mib": peak_rss_mib(), "rss_mib_before": before, "seconds": seconds}))


if __name__ == "__main__":
    main()
