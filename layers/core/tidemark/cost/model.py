"""The monthly cost of archiving one workload with Tidemark, and with its two AWS alternatives.

Pure functions of a ``Workload``: no AWS call, no clock. Every price comes from ``prices`` and
every measured input from ``measured``; the assumptions are written where they are used.

Conventions:

* a month is 730 hours (AWS's own convention on its pricing pages);
* ``mb_per_s`` is the record bytes (values as produced) per second, MB = 10**6 bytes; per-GB
  prices are applied per GiB (2**30 bytes), as AWS bills data;
* one partition per ESM batch: each invocation carries one partition's records, which is the
  workload the handler bench measured (README "Performance", one partition per event). Mixed
  batches pay one ledger write per partition in the batch, so this is the cheap end for the ledger.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tidemark.cost import measured, prices
from tidemark.cost.prices import Price
from tidemark.exceptions import ConfigError

HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
GIB = 2**30
MIB = 2**20
KB = 1024

#: Provisioned Throughput is sized at the steady rate times this: the dashboard's throughput
#: alarm fires at 80% of what is permitted, so the steady load stays below it (1 / 1.25 = 80%),
#: with a little room for the ESM to catch up after a pause.
EFS_PROVISIONED_HEADROOM = 1.25
#: the sweeper state machine (stacks/sweeper.py): ListPartitions, SweepEachPartition (the Map),
#: Reconcile, CompleteHours, TallySweeps, AnySweepFailed, SweptEveryPartition -- each entered once
#: per execution -- and per partition SweepPartition + Swept (no retries, no failures)
SWEEPER_FIXED_TRANSITIONS = 7
SWEEPER_TRANSITIONS_PER_PARTITION = 2
#: sweeper Lambda invocations per execution: ListPartitions, Reconcile, CompleteHours, and one
#: SweepPartition per partition (stacks/sweeper.py); their memory
SWEEPER_FIXED_INVOCATIONS = 3
SWEEPER_MEMORY_MB = 1024
#: a commit is one DynamoDB transaction of three items (state put, object item, hour mark update,
#: ``DynamoDBLedger._put_state_and_object``); transactions cost 2 WRU per KB per item. The object
#: item and the hour mark are under 1 KB each.
COMMIT_SMALL_ITEMS = 2
TRANSACTION_WRU_FACTOR = 2
#: hour-mark writes per stream and event hour outside commits: CompleteHours (manifest), Reconcile
#: and the aggregation job's mark, 1 WRU each
HOUR_MARK_WRITES_PER_HOUR = 3
#: interface endpoints a created VPC gets for MSK sources (stacks/network.py): STS and Lambda
INTERFACE_ENDPOINTS = ("sts", "lambda")
#: ESM invocation payloads carry the record values base64-encoded
BASE64_GROWTH = 4 / 3

EfsMode = Literal["elastic", "provisioned"]
#: ``archive.protection``: what keeps an object version beyond the bucket policy
Protection = Literal["none", "versioning", "object_lock"]
#: Object Lock's default retention, in days, as S3 and CloudFormation take it
OBJECT_LOCK_MAX_DAYS = 36_500
DAYS_PER_MONTH = HOURS_PER_MONTH / 24


@dataclass(frozen=True, slots=True)
class Workload:
    """One stream's sustained load and the settings that shape its cost (defaults: the config's)."""

    mb_per_s: float
    record_bytes: int
    partitions: int
    batch_size: int = 1000  # source.batch_size
    batching_window_s: float = 1.0  # source.batching_window
    memory_mb: int = 2048  # archiver.memory_mb (ArchiverFunctionSettings)
    flush_max_records: int = 100_000  # flush.max_records
    flush_max_bytes: int = 64 * MIB  # flush.max_bytes
    flush_max_age_s: float = 900.0  # flush.max_age
    sweeper_interval_s: float = 300.0  # sweeper.interval
    multipart_threshold: int = 16 * MIB  # archive.multipart_threshold
    multipart_chunksize: int = 8 * MIB  # archive.multipart_chunksize
    provisioned_pollers: int | None = None  # archiver.provisioned_pollers: EPUs kept all month
    endpoint_azs: int = 2  # network.max_azs; 0 when the stack makes no interface endpoint
    aggregations: bool = True  # an EMR Serverless job per hour
    efs_mode: EfsMode | None = None  # None: the recommended one
    msk_connect_mb_per_s_per_mcu: float = measured.MSK_CONNECT_MB_PER_S_PER_MCU.value
    protection: Protection = "none"  # archive.protection
    object_lock_days: int = 0  # archive.object_lock.retention, in days (protection object_lock only)

    def __post_init__(self) -> None:
        if self.protection not in ("none", "versioning", "object_lock"):
            raise ConfigError(f"--protection must be none, versioning or object_lock, got {self.protection!r}")
        if self.protection == "object_lock" and not 1 <= self.object_lock_days <= OBJECT_LOCK_MAX_DAYS:
            raise ConfigError(
                f"--object-lock-days must be between 1 and {OBJECT_LOCK_MAX_DAYS} with object_lock, "
                f"got {self.object_lock_days}"
            )
        if self.protection != "object_lock" and self.object_lock_days:
            raise ConfigError("--object-lock-days is only for --protection object_lock")
        if self.mb_per_s <= 0:
            raise ConfigError(f"--mb-per-s must be above 0, got {self.mb_per_s}")
        if self.record_bytes < 1:
            raise ConfigError(f"--record-bytes must be at least 1, got {self.record_bytes}")
        if self.partitions < 1:
            raise ConfigError(f"--partitions must be at least 1, got {self.partitions}")
        if self.provisioned_pollers is not None:
            needed = math.ceil(self.mb_per_s / prices.ESM_EPU_MB_PER_S)
            if self.provisioned_pollers < needed:
                raise ConfigError(
                    f"--provisioned-pollers {self.provisioned_pollers} is below the {needed} this load needs "
                    f"(one EPU polls up to {prices.ESM_EPU_MB_PER_S:g} MB/s)"
                )

    @property
    def bytes_per_s(self) -> float:
        return self.mb_per_s * 1e6

    @property
    def records_per_s(self) -> float:
        return self.bytes_per_s / self.record_bytes

    @property
    def gib_per_month(self) -> float:
        return self.bytes_per_s * SECONDS_PER_MONTH / GIB

    @property
    def records_per_batch(self) -> float:
        """The ESM fills a batch or waits ``batching_window``: a slow partition sends smaller batches."""
        per_partition = self.records_per_s / self.partitions
        return max(1.0, min(float(self.batch_size), per_partition * self.batching_window_s))

    @property
    def invocations_per_month(self) -> float:
        return self.records_per_s / self.records_per_batch * SECONDS_PER_MONTH

    @property
    def invocation_ms(self) -> int:
        """Billed duration: the batch at the measured end-to-end rate (flushes included), whole
        ms, never under the measured fixed cost of an invocation."""
        work_ms = math.ceil(self.records_per_batch / measured.HANDLER_RECORDS_PER_S.value * 1000)
        return max(work_ms, int(measured.INVOCATION_FIXED_MS.value))

    @property
    def buffer_fill_s(self) -> float:
        """How long one partition's buffer takes to reach a flush threshold (records, bytes, age)."""
        per_partition_bytes = self.bytes_per_s / self.partitions
        per_partition_records = self.records_per_s / self.partitions
        return min(
            self.flush_max_age_s,
            self.flush_max_records / per_partition_records,
            self.flush_max_bytes / per_partition_bytes,
        )

    @property
    def objects_per_partition_hour(self) -> int:
        """Flushes by threshold, plus one for the buffer the hour boundary cuts short (a buffer
        holds one event hour). Late records, which open buffers of past hours, are not counted."""
        return math.floor(3600 / self.buffer_fill_s) + 1 if self.buffer_fill_s < 3600 else 1

    @property
    def objects_per_month(self) -> float:
        return self.objects_per_partition_hour * self.partitions * HOURS_PER_MONTH

    @property
    def object_bytes(self) -> float:
        raw = self.bytes_per_s / self.partitions * min(self.buffer_fill_s, 3600.0)
        return raw * measured.OBJECT_BYTES_PER_VALUE_BYTE.value

    @property
    def puts_per_object(self) -> int:
        """One PUT, or above the multipart threshold: create + one per part + complete."""
        if self.object_bytes <= self.multipart_threshold:
            return 1
        return math.ceil(self.object_bytes / self.multipart_chunksize) + 2

    @property
    def sweeps_per_month(self) -> float:
        return SECONDS_PER_MONTH / self.sweeper_interval_s


