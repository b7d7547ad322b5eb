"""Positions that go backwards: a topic recreated, a topic changed, a cluster migrated.

Each scenario ends with every produced record archived exactly once (in the epoch the operator
named), and no object ever overwritten: the bucket is versioned, so an overwrite would leave a
second version behind, and every object's bytes are checked against the ledger's record of it.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from typing import Any

import orjson
import pytest
import zstandard

from tests.support.events import kinesis_event, load_event, msk_event
from tests.support.harness import EsmModel, RunOtherAt, assert_objects_describe_themselves, small_config
from tests.support.workload import BASE_MS, HOUR_MS, KINESIS, Workload, make_orders
from tidemark.archiver import Archiver, PositionResetsError
from tidemark.config import TidemarkConfig, parse_config
from tidemark.exceptions import StagingConflictError
from tidemark.faults import AFTER_SEGMENT_WRITE, AFTER_UPLOAD, ALL_CRASH_POINTS, CrashAt, SimulatedCrash
from tidemark.formats.compression import decompress
from tidemark.ledger.dynamodb import state_pk
from tidemark.objects.writer import META_SHA256
from tidemark.records.esm import EventSource, build_event
from tidemark.records.model import Record
from tidemark.resets import BELOW_WINDOW, BYTES_DIFFER, SOURCE_CHANGED
from tidemark.verify import ExpectedRecord, verify_archive

BATCH = 25
CLUSTER_B = "arn:aws:kafka:us-east-1:123456789012:cluster/tidemark-dr/0a1b2c3d-1111-2222-3333-444455556666-2"


def versioned(archive: Any) -> Any:
    archive.s3.put_bucket_versioning(Bucket=archive.bucket, VersioningConfiguration={"Status": "Enabled"})
    return archive


def deliver_all(archiver: Archiver, records: list[Record], event: Any = msk_event, size: int = BATCH) -> None:
    for start in range(0, len(records), size):
        archiver.handle(event(records[start : start + size]))


def drain(archive: Any, config: TidemarkConfig, partitions: range = range(1)) -> None:
    archive.clock.advance(minutes=31)
    runtime = archive.runtime(config)
    for partition in partitions:
        runtime.writer(config.streams[0], partition).drain()


def in_epoch(workload: Workload, epoch: int, offsets: range | None = None) -> list[ExpectedRecord]:
    return [replace(item, epoch=epoch) for item in workload.expected if offsets is None or item.offset in offsets]


def assert_never_overwritten_and_described(archive: Any, config: TidemarkConfig) -> None:
    versions = archive.s3.list_object_versions(Bucket=archive.bucket).get("Versions", [])
    keys = [version["Key"] for version in versions]
    assert keys and len(keys) == len(set(keys)), "an object was written twice"
    assert_objects_describe_themselves(archive, config)


def assert_exactly(archive: Any, expected: list[ExpectedRecord]) -> None:
    report = verify_archive(archive.s3, archive.bucket, "orders", expected)
    assert (report.lost, report.duplicated, report.unexpected, report.misfiled, report.corrupted) == ([],) * 5
    assert report.produced == len(expected)


def refused_kind(archiver: Archiver, event: Any) -> str:
    with pytest.raises(PositionResetsError) as refused:
        archiver.handle(event)
    assert "tidemark epoch start" in str(refused.value)
    return refused.value.kind


def test_a_recreated_topic_is_refused_then_archived_in_a_new_epoch(archive):
    versioned(archive)
    config = small_config()
    old = make_orders(partitions=1, per_partition=200, seed=1)
    new = make_orders(partitions=1, per_partition=120, seed=2, base_ms=BASE_MS + 5 * HOUR_MS)  # offsets 0.. again
    archiver = Archiver(archive.runtime(config))
    deliver_all(archiver, old.records[0], size=5)  # 40 accepts: offset 0 is older than the window's 32
    staged = archive.runtime(config).ledger.load("orders", 0)

    # The mapping finds no committed offset for the new topic and starts at 0: far below the
    # window, but the epoch's marks (each accept's ends) say offset 0 held another record.
    assert refused_kind(archiver, msk_event(new.records[0][:BATCH])) == BYTES_DIFFER
    # A batch down there with no marked record and no fingerprint cannot be told: refused too
    # (the accepts of 5 marked offsets 0 and 4, not 1..3).
    assert refused_kind(archiver, msk_event(new.records[0][1:4])) == BELOW_WINDOW
    after = archive.runtime(config).ledger.load("orders", 0)
    assert (after.staged_offset, after.epoch) == (staged.staged_offset, 0)  # nothing dropped, nothing staged

    record = archive.runtime(config).writer(config.streams[0], 0).start_epoch(0, reason="topic recreated")
    assert (record.epoch, record.first_offset, record.previous_staged_offset) == (1, 0, 199)
    deliver_all(archiver, new.records[0])
    drain(archive, config)

    assert_exactly(archive, in_epoch(old, 0) + in_epoch(new, 1))
    assert_never_overwritten_and_described(archive, config)
    keys = [o["Key"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"]]
    assert any("+0+e1+" in key for key in keys) and any("+0+0000" in key for key in keys)
    assert [start.epoch for start in archive.runtime(config).ledger.epochs("orders", 0)] == [1]


def test_a_recreated_topic_inside_the_redelivery_window_is_told_by_its_bytes(archive):
    config = small_config()
    old = make_orders(partitions=1, per_partition=60, seed=3)
    new = make_orders(partitions=1, per_partition=60, seed=4, base_ms=BASE_MS + HOUR_MS)
    archiver = Archiver(archive.runtime(config))
    archiver.handle(msk_event(old.records[0][:30]))
    # A true redelivery of the same records is dropped as duplicates ...
    assert archiver.handle(msk_event(old.records[0][:30]))["orders"].duplicates == 30
    # ... the same offsets with other bytes are not.
    assert refused_kind(archiver, msk_event(new.records[0][:30])) == BYTES_DIFFER


def test_a_changed_topic_is_refused_until_an_epoch_adopts_it(archive):
    versioned(archive)
    config = small_config()
    old = make_orders(partitions=1, per_partition=100, seed=5)
    deliver_all(Archiver(archive.runtime(config)), old.records[0][:90])  # 10 records never archived

    data = config.model_dump(mode="json")
    data["streams"][0]["source"]["topic"] = "orders-v2"
    moved = parse_config(data)
    new = make_orders(partitions=1, per_partition=80, seed=6, topic="orders-v2", base_ms=BASE_MS + 2 * HOUR_MS)
    archiver = Archiver(archive.runtime(moved))
    assert refused_kind(archiver, msk_event(new.records[0][:BATCH])) == SOURCE_CHANGED

    archive.runtime(moved).writer(moved.streams[0], 0).start_epoch(0, reason="stream re-pointed at orders-v2")
    deliver_all(archiver, new.records[0])
    drain(archive, moved)
    assert_exactly(archive, in_epoch(old, 0, range(90)) + in_epoch(new, 1))
    assert_never_overwritten_and_described(archive, moved)
    state = archive.runtime(moved).ledger.load("orders", 0)
    assert state.source.endswith("/orders-v2") and state.epoch == 1


def test_a_cluster_migration_resumes_at_the_translated_offset_without_loss_or_duplicates(archive):
    versioned(archive)
    config = small_config()
    old = make_orders(partitions=1, per_partition=200, seed=7)
    archiver = Archiver(archive.runtime(config))
    deliver_all(archiver, old.records[0][:150])  # offsets 0..149 archived on cluster A

    # MirrorMaker copied the whole partition to cluster B, at offsets shifted by 1000.
    copies = [r._replace(offset=r.offset + 1000) for r in old.records[0]]
    template = load_event("msk-orders")
    on_b = EventSource(template["bootstrapServers"], "aws:kafka", CLUSTER_B)

    def event_b(records: list[Record]) -> dict[str, Any]:
        return build_event(records, on_b)

    assert refused_kind(archiver, event_b(copies[:BATCH])) == SOURCE_CHANGED
    # The operator names the first record the archive does not hold: old offset 150 -> 1150.
    archive.runtime(config).writer(config.streams[0], 0).start_epoch(
        1150, source="tidemark-dr/0a1b2c3d-1111-2222-3333-444455556666-2/orders", reason="migrated to tidemark-dr"
    )
    outcome = archiver.handle(event_b(copies[:BATCH]))["orders"]  # the mapping on B starts at its earliest offset
    assert (outcome.staged, outcome.duplicates) == (0, BATCH)
    deliver_all(archiver, copies, event_b)
    # A straggler from cluster A is still refused: the epoch's source is B now.
    assert refused_kind(archiver, msk_event(old.records[0][150:160])) == SOURCE_CHANGED
    drain(archive, config)

    moved = [replace(item, offset=item.offset + 1000, epoch=1) for item in old.expected if item.offset >= 150]
    assert_exactly(archive, in_epoch(old, 0, range(150)) + moved)
    assert_never_overwritten_and_described(archive, config)


def test_other_partitions_of_a_refused_event_are_archived(archive):
    config = small_config()
    old = make_orders(partitions=2, per_partition=60, seed=8)
    archiver = Archiver(archive.runtime(config))
    archiver.handle(msk_event(old.records[0][:50] + old.records[1][:20]))
    new = make_orders(partitions=1, per_partition=40, seed=9, base_ms=BASE_MS + HOUR_MS)
    with pytest.raises(PositionResetsError) as refused:
        archiver.handle(msk_event(new.records[0][:10] + old.records[1][20:40]))
    assert [(error.partition, error.kind) for error in refused.value.refused] == [(0, BYTES_DIFFER)]
    assert refused.value.outcomes["orders"].staged == 20
    assert archive.runtime(config).ledger.load("orders", 1).staged_offset == 39


# -- conditional uploads: the repair that used to overwrite ------------------------------------


def delete_state(archive: Any) -> None:
    archive.dynamodb.delete_item(
        TableName=archive.table, Key={"pk": {"S": state_pk("orders", 0)}, "sk": {"S": "STATE"}}
    )


def test_a_deleted_state_item_never_overwrites_archived_objects(archive, caplog):
    versioned(archive)
    config = small_config(max_records=30)
    old = make_orders(partitions=1, per_partition=60, seed=10)
    new = make_orders(partitions=1, per_partition=60, seed=11, base_ms=BASE_MS)  # same hours, same offsets
    archiver = Archiver(archive.runtime(config))
    deliver_all(archiver, old.records[0])
    drain(archive, config)
    before = {o["Key"]: o["ETag"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket)["Contents"]}

    delete_state(archive)  # the "natural repair": it forgets every offset of the old topic
    caplog.set_level(logging.CRITICAL, logger="tidemark")
    fresh = Archiver(archive.runtime(config))
    for start in range(0, 60, 30):
        fresh.handle(msk_event(new.records[0][start : start + 30]))
    drain(archive, config)

    after = {o["Key"]: o["ETag"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket)["Contents"]}
    assert {key: after[key] for key in before} == before  # every old object untouched
    versions = archive.s3.list_object_versions(Bucket=archive.bucket)["Versions"]
    assert len(versions) == len({v["Key"] for v in versions})
    state = archive.runtime(config).ledger.load("orders", 0)
    assert state.quarantined and not state.sealed  # refused loudly, set aside; the partition flows
    assert any("quarantined" in r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL)


def test_the_same_records_after_a_deleted_state_item_are_recognised_not_doubled(archive):
    versioned(archive)
    config = small_config(max_records=30)
    workload = make_orders(partitions=1, per_partition=60, seed=12)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    esm.drain(30)
    drain(archive, config)
    delete_state(archive)
    esm.committed[0] = 0  # a redelivery of everything, against an empty ledger
    esm._warm = None
    esm.drain(30)
    drain(archive, config)
    assert_exactly(archive, workload.expected)
    assert_never_overwritten_and_described(archive, config)
    assert not archive.runtime(config).ledger.load("orders", 0).quarantined


def test_an_object_rendered_differently_with_the_same_records_is_adopted(archive):
    """An upgrade can change a flush's bytes (a library writing its version into the file): the
    object already in S3 holds the same records and is adopted, not overwritten nor refused."""
    config = small_config(max_records=30)
    workload = make_orders(partitions=1, per_partition=30, hours=1, late_share=0, bad_share=0, seed=13)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert esm.deliver(workload.records[0])
    with pytest.raises(SimulatedCrash):  # the first object is uploaded, never committed
        archive.runtime(config, CrashAt(AFTER_UPLOAD)).writer(config.streams[0], 0).drain()
    [listed] = archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"]
    key = listed["Key"]
    head = archive.s3.head_object(Bucket=archive.bucket, Key=key)
    lines = decompress(archive.s3.get_object(Bucket=archive.bucket, Key=key)["Body"].read(), key)
    other = zstandard.ZstdCompressor(level=19).compress(lines)  # "another version" of the renderer

    metadata = {**head["Metadata"], META_SHA256: hashlib.sha256(other).hexdigest()}
    archive.s3.put_object(Bucket=archive.bucket, Key=key, Body=other, Metadata=metadata)

    drain(archive, config)
    assert archive.s3.get_object(Bucket=archive.bucket, Key=key)["Body"].read() == other
    assert_exactly(archive, workload.expected)
    assert_objects_describe_themselves(archive, config)  # the ledger recorded the adopted bytes
    offsets = [orjson.loads(line)["offset"] for line in lines.splitlines()]
    assert offsets == sorted(offsets) and offsets


@pytest.mark.parametrize("point", ALL_CRASH_POINTS)
def test_a_crash_in_a_new_epoch_is_recovered(archive, point):
    """The fault-injection suite's crash points, in epoch 1 right after the reset, with the old
    epoch's sealed buffers still waiting to be uploaded under their old keys."""
    versioned(archive)
    config = small_config(max_records=12)
    old = make_orders(partitions=1, per_partition=50, seed=14)
    new = make_orders(partitions=1, per_partition=80, seed=15, base_ms=BASE_MS + HOUR_MS)
    deliver_all(Archiver(archive.runtime(config)), old.records[0])  # some buffers still OPEN
    archive.runtime(config).writer(config.streams[0], 0).start_epoch(0, reason="topic recreated")
    esm = EsmModel(new, lambda crash: archive.runtime(config, crash))
    injector = CrashAt(point)
    while esm.pending(0) and not injector.fired:
        esm.deliver(esm.batch(0, 10), injector)
    assert injector.fired and esm.crashes == 1, f"crash point {point} was never reached"
    esm.drain(BATCH)
    archive.clock.advance(minutes=31)
    archive.runtime(config).writer(config.streams[0], 0).maintain()
    assert_exactly(archive, in_epoch(old, 0) + in_epoch(new, 1))
    assert_never_overwritten_and_described(archive, config)
    assert not list(archive.staging_root.rglob("*.seg"))


