"""Fault injection: crash the archiver at every crash point of the protocol, recover, and check
the S3 archive record by record against what was produced: 0 lost, 0 duplicated."""

from __future__ import annotations

import pytest

from tests.support.harness import (
    PARTITIONED_FORMATS,
    EsmModel,
    RunOtherAt,
    assert_exactly_once,
    finish,
    small_config,
    staged_files,
)
from tests.support.workload import make_orders
from tidemark.config import parse_config
from tidemark.faults import (
    AFTER_SEAL,
    AFTER_UPLOAD,
    ALL_CRASH_POINTS,
    DURING_SEGMENT_WRITE,
    CrashAt,
)
from tidemark.sources import KAFKA, KINESIS
from tidemark.verify import verify_archive

BATCH = 40


def assert_staging_clean(archive) -> None:
    assert staged_files(archive) == set()


@pytest.mark.parametrize("point", ALL_CRASH_POINTS)
@pytest.mark.parametrize(
    ("layout", "nth"),
    [("jsonl", 1), ("jsonl", 3), ("parquet", 1), ("avro", 3), ("kinesis-jsonl", 2), ("kinesis-csv", 1)],
)
def test_crash_at_each_point_then_recover(archive, point, layout, nth):
    """Gzip JSON Lines, and Parquet and Avro objects under partition-by folders (Avro with Hive
    folders, and a header level that most records lack: `__missing__`); and a Kinesis stream
    (two shards, 56-digit sequence numbers with gaps) in JSON Lines and in partitioned CSV.
    Kafka workloads hold tombstones (null values: staging format 4) among their orders."""
    kind = KINESIS if layout.startswith("kinesis") else KAFKA
    if layout in ("jsonl", "kinesis-jsonl"):
        config, size = small_config(kind=kind), 260
    else:  # fewer records in smaller objects: the same crash points reached, in less time
        config, size = small_config(max_records=20, kind=kind, **PARTITIONED_FORMATS[layout]), 130
    tombstones = 0.05 if kind == KAFKA else 0.0  # Kinesis has none
    workload = make_orders(partitions=2, per_partition=size, hours=3, seed=nth, kind=kind, tombstone_share=tombstones)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    injector = CrashAt(point, nth)
    # First pass: deliver batches until the injector fires, exactly as a crashing Lambda would.
    for partition in workload.records:
        while esm.pending(partition) and not injector.fired:
            esm.deliver(esm.batch(partition, BATCH), injector)
    assert injector.fired, f"crash point {point} was never reached"
    assert esm.crashes == 1
    finish(archive, config, esm, BATCH)
    assert_exactly_once(archive, config, esm)
    assert_staging_clean(archive)


def test_torn_segment_is_never_read_and_is_collected(archive):
    config = small_config()
    workload = make_orders(partitions=1, per_partition=80, seed=11)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    batch = esm.batch(0, BATCH)
    assert not esm.deliver(batch, CrashAt(DURING_SEGMENT_WRITE))
    torn = list(archive.staging_root.rglob("*.seg"))
    assert len(torn) == 1
    data = torn[0].read_bytes()
    from tidemark.staging.frames import TornFrameError
    from tidemark.staging.segment import decode_segment

    with pytest.raises(TornFrameError):
        decode_segment(data)
    # The redelivery stages the same offsets in a new segment; the torn one is now provably
    # garbage (its first offset is at or below the staged offset) and the next run removes it.
    assert esm.deliver(batch)
    finish(archive, config, esm, BATCH)
    assert not torn[0].exists()
    assert_exactly_once(archive, config, esm)


@pytest.mark.parametrize("kind", [KAFKA, KINESIS])
def test_redelivered_and_overlapping_batches(archive, kind):
    config = small_config(kind=kind)
    workload = make_orders(partitions=2, per_partition=200, seed=5, kind=kind)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    for partition, records in workload.records.items():
        assert esm.deliver(records[0:50])
        assert esm.deliver(records[0:50])  # exact redelivery
        assert esm.deliver(records[30:90])  # overlaps the previous batch
        assert esm.deliver(records[10:20])  # entirely old (rebalance rewind)
        dup_inside = records[90:110] + records[95:105]  # duplicate offsets inside one batch
        assert esm.deliver(sorted(dup_inside, key=lambda r: r.offset))
        esm.committed[partition] = records[110].offset
    finish(archive, config, esm, BATCH)
    assert_exactly_once(archive, config, esm)


@pytest.mark.parametrize("kind", [KAFKA, KINESIS])
def test_duplicates_are_counted(archive, kind):
    from tests.support.events import event_of
    from tidemark.archiver import Archiver

    config = small_config(kind=kind)
    workload = make_orders(partitions=1, per_partition=30, seed=3, kind=kind)
    (records,) = workload.records.values()
    archiver = Archiver(archive.runtime(config))
    first = archiver.handle(event_of(records[:20], kind))["orders"]
    again = archiver.handle(event_of(records[10:30] + records[25:30], kind))["orders"]
    assert (first.records_in, first.staged, first.duplicates) == (20, 20, 0)
    assert (again.records_in, again.staged, again.duplicates) == (25, 10, 15)