@dataclass(frozen=True, slots=True)
class LineItem:
    part: str
    item: str
    quantity: float
    unit: str
    unit_price: float
    source: str

    @property
    def monthly(self) -> float:
        return self.quantity * self.unit_price


def line(part: str, item: str, quantity: float, price: Price) -> LineItem:
    return LineItem(part, item, quantity, price.unit, price.dollars, price.source)


@dataclass(frozen=True, slots=True)
class EfsChoice:
    """Both throughput modes priced for the load, and the cheaper one."""

    recommended: EfsMode
    elastic_monthly: float
    provisioned_mibps: int
    provisioned_monthly: float
    reason: str


def efs_choice(workload: Workload) -> EfsChoice:
    """Each staged byte is written once (the accept) and read once (the flush).

    Elastic bills those bytes ($0.06/GB written + $0.03/GB read); Provisioned bills a rate for
    the month ($6 per MiB/s), which must cover writes plus reads at the steady rate with
    ``EFS_PROVISIONED_HEADROOM``. (Reads may be metered at a lower rate than writes in
    Provisioned mode; they are counted in full here, which only overstates what is needed.) The
    baseline throughput that stored bytes earn is ignored: staging holds at most a few GiB.
    Provisioned caps the rate: a load with bursts above it, or a backlog to catch up, is throttled,
    so it fits a steady load; Elastic follows any burst."""
    gib = workload.gib_per_month
    elastic = gib * (prices.EFS_ELASTIC_WRITE_GB.dollars + prices.EFS_ELASTIC_READ_GB.dollars)
    mibps = max(1, math.ceil(2 * workload.bytes_per_s / MIB * EFS_PROVISIONED_HEADROOM))
    provisioned = mibps * prices.EFS_PROVISIONED_MIBPS_MONTH.dollars
    if provisioned < elastic:
        reason = (
            f"provisioned: {mibps} MiB/s (writes + reads at {workload.mb_per_s:g} MB/s, x{EFS_PROVISIONED_HEADROOM} "
            f"headroom) costs ${provisioned:,.2f}/month against ${elastic:,.2f} for Elastic's "
            f"{2 * gib:,.0f} GiB moved; choose Elastic instead if the load bursts above {mibps} MiB/s"
        )
        return EfsChoice("provisioned", elastic, mibps, provisioned, reason)
    reason = (
        f"elastic: moving {2 * gib:,.0f} GiB a month costs ${elastic:,.2f}, no more than the "
        f"${provisioned:,.2f} of {mibps} MiB/s provisioned, and follows bursts"
    )
    return EfsChoice("elastic", elastic, mibps, provisioned, reason)