# -- expired consumer-group offsets: a redelivery from the start of the retained log --------------


def test_expired_offsets_redeliver_the_retained_log_and_it_settles_without_an_operator(archive):
    versioned(archive)
    config = small_config()
    workload = make_orders(partitions=1, per_partition=500, seed=16)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    for _ in range(80):  # 400 records in batches of 5: the fingerprint window keeps the last 32 accepts
        assert esm.deliver(esm.batch(0, 5))
    staged = archive.runtime(config).ledger.load("orders", 0)
    assert staged.staged_offset == 399 and staged.fingerprints[0][0] == 240

    # Retention deleted offsets 0..99; 100 records were produced while the group sat empty.
    esm.expire(0, log_start=100)
    outcome = Archiver(archive.runtime(config)).handle(msk_event(esm.batch(0, BATCH)))["orders"]
    assert (outcome.staged, outcome.duplicates) == (0, BATCH)  # far below the window: a redelivery
    esm.committed[0] = 100 + BATCH
    esm.drain(BATCH)
    drain(archive, config)

    assert_exactly(archive, workload.expected)
    assert_never_overwritten_and_described(archive, config)
    after = archive.runtime(config).ledger.load("orders", 0)
    assert (after.epoch, after.staged_offset) == (0, 499)


def test_an_expiry_in_a_later_epoch_is_judged_by_that_epochs_marks(archive):
    """Marks are kept per epoch: after a recreated topic's epoch 1, the old topic's marks at the
    same offsets say nothing about the new log's records."""
    versioned(archive)
    config = small_config()
    old = make_orders(partitions=1, per_partition=200, seed=17)
    new = make_orders(partitions=1, per_partition=300, seed=18, base_ms=BASE_MS + 5 * HOUR_MS)
    deliver_all(Archiver(archive.runtime(config)), old.records[0], size=5)
    archive.runtime(config).writer(config.streams[0], 0).start_epoch(0, reason="topic recreated")
    esm = EsmModel(new, lambda crash: archive.runtime(config, crash))
    for _ in range(50):
        assert esm.deliver(esm.batch(0, 5))
    esm.expire(0)
    esm.drain(BATCH)
    drain(archive, config)
    assert_exactly(archive, in_epoch(old, 0) + in_epoch(new, 1))
    assert_never_overwritten_and_described(archive, config)


