"""A small model of the MSK event source mapping for fault-injection tests.

Like the real ESM it delivers batches per partition from the last committed offset, commits
only after the handler returns, and redelivers the whole batch after a failure (here: a
simulated crash). It can also rewind (a rebalance redelivering already committed records).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.events import event_of
from tests.support.workload import KINESIS_STREAM_ARN, Workload
from tidemark.archiver import Archiver
from tidemark.config import TidemarkConfig, parse_config
from tidemark.exceptions import StagingConflictError
from tidemark.faults import CrashPoints, SimulatedCrash
from tidemark.formats import RenderSpec, format_of
from tidemark.objects.keys import hour_of_key, positions_of_key
from tidemark.objects.writer import META_RECORDS, META_SHA256
from tidemark.records.model import Record
from tidemark.runtime import Runtime
from tidemark.sources import KAFKA, KINESIS, PartitionId
from tidemark.verify import spec_of_key, verify_archive
from tidemark.writer.stream import StreamContext

REPO = Path(__file__).resolve().parents[2]


def example_config_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "config" / "tidemark.yaml").read_text())
    return data


def small_config(
    *,
    format: dict[str, Any] | None = None,
    partition_by: dict[str, Any] | None = None,
    kind: str = KAFKA,
    topic: str | None = None,
    **flush: Any,
) -> TidemarkConfig:
    """The example config with small flush limits, so seals and uploads happen constantly
    (and, if given, another ``format``, ``partition_by`` and Kafka ``topic``; ``kind="kinesis"``:
    the Kinesis stream of the sample events instead of the MSK topic)."""
    return parse_config(small_config_data(format=format, partition_by=partition_by, kind=kind, topic=topic, **flush))


def small_config_data(
    *,
    format: dict[str, Any] | None = None,
    partition_by: dict[str, Any] | None = None,
    kind: str = KAFKA,
    topic: str | None = None,
    **flush: Any,
) -> dict[str, Any]:
    """``small_config`` as the YAML document's data (for a command given a config file)."""
    data = example_config_data()
    stream = data["streams"][0]
    if topic is not None:
        stream["source"]["topic"] = topic
    if kind == KINESIS:
        stream["source"] = {"kind": KINESIS, "stream_arn": KINESIS_STREAM_ARN}
    stream["flush"] = {"max_records": 50, "max_bytes": "1MiB", "max_age": "15m", **flush}
    if format is not None:
        stream["format"] = format
    if partition_by is not None:
        stream["partition_by"] = partition_by
    return data


#: the formats the fault-injection suite runs under besides the default (gzip JSON Lines)
PARTITIONED_FORMATS = {
    "parquet": {"format": {"type": "parquet", "compression": "zstd"}, "partition_by": {"fields": ["_value.country"]}},
    "avro": {
        "format": {"type": "avro", "compression": "snappy"},
        "partition_by": {
            "fields": ["_header.source"],
            "style": "keys_and_values",
            "hour_folders": "hive",
        },
    },
    # Kinesis records have no headers: partitioned by a value field, with Hive hour folders
    "kinesis-csv": {
        "format": {"type": "csv", "compression": "zstd"},
        "partition_by": {"fields": ["_value.country"], "style": "keys_and_values", "hour_folders": "hive"},
    },
}


class RunOtherAt:
    """A crash-point hook that, the first time ``point`` is hit, runs ``action`` right there:
    a second invocation executing inside the first one's window (deterministic interleaving)."""

    def __init__(self, point: str, action: Callable[[], object]) -> None:
        self.point = point
        self.action = action
        self.fired = False

    def hit(self, name: str) -> None:
        if name == self.point and not self.fired:
            self.fired = True
            self.action()


@dataclass
class EsmModel:
    workload: Workload
    make_runtime: Callable[[CrashPoints | None], Runtime]
    committed: dict[PartitionId, int] = field(default_factory=dict)  # partition -> next position to deliver
    crashes: int = 0
    deliveries: int = 0
    _warm: Runtime | None = None

    def __post_init__(self) -> None:
        for partition, records in self.workload.records.items():
            self.committed.setdefault(partition, records[0].offset)

    def pending(self, partition: PartitionId) -> list[Record]:
        return [r for r in self.workload.records[partition] if r.offset >= self.committed[partition]]

    def batch(self, partition: PartitionId, size: int, rewind: int = 0) -> list[Record]:
        """The next ``size`` records from the committed position, after going back ``rewind``
        records (positions need not be contiguous: Kinesis sequence numbers are not)."""
        records = self.workload.records[partition]
        start = next((i for i, r in enumerate(records) if r.offset >= self.committed[partition]), len(records))
        return records[max(start - rewind, 0) :][:size]

    def expire(self, partition: PartitionId, log_start: int | None = None) -> None:
        """The group sat empty past Kafka's ``offsets.retention.minutes``: its committed offset is
        gone, and the mapping starts again at its ``StartingPosition`` -- ``TRIM_HORIZON``, the
        earliest offset retention left (``log_start``; the partition's first record by default)."""
        self.committed[partition] = self.workload.records[partition][0].offset if log_start is None else log_start

    def deliver(self, records: list[Record], crash_points: CrashPoints | None = None) -> bool:
        """Invoke the archiver with the batch; commit offsets on success.

        Without faults the same warm "container" serves every delivery (its cached ledger state
        may be stale after other containers ran); a delivery with faults runs in a new one.
        """
        if not records:
            return True
        self.deliveries += 1
        if crash_points is None:
            if self._warm is None:
                self._warm = self.make_runtime(None)
            runtime = self._warm
        else:
            runtime = self.make_runtime(crash_points)
        archiver = Archiver(runtime)
        try:
            archiver.handle(event_of(records, self.workload.kind))
        except SimulatedCrash:
            self.crashes += 1
            return False
        except StagingConflictError:  # refused (e.g. an epoch started meanwhile): the mapping retries
            return False
        partition = records[0].partition
        self.committed[partition] = max(self.committed[partition], records[-1].offset + 1)
        return True

    def drain(self, size: int) -> None:
        """The ESM keeps retrying until every record has been delivered successfully."""
        for partition in self.workload.records:
            refused = 0
            while self.pending(partition):
                if not self.deliver(self.batch(partition, size)):
                    refused += 1  # refused once for a state that moved meanwhile, then archived
                    assert refused <= 3, "delivery without faults must succeed"