def tidemark_costs(workload: Workload) -> list[LineItem]:
    """Every part of Tidemark for the month, in the order of the pipeline."""
    w = workload
    items: list[LineItem] = []
    gb_s = w.invocations_per_month * w.invocation_ms / 1000 * w.memory_mb / 1024
    items.append(
        line("Lambda", f"archiver GB-s ({w.invocation_ms} ms x {w.memory_mb} MB)", gb_s, prices.LAMBDA_ARM64_GB_SECOND)
    )
    items.append(line("Lambda", "archiver requests", w.invocations_per_month, prices.LAMBDA_REQUEST))
    sweeper_calls = (SWEEPER_FIXED_INVOCATIONS + w.partitions) * w.sweeps_per_month
    sweeper_gb_s = sweeper_calls * measured.SWEEPER_INVOCATION_S.value * SWEEPER_MEMORY_MB / 1024
    items.append(line("Lambda", "sweeper GB-s (1 s assumed x 1024 MB)", sweeper_gb_s, prices.LAMBDA_ARM64_GB_SECOND))
    items.append(line("Lambda", "sweeper requests", sweeper_calls, prices.LAMBDA_REQUEST))
    if w.provisioned_pollers is not None:
        items.append(
            line(
                "ESM",
                f"provisioned pollers ({w.provisioned_pollers} EPU)",
                w.provisioned_pollers * HOURS_PER_MONTH,
                prices.ESM_EPU_HOUR,
            )
        )

    choice = efs_choice(w)
    mode = w.efs_mode or choice.recommended
    if mode == "elastic":
        items.append(
            line("EFS", "Elastic Throughput: staged bytes written", w.gib_per_month, prices.EFS_ELASTIC_WRITE_GB)
        )
        items.append(
            line("EFS", "Elastic Throughput: staged bytes read at flush", w.gib_per_month, prices.EFS_ELASTIC_READ_GB)
        )
    else:
        items.append(
            line(
                "EFS",
                f"Provisioned Throughput ({choice.provisioned_mibps} MiB/s)",
                choice.provisioned_mibps,
                prices.EFS_PROVISIONED_MIBPS_MONTH,
            )
        )
    # Upper bound: every partition's buffer full (the sawtooth averages half of it).
    staged_gib = w.bytes_per_s * w.buffer_fill_s / GIB
    items.append(
        line("EFS", f"storage ({w.buffer_fill_s:g} s of data staged)", staged_gib, prices.EFS_STANDARD_GB_MONTH)
    )

    item_kb = math.ceil(measured.LEDGER_ITEM_BYTES_PER_ACCEPT.value / KB)
    items.append(
        line(
            "DynamoDB",
            f"accepts ({item_kb} WRU each: measured item size)",
            w.invocations_per_month * item_kb,
            prices.DYNAMODB_WRU,
        )
    )
    commit_wru = TRANSACTION_WRU_FACTOR * (item_kb + COMMIT_SMALL_ITEMS)
    items.append(
        line(
            "DynamoDB",
            f"commits ({commit_wru} WRU each: transaction of 3 items)",
            w.objects_per_month * commit_wru,
            prices.DYNAMODB_WRU,
        )
    )
    items.append(line("DynamoDB", "hour marks", HOUR_MARK_WRITES_PER_HOUR * HOURS_PER_MONTH, prices.DYNAMODB_WRU))

    items.append(
        line(
            "S3",
            f"PUTs ({w.objects_per_partition_hour} objects per partition-hour, {w.puts_per_object} request(s) each)",
            w.objects_per_month * w.puts_per_object,
            prices.S3_PUT,
        )
    )
    stored_gib = w.gib_per_month * measured.OBJECT_BYTES_PER_VALUE_BYTE.value
    items.append(line("S3", "Standard storage (one month of objects)", stored_gib, prices.S3_STANDARD_GB_MONTH))

    items.extend(protection_costs(w))

    transitions = (SWEEPER_FIXED_TRANSITIONS + SWEEPER_TRANSITIONS_PER_PARTITION * w.partitions) * w.sweeps_per_month
    items.append(line("Step Functions", "sweeper state transitions", transitions, prices.SFN_STANDARD_TRANSITION))

    if w.endpoint_azs:
        endpoint_hours = len(INTERFACE_ENDPOINTS) * w.endpoint_azs * HOURS_PER_MONTH
        items.append(
            line(
                "VPC endpoints",
                f"STS + Lambda interface endpoints x {w.endpoint_azs} AZs",
                endpoint_hours,
                prices.VPC_INTERFACE_ENDPOINT_AZ_HOUR,
            )
        )
        items.append(
            line(
                "VPC endpoints",
                "invocation payloads through the Lambda endpoint (base64)",
                w.gib_per_month * BASE64_GROWTH,
                prices.VPC_INTERFACE_ENDPOINT_GB,
            )
        )

    if w.aggregations:
        items.extend(aggregation_costs(w))
    return items