def test_a_writer_that_loses_its_accept_to_another_log_is_refused_not_dropped(archive):
    """Two invocations at once on one partition, each with another log's records at the same new
    offsets (a topic recreated while an old delivery was still running). The one that loses its
    accept must judge its batch against the winner's state again: its records at or below the
    winner's staged offset differ from what the winner archived there, so they are refused
    (bytes_differ), never dropped as duplicates."""
    config = small_config(max_records=10_000)
    base = make_orders(partitions=1, per_partition=100, seed=1)
    Archiver(archive.runtime(config)).handle(msk_event(base.records[0]))  # offsets 0..99, one log
    ours = make_orders(partitions=1, per_partition=150, seed=7).records[0][100:140]  # offsets 100..139
    theirs = make_orders(partitions=1, per_partition=150, seed=8).records[0][100:140]  # the same offsets, other bytes
    # This invocation reads the state (staged 99), writes its segments -- and meanwhile the other
    # one accepts its records at 100..139.
    other = RunOtherAt(AFTER_SEGMENT_WRITE, lambda: Archiver(archive.runtime(config)).handle(msk_event(theirs)))
    with pytest.raises(PositionResetsError) as refused:
        Archiver(archive.runtime(config, other)).handle(msk_event(ours))
    assert other.fired
    assert refused.value.refused[0].kind == BYTES_DIFFER
    state = archive.runtime(config).ledger.load("orders", 0)
    assert state.staged_offset == 139  # theirs, accepted; ours neither staged nor dropped