def assert_objects_describe_themselves(archive, config) -> None:
    """Every object holds exactly the offset range its key names and the count its metadata
    says, and the ledger recorded exactly these objects with these digests -- the SHA-256 of the
    bytes in the bucket, not only of what the metadata claims."""
    s3, bucket = archive.s3, archive.bucket
    keys = [  # archive objects only (manifests live under their own prefix)
        o["Key"]
        for prefix in ("raw/", "errors/")
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in page.get("Contents", [])
    ]
    assert keys
    runtime = archive.runtime(config)
    stream = config.streams[0]
    spec = RenderSpec.decode(StreamContext.build(stream, config.archive, archive.clock).spec)
    errors = RenderSpec(
        "jsonl", "gzip", 6, spec.topic, spec.key_encoding, spec.value_encoding, spec.header_encoding, source=spec.source
    )
    committed = {}
    hours_read: set[str] = set()
    for key in keys:
        obj = s3.get_object(Bucket=bucket, Key=key)
        body = obj["Body"].read()
        partition, first, last = positions_of_key(key)
        object_spec = spec_of_key(key, errors if key.startswith("errors/") else spec)
        records = list(format_of(object_spec).read(body, object_spec.context(partition, key)))
        offsets = [record.offset for record in records]
        assert (offsets[0], offsets[-1]) == (first, last), key
        assert offsets == sorted(set(offsets)), key
        assert int(obj["Metadata"][META_RECORDS]) == len(offsets), key
        hour = hour_of_key(key)
        if hour not in hours_read:  # one query per hour, not per object
            hours_read.add(hour)
            committed.update((item.key, item) for item in runtime.ledger.committed_objects("orders", hour))
        assert committed[key].sha256 == obj["Metadata"][META_SHA256] == hashlib.sha256(body).hexdigest(), key
        assert (committed[key].records, committed[key].size) == (len(offsets), len(body)), key
    assert sorted(committed) == sorted(keys)


def damage_first_segment(
    archive: Any, runtime: Runtime, partition: PartitionId = 0, hour: str = "2026-11-21T08"
) -> None:
    """Storage damage: flip a byte of the first segment of an OPEN buffer, so its frame's
    checksum no longer matches (the flush that reads it must quarantine, never upload)."""
    buffer = runtime.ledger.load("orders", partition).buffers[f"raw/{hour}"]
    segment = archive.staging_root / "orders" / f"p{partition}" / buffer.segments[0].name
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF
    segment.write_bytes(bytes(data))


def quarantined_partition(archive: Any) -> tuple[TidemarkConfig, Runtime]:
    """One partition whose only flush was quarantined: 60 records of one hour staged, the
    buffer's first segment damaged, then maintenance past max age seals it and quarantines it."""
    from tests.support.workload import make_orders

    config = small_config(max_records=10_000)
    workload = make_orders(partitions=1, per_partition=60, hours=1, seed=5)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert esm.deliver(esm.batch(0, 60))
    runtime = archive.runtime(config)
    hour = next(iter(runtime.ledger.load("orders", 0).buffers)).split("/", 1)[1]
    damage_first_segment(archive, runtime, 0, hour)
    archive.clock.advance(minutes=31)
    runtime.writer(config.streams[0], 0).maintain()
    return config, runtime


def staged_files(archive: Any) -> set[str]:
    """Names of every segment file left in the staging directory."""
    return {path.name for path in archive.staging_root.rglob("*.seg")}


def finish(archive: Any, config: TidemarkConfig, esm: EsmModel, batch: int = 40) -> None:
    """Redeliver to the end, then let max age and the grace period pass and run maintenance."""
    esm.drain(batch)
    archive.clock.advance(minutes=31)
    runtime = archive.runtime(config)
    for partition in esm.workload.records:
        runtime.writer(config.streams[0], partition).maintain()


def assert_exactly_once(archive: Any, config: TidemarkConfig, esm: EsmModel) -> None:
    """Every produced record exactly once, in its hour (or dead-lettered), value intact; and
    every object is what its key and the ledger say it is."""
    report = verify_archive(archive.s3, archive.bucket, "orders", esm.workload.expected, config=config.streams[0])
    assert report.summary() == {
        **report.summary(),
        "produced": len(esm.workload.expected),
        "lost": 0,
        "duplicated": 0,
        "unexpected": 0,
        "misfiled": 0,
        "corrupted": 0,
        "ok": True,
    }
    assert report.archived + report.dead_lettered == report.produced
    assert_objects_describe_themselves(archive, config)