def protection_costs(workload: Workload) -> list[LineItem]:
    """``archive.protection``. S3 bills nothing for versioning or Object Lock themselves; it bills
    every stored version as an object ("Normal Amazon S3 rates apply for every version of an
    object stored", S3 User Guide, "Retaining multiple versions of objects with S3 Versioning";
    the S3 pricing page has no line for either). The bucket policy refuses an overwrite and a
    delete under the archive's prefixes (but the break-glass role's), so Tidemark's own writes
    never leave a noncurrent version: no extra storage, shown as a zero line so that the choice is
    visible in the bill. What each costs when it does act is in ``protection_notes``."""
    if workload.protection == "none":
        return []
    item = "versioning: noncurrent versions (none: the bucket policy refuses overwrites and deletes)"
    if workload.protection == "object_lock":
        item = f"Object Lock ({workload.object_lock_days} d retention): versions kept, none beyond the objects"
    return [line("S3", item, 0.0, prices.S3_STANDARD_GB_MONTH)]


def protection_notes(workload: Workload) -> list[str]:
    """What the protection costs when it acts: the storage it keeps."""
    if workload.protection == "none":
        return []
    standard = prices.S3_STANDARD_GB_MONTH.dollars
    notes = [
        f"archive.protection {workload.protection}: an object deleted (only the break-glass role may) or "
        f"replaced (only once the bucket policy is removed) stays billed as a noncurrent version (${standard} "
        "per GB-month in Standard) until that version is removed with DeleteObjectVersion"
    ]
    if workload.protection == "object_lock":
        stored_gib = workload.gib_per_month * measured.OBJECT_BYTES_PER_VALUE_BYTE.value
        locked = stored_gib * standard * workload.object_lock_days / DAYS_PER_MONTH
        notes.append(
            f"Object Lock: each month's objects ({stored_gib:,.0f} GiB) are billed for at least "
            f"{workload.object_lock_days} days whatever happens to them, ${locked:,.2f} at Standard prices (less "
            "after transitions); Tidemark never deletes an object, so this adds nothing unless you would have "
            "deleted them (objects of a mistaken configuration included)"
        )
    return notes


