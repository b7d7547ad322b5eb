"""Protocol edges the end-to-end fault-injection suite does not reach on its own (found by
mutation testing): the loser's immediate cleanup, a sweeper inside a writer's window, storage
errors failing the invocation, an S3 outage with sealed flushes waiting, byte-identical
re-uploads, and a corrupted accepted segment."""

from __future__ import annotations

import gzip
import hashlib
import time
from types import SimpleNamespace

import pytest
from botocore.exceptions import EndpointConnectionError

from tests.support.events import msk_event
from tests.support.harness import (
    EsmModel,
    RunOtherAt,
    assert_exactly_once,
    assert_objects_describe_themselves,
    finish,
    small_config,
    staged_files,
)
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.faults import AFTER_SEAL, AFTER_SEGMENT_WRITE, AFTER_UPLOAD, BEFORE_UPLOAD, CrashAt
from tidemark.verify import verify_archive


def referenced(runtime, partition: int = 0) -> set[str]:
    return runtime.ledger.load("orders", partition).referenced_segments()


# -- invariant 2: a loser's segment is deleted by the loser, at once -------------------------


def test_loser_deletes_its_segment_before_returning(archive):
    config = small_config(max_records=60)
    workload = make_orders(partitions=1, per_partition=240, seed=9)
    records = workload.records[0]
    Archiver(archive.runtime(config)).handle(msk_event(records[0:20]))
    other = RunOtherAt(
        AFTER_SEGMENT_WRITE, lambda: Archiver(archive.runtime(config)).handle(msk_event(records[20:140]))
    )
    runtime = archive.runtime(config, other)
    outcome = Archiver(runtime).handle(msk_event(records[0:100]))["orders"]
    assert other.fired
    assert outcome.conflicts >= 1 and outcome.staged == 0
    # No later run has collected anything yet: the loser itself removed its segment.
    assert staged_files(archive) == referenced(runtime)


# -- invariant 2: garbage collection never takes a running writer's segment -----------------


def test_sweeper_inside_a_writer_leaves_its_unaccepted_segment(archive):
    config = small_config(max_records=1000)
    workload = make_orders(partitions=1, per_partition=120, hours=1, seed=4)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert esm.deliver(esm.batch(0, 20))
    archive.clock.advance(minutes=1)
    # The sweeper runs while the writer's next segment is written but not yet accepted, and
    # finds nothing due: the writer's accept then succeeds against an unchanged ledger.
    sweep = RunOtherAt(AFTER_SEGMENT_WRITE, lambda: archive.runtime(config).writer(config.streams[0], 0).maintain())
    assert esm.deliver(esm.batch(0, 40), sweep)
    assert sweep.fired
    runtime = archive.runtime(config)
    assert referenced(runtime) <= staged_files(archive)  # every accepted segment is still there
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)
    assert staged_files(archive) == set()


# -- invariant 6: a storage error fails the whole invocation (offsets do not commit) --------


def test_ledger_outage_fails_the_invocation_then_redelivery_is_exactly_once(archive):
    config = small_config()
    workload = make_orders(partitions=2, per_partition=80, seed=12)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    down = {"on": False}

    def ledger_down(params, **_kwargs):
        if down["on"] and params["Item"]["pk"]["S"] == "PART#orders#1":  # partition 0 goes through
            raise EndpointConnectionError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")

    archive.dynamodb.meta.events.register("provide-client-params.dynamodb.PutItem", ledger_down)
    event = msk_event(workload.records[0][:30] + workload.records[1][:30])
    down["on"] = True
    with pytest.raises(EndpointConnectionError):
        Archiver(archive.runtime(config)).handle(event)
    down["on"] = False
    Archiver(archive.runtime(config)).handle(event)  # the ESM redelivers the whole batch
    for partition in (0, 1):
        esm.committed[partition] = 30
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)
    assert staged_files(archive) == set()


# -- invariant 4: a sealed flush waiting out an S3 outage stays exactly as sealed -----------


def test_sealed_flush_is_frozen_while_s3_is_down(archive):
    config = small_config(max_records=50)
    workload = make_orders(partitions=1, per_partition=300, hours=1, seed=31)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    down = {"on": True}

    def s3_down(**_kwargs):
        if down["on"]:
            raise EndpointConnectionError(endpoint_url="https://s3.us-east-1.amazonaws.com")

    for operation in ("PutObject", "CreateMultipartUpload"):
        archive.s3.meta.events.register(f"before-call.s3.{operation}", s3_down)
    runtime = archive.runtime(config)
    outcome = Archiver(runtime).handle(msk_event(esm.batch(0, 60)))["orders"]
    assert outcome.flush_errors >= 1  # the records are staged and accepted; the upload waits
    esm.committed[0] += 60
    waiting = dict(runtime.ledger.load("orders", 0).sealed)
    assert waiting
    for _round in range(3):  # more batches arrive while S3 is still down
        assert esm.deliver(esm.batch(0, 40))
        state = runtime.ledger.load("orders", 0)
        for flush_id, flush in waiting.items():
            assert state.sealed[flush_id] == flush  # same segment set, offsets and key
        assert state.referenced_segments() <= staged_files(archive)
    down["on"] = False
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)
    assert_objects_describe_themselves(archive, config)
    assert staged_files(archive) == set()