@pytest.mark.parametrize("kind", ["kafka", KINESIS])
def test_a_warm_container_never_drops_a_new_epochs_records_as_duplicates(archive, kind):
    """An epoch started at or below the staged offset, on the same log (the operator re-archives
    from offset 50): a warm container whose cached state predates the epoch gets records 50.. again.
    Failing first: against the cached staged offset (99) they were all "duplicates", dropped with
    no ledger read (``records_in 10, duplicates 10, staged 0``) while the stored state waited in
    epoch 1 at 49 -- the group committed past records the new epoch never held."""
    config = small_config(kind=kind)
    orders = make_orders(partitions=1, per_partition=100, seed=11, kind=kind)
    [partition] = orders.records
    records = orders.records[partition]
    event = kinesis_event if kind == KINESIS else msk_event
    archiver = Archiver(archive.runtime(config))  # the warm container: its runtime caches the state
    deliver_all(archiver, records, event)

    operator = archive.runtime(config).writer(config.streams[0], partition)
    started = operator.start_epoch(records[50].offset, reason="re-archive from 50")
    assert started.previous_staged_offset == records[-1].offset

    outcome = archiver.handle(event(records[50:60]))["orders"]
    assert (outcome.staged, outcome.duplicates) == (10, 0)
    state = archive.runtime(config).ledger.load("orders", partition)
    assert (state.epoch, state.staged_offset) == (1, records[59].offset)
    # A redelivery in the new epoch is a duplicate again, confirmed or not.
    assert archiver.handle(event(records[50:60]))["orders"].duplicates == 10


@pytest.mark.parametrize("kind", ["kafka", KINESIS])
def test_a_warm_container_refuses_a_batch_straddling_its_stale_position_then_archives_it(archive, kind):
    """The same with a batch only partly below the cached staged offset: its new part's accept
    conflicts with the epoch start, the batch is refused whole (the mapping redelivers it) and,
    judged on the stored state, archived whole in the new epoch."""
    config = small_config(kind=kind)
    orders = make_orders(partitions=1, per_partition=100, seed=12, kind=kind)
    [partition] = orders.records
    records = orders.records[partition]
    event = kinesis_event if kind == KINESIS else msk_event
    archiver = Archiver(archive.runtime(config))
    deliver_all(archiver, records[:60], event)
    archive.runtime(config).writer(config.streams[0], partition).start_epoch(records[50].offset, reason="again")

    with pytest.raises(StagingConflictError, match="epoch changed"):
        archiver.handle(event(records[55:70]))
    outcome = archiver.handle(event(records[55:70]))["orders"]  # the mapping's retry
    assert (outcome.staged, outcome.duplicates) == (15, 0)
    state = archive.runtime(config).ledger.load("orders", partition)
    assert (state.epoch, state.staged_offset) == (1, records[69].offset)
