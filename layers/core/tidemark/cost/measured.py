"""The inputs of the cost model that the project measures, each with where it comes from.

These are figures from the benches (README "Performance"), not guesses. They were measured on a
shared 2-core machine with S3 and DynamoDB emulated in-process (moto), so they are the handler's
CPU cost, not Lambda latency: a real DynamoDB conditional write and S3 PUT are network round
trips the benches do not include. Where a figure is a range over runs, the slow end is used, so
the model leans towards overstating Tidemark's cost. Figures that are declared rather than
measured live in ``ASSUMED`` below, marked as such.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Measured:
    value: float
    unit: str
    source: str


#: README "Performance", `bench/handler.py` (one partition per event, 1,000-record batches of
#: ~200-byte JSON orders): "handler records/s end to end 70,000-79,000", flushes included. The
#: slow end.
HANDLER_RECORDS_PER_S = Measured(
    70_000, "records/s", "bench/handler.py, README Performance: end to end 70,000-79,000 records/s (slow end)"
)

#: README "Performance": "~2.2 baselines are fixed per batch before any record is looked at",
#: baseline 2.2-2.4 ms per 1,000-record batch: 2.2 x 2.4 = 5.3 ms, rounded up to whole ms (Lambda
#: bills whole milliseconds). An invocation is never billed shorter than this.
INVOCATION_FIXED_MS = Measured(
    6, "ms per invocation", "README Performance: ~2.2 baselines x 2.2-2.4 ms fixed per batch (ledger write, fsyncs)"
)

#: Mean size of the partition's STATE item after each accepted batch, as the ledger's ``item_size``
#: counts it (what DynamoDB bills the accept's conditional write by). Measured 2026-11-24 with
#: ``.venv/bin/python bench/handler.py --batches 250 --partitions 1 --cold-start-runs 0``
#: (key ``ledger_state_item_bytes_mean``: 6297.0; max 11195; 250,000 records, 2 flushes of
#: 100k records, the example config's 100k / 64 MiB / 15 min flush thresholds). The item grows
#: with the open buffers' segments (one per batch) and shrinks at each flush.
LEDGER_ITEM_BYTES_PER_ACCEPT = Measured(
    6297,
    "bytes",
    "bench/handler.py --batches 250 --partitions 1 --cold-start-runs 0, 2026-11-24: ledger_state_item_bytes_mean",
)

#: README "Performance", `bench/formats.py`: 50,000 `make_orders` records (~143-byte JSON values)
#: render to a 1,672,572-byte JSON Lines + zstd object (the default format and codec):
#: 1,672,572 / (50,000 x 143) = 0.234 object bytes per value byte (envelope fields included).
OBJECT_BYTES_PER_VALUE_BYTE = Measured(
    1_672_572 / (50_000 * 143),
    "object bytes per value byte",
    "bench/formats.py, README Performance: jsonl + zstd 1,672,572 bytes for 50,000 ~143-byte values",
)

#: README "The aggregation job", `bench/spark_aggregate.py`: 1,000,000 records in 17.1 s on
#: ``local[2]`` (58,600 records/s on 2 vCPU).
AGGREGATION_RECORDS_PER_VCPU_S = Measured(
    58_600 / 2, "records per vCPU-second", "bench/spark_aggregate.py, README: 58,600 records/s on local[2]"
)

MEASURED: dict[str, Measured] = {
    "handler_records_per_s": HANDLER_RECORDS_PER_S,
    "invocation_fixed_ms": INVOCATION_FIXED_MS,
    "ledger_item_bytes_per_accept": LEDGER_ITEM_BYTES_PER_ACCEPT,
    "object_bytes_per_value_byte": OBJECT_BYTES_PER_VALUE_BYTE,
    "aggregation_records_per_vcpu_s": AGGREGATION_RECORDS_PER_VCPU_S,
}

# -- declared, not measured -------------------------------------------------------------------

#: Each sweeper Lambda invocation (1,024 MB, stacks/sweeper.py) is assumed to take 1 s: the sweeper
#: is not benched. Idle-flush rendering is already in the archiver's end-to-end rate.
SWEEPER_INVOCATION_S = Measured(1.0, "s per sweeper invocation", "ASSUMED (not benched)")
#: The aggregation job's fixed part per run: the driver (EMR Serverless default worker, 4 vCPU /
#: 16 GB) for 5 minutes of start-up and planning. EMR Serverless bills GB-hours by worker memory:
#: its default workers have 4 GB per vCPU.
EMR_DRIVER_VCPU = Measured(4, "vCPU", "ASSUMED: EMR Serverless default driver size")
EMR_RUN_FIXED_MINUTES = Measured(5, "minutes per run", "ASSUMED: start-up and driver time per hourly run")
EMR_GB_PER_VCPU = Measured(4, "GB per vCPU", "EMR Serverless default worker: 4 vCPU, 16 GB")
#: What one MSK Connect MCU (1 vCPU + 4 GiB) sustains with an S3 sink connector: NOT measured here
#: (AWS's MSK Connect capacity page gives no throughput per MCU); override it with
#: ``--msk-connect-mb-per-s-per-mcu``.
MSK_CONNECT_MB_PER_S_PER_MCU = Measured(5.0, "MB/s per MCU", "ASSUMED (not measured; no AWS figure)")

ASSUMED: dict[str, Measured] = {
    "sweeper_invocation_s": SWEEPER_INVOCATION_S,
    "emr_driver_vcpu": EMR_DRIVER_VCPU,
    "emr_run_fixed_minutes": EMR_RUN_FIXED_MINUTES,
    "emr_gb_per_vcpu": EMR_GB_PER_VCPU,
    "msk_connect_mb_per_s_per_mcu": MSK_CONNECT_MB_PER_S_PER_MCU,
}