def aggregation_costs(workload: Workload) -> list[LineItem]:
    """One EMR Serverless job run per hour over that hour's records: the measured vCPU-seconds per
    record (``bench/spark_aggregate.py``) plus an assumed fixed driver and start-up part per run;
    memory at the default workers' 4 GB per vCPU. Each object is read once (one GET)."""
    records_per_hour = workload.records_per_s * 3600
    work_vcpu_h = records_per_hour / measured.AGGREGATION_RECORDS_PER_VCPU_S.value / 3600
    fixed_vcpu_h = measured.EMR_DRIVER_VCPU.value * measured.EMR_RUN_FIXED_MINUTES.value / 60
    vcpu_h = (work_vcpu_h + fixed_vcpu_h) * HOURS_PER_MONTH
    return [
        line("EMR Serverless", "aggregation vCPU-hours (one run per hour)", vcpu_h, prices.EMR_SERVERLESS_VCPU_HOUR),
        line(
            "EMR Serverless",
            "aggregation GB-hours",
            vcpu_h * measured.EMR_GB_PER_VCPU.value,
            prices.EMR_SERVERLESS_GB_HOUR,
        ),
        line("EMR Serverless", "object GETs", workload.objects_per_month, prices.S3_GET),
    ]


def s3_storage_item(workload: Workload) -> LineItem:
    """The alternatives store the same bytes; the same compression is assumed for them."""
    stored = workload.gib_per_month * measured.OBJECT_BYTES_PER_VALUE_BYTE.value
    return line("S3", "Standard storage (same bytes as Tidemark's)", stored, prices.S3_STANDARD_GB_MONTH)