# -- invariant 4: what is uploaded was sealed first, so a crash cannot leave a stray object --


@pytest.mark.parametrize("point", [AFTER_SEAL, BEFORE_UPLOAD, AFTER_UPLOAD])
def test_crash_around_upload_then_a_larger_redelivery(archive, point):
    config = small_config(max_records=50)
    workload = make_orders(partitions=1, per_partition=200, hours=1, seed=17)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert not esm.deliver(esm.batch(0, 60), CrashAt(point))
    # The ESM retries from the same offset, but more records have arrived: a bigger batch.
    assert esm.deliver(esm.batch(0, 100))
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)
    assert_objects_describe_themselves(archive, config)
    assert staged_files(archive) == set()


# -- invariant 5: re-uploading after a crash writes the identical object --------------------


def test_reupload_after_crash_is_byte_identical(archive, monkeypatch):
    config = small_config(max_records=50)
    workload = make_orders(partitions=1, per_partition=60, hours=1, seed=2)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert not esm.deliver(esm.batch(0, 60), CrashAt(AFTER_UPLOAD))
    (key,) = [o["Key"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket)["Contents"]]
    first = archive.s3.get_object(Bucket=archive.bucket, Key=key)["Body"].read()
    # Let an hour pass for anything in the gzip module that reads the wall clock (its mtime):
    # a render that embedded it would now produce different bytes.
    later = time.time() + 3600
    monkeypatch.setattr(gzip, "time", SimpleNamespace(time=lambda: later))
    outcome = Archiver(archive.runtime(config)).handle(msk_event(esm.batch(0, 60)))["orders"]
    assert [(flush.key, flush.resumed) for flush in outcome.flushes] == [(key, True)]
    again = archive.s3.get_object(Bucket=archive.bucket, Key=key)["Body"].read()
    assert again == first
    hour = "{}-{}-{}T{}".format(*key.split("/")[2:6])
    (committed,) = [c for c in archive.runtime(config).ledger.committed_objects("orders", hour) if c.key == key]
    assert committed.sha256 == hashlib.sha256(first).hexdigest()


# -- invariant 3: an accepted segment whose bytes changed is never archived -----------------


def test_corrupted_accepted_segment_is_quarantined_never_archived(archive):
    """A damaged accepted segment: its flush is set aside with its offsets and files kept, nothing
    of it reaches S3, and the partition's other buffers and later batches keep flowing."""
    config = small_config(max_records=1000)
    workload = make_orders(partitions=1, per_partition=60, hours=1, seed=5)
    records = workload.records[0]
    runtime = archive.runtime(config)
    Archiver(runtime).handle(msk_event(records[:30]))
    segment = max(archive.staging_root.rglob("raw_*.seg"), key=lambda path: path.stat().st_size)
    y, m, d, h = segment.name.split("_")[1].replace("T", "-").split("-")
    data = bytearray(segment.read_bytes())
    at = data.index(b'"order_id"') + 3  # flip one byte inside a record value, length unchanged
    data[at] ^= 0x01
    segment.write_bytes(bytes(data))
    archive.clock.advance(minutes=16)

    outcome = runtime.writer(config.streams[0], 0).maintain()

    state = runtime.ledger.load("orders", 0)
    (held,) = state.quarantined.values()
    assert segment.name in {ref.name for ref in held.flush.buffer.segments}
    assert "checksum mismatch" in held.error and segment.name in held.error
    assert outcome.quarantined == 1 and not state.sealed
    folder = f"raw/orders/{y}/{m}/{d}/{h}/"
    assert "Contents" not in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix=folder)
    # The damaged files are kept for the operator, through any amount of garbage collection.
    archive.clock.advance(minutes=60)
    runtime.writer(config.streams[0], 0).maintain()
    assert segment.exists()
    assert {ref.name for ref in held.flush.buffer.segments} <= staged_files(archive)
    # Later records of the partition are still archived, exactly once.
    Archiver(runtime).handle(msk_event(records[30:]))
    archive.clock.advance(minutes=16)
    runtime.writer(config.streams[0], 0).maintain()
    buffer = held.flush.buffer
    quarantined = {
        item.offset
        for item in workload.expected
        if buffer.first <= item.offset <= buffer.last and item.hour == buffer.key.hour
    }
    assert len(quarantined) == buffer.records
    expected = [item for item in workload.expected if item.offset not in quarantined]
    report = verify_archive(archive.s3, archive.bucket, "orders", expected)
    assert (report.lost, report.duplicated, report.unexpected, report.misfiled) == ([], [], [], [])
    assert report.produced == 60 - len(quarantined) > 0