@pytest.mark.parametrize("point", ALL_CRASH_POINTS)
@pytest.mark.parametrize("kind", [KAFKA, KINESIS])
def test_second_invocation_runs_inside_the_first(archive, point, kind):
    """Two invocations on one partition (a rebalance overlap): when A reaches ``point``, B runs a
    whole overlapping batch, then A carries on. The ledger's fence keeps each record once."""
    from tests.support.events import event_of
    from tidemark.archiver import Archiver

    config = small_config(max_records=60, kind=kind)
    workload = make_orders(partitions=1, per_partition=240, seed=9, kind=kind)
    ((partition, records),) = workload.records.items()

    def handle(runtime, batch):
        return Archiver(runtime).handle(event_of(batch, kind))

    hook = RunOtherAt(point, lambda: handle(archive.runtime(config), records[20:140]))
    handle(archive.runtime(config), records[0:20])
    archive.clock.advance(seconds=5)
    handle(archive.runtime(config, hook), records[0:100])
    assert hook.fired
    handle(archive.runtime(config), records[100:240])
    archive.clock.advance(minutes=31)
    archive.runtime(config).writer(config.streams[0], partition).maintain()
    report = verify_archive(archive.s3, archive.bucket, "orders", workload.expected)
    assert (report.lost, report.duplicated, report.misfiled, report.corrupted) == ([], [], [], [])
    assert report.produced == 240
    assert_staging_clean(archive)


@pytest.mark.parametrize(
    "fmt",
    [
        {"type": "parquet", "compression": "snappy"},
        {"type": "avro", "compression": "deflate"},
        {"type": "bytes", "compression": "gzip"},
        {"type": "text", "compression": "zstd"},
    ],
    ids=lambda fmt: fmt["type"],
)
def test_a_kinesis_stream_in_every_other_format_recovers_exactly_once(archive, fmt):
    """The formats the crash matrix above runs for Kafka only: a Kinesis stream crashes between
    upload and commit (the flush resumed by another run re-renders the object) and after a seal,
    and the archive is checked from S3."""
    data = small_config(max_records=25, kind=KINESIS).model_dump(mode="json")
    data["streams"][0].update(format=fmt, aggregations=[])  # text keeps no positions to aggregate by
    config = parse_config(data)
    workload = make_orders(partitions=2, per_partition=90, hours=2, seed=4, kind=KINESIS)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    faults = [CrashAt(AFTER_UPLOAD), CrashAt(AFTER_SEAL)]  # one per shard, armed until it fires
    for partition in workload.records:
        while esm.pending(partition):
            fault = faults[-1] if faults else None
            esm.deliver(esm.batch(partition, BATCH), fault)
            if fault is not None and fault.fired:
                faults.pop()
    assert esm.crashes == 2
    finish(archive, config, esm, BATCH)
    if fmt["type"] == "text":  # values only: the checker places them by value, hour and folder
        report = verify_archive(archive.s3, archive.bucket, "orders", workload.expected, config=config.streams[0])
        assert report.ok and report.archived + report.dead_lettered == report.produced, report.summary()
    else:
        assert_exactly_once(archive, config, esm)
    assert_staging_clean(archive)


def test_the_ledger_names_segments_only_once_they_are_durable(archive, monkeypatch):
    """The accept's ledger item is built while the segments' fsyncs are in flight; it is sent only
    after every one of them (files and directory) has returned. Each concurrent fsync returns only
    once the item is built (an event, not a sleep): built after them, it would never be."""
    import os
    import threading

    from tidemark.ledger.dynamodb import DynamoDBLedger

    events: list[str] = []
    lock = threading.Lock()
    prepared = threading.Event()
    real_fsync, real_prepare, real_put = os.fsync, DynamoDBLedger._prepare_state, DynamoDBLedger._put_state

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if threading.current_thread() is threading.main_thread():
            return  # a new partition directory's parent, before any segment: not the batch's
        overlapped = prepared.wait(timeout=30)
        with lock:
            events.append("fsync" if overlapped else "fsync-before-prepare")

    def prepare(self, state):
        item = real_prepare(self, state)
        prepared.set()
        return item

    def put(self, state, expected_version, payload=None):
        with lock:
            events.append("put" if payload is not None else "put-unprepared")
        return real_put(self, state, expected_version, payload)

    monkeypatch.setattr("tidemark.staging.store.os.fsync", fsync)
    monkeypatch.setattr(DynamoDBLedger, "_prepare_state", prepare)
    monkeypatch.setattr(DynamoDBLedger, "_put_state", put)
    config = small_config(max_records=10_000)
    workload = make_orders(partitions=1, per_partition=40, seed=7)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert esm.deliver(esm.batch(0, 40))
    assert events.count("put") == 1 and "put-unprepared" not in events and "fsync-before-prepare" not in events
    assert events.index("put") == len(events) - 1 and events.count("fsync") >= 2  # a file and its directory
    monkeypatch.undo()
    finish(archive, config, esm, BATCH)
    assert_exactly_once(archive, config, esm)