def firehose_costs(workload: Workload) -> list[LineItem]:
    """Amazon Data Firehose reading the MSK topic: billed per GB ingested (the record bytes; the
    delivered bytes, compressed, are fewer). No format conversion or dynamic partitioning; S3
    PUTs of its objects are not counted (its buffers are larger than Tidemark's)."""
    return [
        line("Firehose", "MSK source, GB ingested", workload.gib_per_month, prices.FIREHOSE_MSK_GB),
        s3_storage_item(workload),
    ]


def msk_connect_mcus(workload: Workload) -> int:
    """At least one MCU (a connector runs at least one worker of one MCU), else the load over the
    assumed throughput of one MCU (``--msk-connect-mb-per-s-per-mcu``; not measured here)."""
    return max(1, math.ceil(workload.mb_per_s / workload.msk_connect_mb_per_s_per_mcu))


def msk_connect_costs(workload: Workload) -> list[LineItem]:
    """MSK Connect running an S3 sink connector all month; its S3 PUTs are not counted."""
    mcus = msk_connect_mcus(workload)
    return [
        line(
            "MSK Connect",
            f"{mcus} MCU(s) all month ({workload.msk_connect_mb_per_s_per_mcu:g} MB/s per MCU assumed)",
            mcus * HOURS_PER_MONTH,
            prices.MSK_CONNECT_MCU_HOUR,
        ),
        s3_storage_item(workload),
    ]


def total(items: list[LineItem]) -> float:
    return sum(item.monthly for item in items)


@dataclass(frozen=True, slots=True)
class Estimate:
    workload: Workload
    tidemark: list[LineItem]
    firehose: list[LineItem]
    msk_connect: list[LineItem]
    efs: EfsChoice
    notes: list[str] = field(default_factory=list)

    @property
    def tidemark_archiving(self) -> float:
        """Tidemark without the aggregation job: what the alternatives do (archive only)."""
        return total([item for item in self.tidemark if item.part != "EMR Serverless"])

    def to_json(self) -> dict[str, Any]:
        def rows(items: list[LineItem]) -> list[dict[str, Any]]:
            return [{**asdict(item), "monthly": round(item.monthly, 4)} for item in items]

        return {
            "region": prices.REGION,
            "prices_effective": prices.PRICES_EFFECTIVE,
            "workload": asdict(self.workload),
            "tidemark": {
                "items": rows(self.tidemark),
                "total": round(total(self.tidemark), 2),
                "archiving_only": round(self.tidemark_archiving, 2),
            },
            "firehose": {"items": rows(self.firehose), "total": round(total(self.firehose), 2)},
            "msk_connect": {
                "items": rows(self.msk_connect),
                "total": round(total(self.msk_connect), 2),
                "mcus": msk_connect_mcus(self.workload),
            },
            "efs": asdict(self.efs),
            "measured": {name: asdict(value) for name, value in measured.MEASURED.items()},
            "assumed": {name: asdict(value) for name, value in measured.ASSUMED.items()},
            "notes": self.notes,
        }


def estimate(workload: Workload) -> Estimate:
    notes = [
        "month = 730 hours; MB = 10**6 bytes; per-GB prices applied per GiB",
        "one partition per ESM batch (the measured case); mixed batches pay one ledger write per partition",
        "handler speed and ledger item size measured with S3/DynamoDB emulated in-process: real network "
        "round trips make invocations longer",
        *protection_notes(workload),
    ]
    return Estimate(
        workload,
        tidemark_costs(workload),
        firehose_costs(workload),
        msk_connect_costs(workload),
        efs_choice(workload),
        notes,
    )
