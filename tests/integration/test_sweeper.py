"""The sweeper's steps against moto server and a staging directory: idle flushes, orphans and
their grace period, directory cleanup, reconciliation findings, hour completeness."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime

import orjson
import pytest

from tests.support.events import msk_event
from tests.support.harness import damage_first_segment, small_config, small_config_data, staged_files
from tests.support.legacy_segments import encode_frame
from tests.support.workload import BASE_MS, HOUR_MS, batches, make_orders
from tidemark.archiver import Archiver
from tidemark.buffers import BufferKey
from tidemark.clock import ManualClock
from tidemark.config import parse_config
from tidemark.staging.frames import RAW
from tidemark.sweeper.completeness import CompletenessTracker, manifest_key
from tidemark.sweeper.discovery import discover_all
from tidemark.sweeper.reconcile import Reconciler
from tidemark.sweeper.sweep import sweep_partition
from tidemark.verify import verify_archive


def archive_workload(archive, config, batch=30, **workload):
    runtime = archive.runtime(config)
    orders = make_orders(**workload)
    for records in orders.records.values():
        for chunk in batches(records, batch):
            Archiver(runtime).handle(msk_event(chunk))
    return runtime, orders


def test_an_idle_buffer_is_flushed_after_max_age_with_no_new_records(archive):
    config = small_config(max_records=10_000)  # nothing rotates by size
    runtime, orders = archive_workload(archive, config, partitions=2, per_partition=40, hours=1)
    assert [sweep_partition(runtime, "orders", p).flushed for p in (0, 1)] == [{}, {}]  # not old enough

    archive.clock.advance(minutes=15)
    outcomes = [sweep_partition(runtime, "orders", p) for p in (0, 1)]

    assert all(set(outcome.flushed) == {"max_age"} for outcome in outcomes)
    report = verify_archive(archive.s3, archive.bucket, "orders", orders.expected)
    assert report.ok and report.archived + report.dead_lettered == 80, report.summary()
    assert all(outcome.directory_removed for outcome in outcomes)  # nothing left: directories gone
    assert not (archive.staging_root / "orders").exists() or not any((archive.staging_root / "orders").iterdir())


def write_orphan(runtime, partition: int, offset: int, created_ms: int) -> str:
    frame = encode_frame(RAW, offset, created_ms, created_ms, None, b"{}", ())
    ref = runtime.staging.write(
        "orders", partition, BufferKey("raw", "2026-11-21T08"), [frame], offset, offset, created_ms
    )
    return ref.name


def test_an_orphan_segment_is_removed_only_after_the_grace_period(archive):
    config = small_config()
    runtime, _orders = archive_workload(archive, config, partitions=1, per_partition=20, hours=1)
    archive.clock.advance(minutes=16)
    sweep_partition(runtime, "orders", 0)  # flushes everything: the partition is idle
    orphan = write_orphan(runtime, 0, offset=10_000, created_ms=archive.clock.now_ms())  # never accepted

    archive.clock.advance(minutes=29)
    kept = sweep_partition(runtime, "orders", 0)
    assert orphan in staged_files(archive) and not kept.directory_removed

    archive.clock.advance(minutes=2)  # 31 minutes old: past archive.segment_grace (30m)
    removed = sweep_partition(runtime, "orders", 0)
    assert orphan not in staged_files(archive)
    assert removed.garbage_deleted == 1 and removed.directory_removed


def test_reconciliation_flags_what_differs_and_never_deletes(archive):
    config = small_config(max_records=30)
    runtime, _orders = archive_workload(archive, config, partitions=1, per_partition=150, hours=1)
    archive.clock.advance(minutes=16)
    sweep_partition(runtime, "orders", 0)  # everything committed
    keys = sorted(o["Key"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"])
    now = archive.clock.now_ms()
    clean = Reconciler(runtime).run(now)
    assert clean.findings == [] and clean.objects_checked >= 3 and clean.checksums_checked >= 3

    archive.s3.delete_object(Bucket=archive.bucket, Key=keys[0])  # deleted behind the ledger's back
    archive.s3.put_object(Bucket=archive.bucket, Key=keys[1], Body=b"tampered")  # same key, other bytes
    stranger = keys[2].rsplit("/", 1)[0] + "/orders+0+00000000000000099999-00000000000000099999.jsonl.gz"
    archive.s3.put_object(Bucket=archive.bucket, Key=stranger, Body=b"{}")

    findings = Reconciler(runtime).run(now).findings

    assert sorted((f.kind, f.key) for f in findings) == sorted(
        [("missing_object", keys[0]), ("size_mismatch", keys[1]), ("unknown_object", stranger)]
    )
    listed = {o["Key"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"]}
    assert stranger in listed and keys[1] in listed  # nothing removed or rewritten


def test_reconciliation_of_a_partitioned_stream_in_hive_folders(archive):
    """Parquet under ``country=`` folders and Hive hour folders: the hour's objects are spread
    over one folder per country, which the reconciler lists from the ledger's commits."""
    config = small_config(
        max_records=30,
        format={"type": "parquet"},
        partition_by={"fields": ["_value.country"], "style": "keys_and_values", "hour_folders": "hive"},
    )
    runtime, _orders = archive_workload(archive, config, partitions=1, per_partition=150, hours=1)
    archive.clock.advance(minutes=16)
    sweep_partition(runtime, "orders", 0)
    keys = sorted(o["Key"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"])
    assert len({key.split("/")[2] for key in keys}) == 5 and all("/year=2026/month=11/" in key for key in keys)
    now = archive.clock.now_ms()
    clean = Reconciler(runtime).run(now)
    assert clean.findings == [] and clean.objects_checked >= len(keys)

    archive.s3.delete_object(Bucket=archive.bucket, Key=keys[0])
    stranger = keys[-1].rsplit("/", 1)[0] + "/orders+0+00000000000000099999-00000000000000099999.parquet"
    archive.s3.put_object(Bucket=archive.bucket, Key=stranger, Body=b"PAR1")
    findings = Reconciler(runtime).run(now).findings
    assert sorted((f.kind, f.key) for f in findings) == sorted(
        [("missing_object", keys[0]), ("unknown_object", stranger)]
    )


def test_an_object_uploaded_but_not_yet_committed_is_in_flight_not_unknown(archive):
    from tidemark.faults import AFTER_UPLOAD, CrashAt, SimulatedCrash

    config = small_config(max_records=20)
    crashing = archive.runtime(config, CrashAt(AFTER_UPLOAD))
    orders = make_orders(partitions=1, per_partition=40, hours=1, bad_share=0.0, late_share=0.0)
    with pytest.raises(SimulatedCrash):
        Archiver(crashing).handle(msk_event(orders.all_records()))
    runtime = archive.runtime(config)
    assert len(archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"]) == 1  # uploaded
    assert runtime.ledger.committed_objects("orders", "2026-11-21T08") == []  # not committed
    assert Reconciler(runtime).run(archive.clock.now_ms()).findings == []  # sealed: its commit is pending
    sweep_partition(runtime, "orders", 0)  # resumes and commits it
    assert Reconciler(runtime).run(archive.clock.now_ms()).findings == []


def complete(runtime, now_ms):
    for ref in discover_all(runtime):
        sweep_partition(runtime, ref.stream, ref.partition)
    return CompletenessTracker(runtime).run(now_ms)


def event_ms(record) -> int:
    created = orjson.loads(record.value)["created_at"]
    return created if isinstance(created, int) else int(datetime.fromisoformat(created).timestamp() * 1000)


def complete_by_rule(delivered: dict[int, list], lateness_ms: int = HOUR_MS) -> list[str]:
    """The oracle: hours (with records) whose end + lateness every partition's latest event passed."""
    low = min(max(event_ms(r) for r in records) for records in delivered.values())
    hours = {
        datetime.fromtimestamp(event_ms(r) / 1000, UTC).strftime("%Y-%m-%dT%H") for rs in delivered.values() for r in rs
    }
    ends = {
        hour: int(datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC).timestamp() * 1000) + HOUR_MS
        for hour in hours
    }
    return sorted(f"orders/{hour}" for hour, end in ends.items() if end + lateness_ms <= low)


def read_manifest(archive, runtime, hour):
    """The manifest the ledger's hour mark names (the current one)."""
    mark = next(m for m in runtime.ledger.hour_marks("orders") if m.hour == hour)
    assert mark.manifest_key == manifest_key("manifests", "orders", hour, mark.manifest_commits)
    return orjson.loads(archive.s3.get_object(Bucket=archive.bucket, Key=mark.manifest_key)["Body"].read())


def test_hours_complete_when_every_partition_moved_past_them_and_late_records_reopen_them(archive):
    # Processing time after all the event times (a watermark never runs ahead of processing time).
    archive = replace(archive, clock=ManualClock(BASE_MS + 4 * HOUR_MS))
    config = small_config(max_records=25)
    runtime = archive.runtime(config)
    archiver = Archiver(runtime)
    orders = make_orders(partitions=2, per_partition=120, hours=3, late_share=0.0, bad_share=0.0)
    # Partition 0 gets all its records (events until 11:00), partition 1 only its first 40 (until ~09:00).
    delivered = {0: orders.records[0], 1: orders.records[1][:40]}
    archiver.handle(msk_event(delivered[0]))
    archiver.handle(msk_event(delivered[1]))
    archive.clock.advance(minutes=16)  # max age: the sweep flushes what is open
    first = complete(runtime, archive.clock.now_ms())
    assert first.completed == complete_by_rule(delivered)  # partition 1 holds the later hours back
    assert "orders/2026-11-21T09" in first.waiting and "partition 1 watermark" in first.waiting["orders/2026-11-21T09"]

    delivered[1] = orders.records[1]
    archiver.handle(msk_event(orders.records[1][40:]))
    archive.clock.advance(minutes=16)
    second = complete(runtime, archive.clock.now_ms())
    assert sorted(first.completed + second.completed) == complete_by_rule(delivered)
    assert "orders/2026-11-21T08" in second.completed
    assert "orders/2026-11-21T10" in second.waiting  # needs events at 12:00 (end 11:00 + 1h)
    manifest = read_manifest(archive, runtime, "2026-11-21T08")
    committed = runtime.ledger.committed_objects("orders", "2026-11-21T08")
    assert [o["key"] for o in manifest["objects"]] == sorted(o.key for o in committed)
    assert (
        manifest["records"]["raw"]
        == sum(o.records for o in committed)
        == sum(1 for e in orders.expected if e.hour == "2026-11-21T08")
    )
    assert manifest["commits"] == len(committed)

    # A late record for 08:00 arrives: the hour is reopened, then completed again with it.
    last = orders.records[0][-1]
    late = last._replace(
        offset=last.offset + 1,
        value=orjson.dumps({"order_id": "late", "price": 1, "quantity": 1, "created_at": "2026-11-21T08:30:00Z"}),
    )
    archiver.handle(msk_event([late]))
    archive.clock.advance(minutes=16)
    third = complete(runtime, archive.clock.now_ms())
    assert third.reopened == ["orders/2026-11-21T08"]
    manifest = read_manifest(archive, runtime, "2026-11-21T08")
    assert manifest["commits"] == len(committed) + 1
    assert manifest["records"]["raw"] == sum(o.records for o in committed) + 1
    mark = next(m for m in runtime.ledger.hour_marks("orders") if m.hour == "2026-11-21T08")
    assert mark.complete and mark.manifest_commits == manifest["commits"]


def test_an_idle_partition_does_not_hold_hours_back_forever(archive):
    config = small_config(max_records=25)
    runtime = archive.runtime(config)
    orders = make_orders(partitions=2, per_partition=60, hours=1, late_share=0.0, bad_share=0.0)
    Archiver(runtime).handle(msk_event(orders.records[0]))
    Archiver(runtime).handle(msk_event(orders.records[1][:5]))  # partition 1 goes quiet early
    archive.clock.advance(minutes=16)
    assert complete(runtime, archive.clock.now_ms()).completed == []
    archive.clock.advance(ms=2 * HOUR_MS)  # past the hours' end + lateness, and idle that long
    assert complete(runtime, archive.clock.now_ms()).completed == ["orders/2026-11-21T07", "orders/2026-11-21T08"]


def test_a_future_dated_record_does_not_pin_the_watermark_ahead_of_processing_time(archive):
    config = small_config(max_records=25)
    runtime = archive.runtime(config)
    orders = make_orders(partitions=1, per_partition=20, hours=1, late_share=0.0, bad_share=0.0)
    future = orders.records[0][-1]._replace(
        offset=100,
        value=orjson.dumps({"order_id": "f", "price": 1, "quantity": 1, "created_at": "2031-01-01T00:00:00Z"}),
    )
    Archiver(runtime).handle(msk_event([*orders.records[0], future]))
    state = runtime.ledger.load("orders", 0)
    assert state.watermark_ms == archive.clock.now_ms() + 5 * 60_000  # capped, not 2031


def test_a_quarantined_flush_keeps_its_hour_incomplete(archive):
    config = small_config(max_records=25)
    runtime = archive.runtime(config)
    orders = make_orders(partitions=2, per_partition=12, hours=1, late_share=0.0, bad_share=0.0)
    Archiver(runtime).handle(msk_event(orders.all_records()))  # below max_records: stays OPEN
    damage_first_segment(archive, runtime)
    archive.clock.advance(minutes=16)
    sweep_partition(runtime, "orders", 0)  # max age: sealed, then quarantined instead of uploaded
    sweep_partition(runtime, "orders", 1)  # partition 1's part of the hour is committed
    state = runtime.ledger.load("orders", 0)
    assert [held.flush.buffer.key.hour for held in state.quarantined.values()] == ["2026-11-21T08"]

    archive.clock.advance(ms=3 * HOUR_MS)  # long past the hour, and idle
    report = CompletenessTracker(runtime).run(archive.clock.now_ms())

    assert "orders/2026-11-21T08" not in report.completed
    assert report.waiting["orders/2026-11-21T08"] == "partition 0 still stages the hour"


def test_each_step_stops_starting_work_at_its_deadline_and_the_next_run_continues(archive):
    """A step's deadline (tidemark.sweeper.budget) stops it between units of work, never inside
    one, and what it leaves is counted and done by the next run: a sweep leaves flushes SEALED,
    reconciliation leaves hours unchecked, completeness leaves hours without a manifest."""
    config = small_config(max_records=10_000)
    runtime, orders = archive_workload(archive, config, partitions=1, per_partition=60, hours=3, bad_share=0.0)
    archive.clock.advance(minutes=16)
    now = archive.clock.now_ms()

    stopped = sweep_partition(runtime, "orders", 0, deadline_ms=now)  # past its deadline from the start
    state = runtime.ledger.load("orders", 0)
    assert (stopped.flushed, stopped.deferred, len(state.sealed)) == ({}, len(state.sealed), stopped.deferred)
    assert stopped.deferred >= 3 and not stopped.directory_removed
    resumed = sweep_partition(runtime, "orders", 0, deadline_ms=now + 1)
    assert (resumed.resumed, resumed.deferred, sum(resumed.flushed.values())) == (stopped.deferred, 0, stopped.deferred)

    archive.clock.advance(ms=3 * HOUR_MS)  # long past the hours, and idle: all complete
    now = archive.clock.now_ms()
    hours, _marks = Reconciler(runtime).hours_to_check("orders", now)  # the lookback and the 3 unchecked
    unchecked = sorted(mark.hour for mark in runtime.ledger.hour_marks("orders"))
    # Past its deadline from the start, a run still checks one hour -- an unchecked one first --
    # so a backlog never stops reconciliation; the rest waits for the next run.
    deferred = Reconciler(runtime).run(now, deadline_ms=now)
    assert (deferred.hours_checked, deferred.hours_deferred) == (1, len(hours) - 1)
    reconciled = [m.hour for m in runtime.ledger.hour_marks("orders") if m.reconciled_commits == m.commits]
    assert reconciled == unchecked[:1]
    checked = Reconciler(runtime).run(now, deadline_ms=now + 1)
    assert (checked.hours_checked, checked.hours_deferred, checked.findings) == (len(hours), 0, [])
    assert all(mark.reconciled_commits == mark.commits for mark in runtime.ledger.hour_marks("orders"))

    pending = [mark.hour for mark in runtime.ledger.hour_marks("orders") if not mark.complete]
    # ... and completeness writes one manifest
    first = CompletenessTracker(runtime).run(now, deadline_ms=now)
    assert (first.completed, len(first.manifests), first.deferred) == ([f"orders/{pending[0]}"], 1, len(pending) - 1)
    done = CompletenessTracker(runtime).run(now, deadline_ms=now + 1)
    assert (sorted(first.completed + done.completed), done.deferred) == (
        sorted(f"orders/{hour}" for hour in pending),
        0,
    )
    report = verify_archive(archive.s3, archive.bucket, "orders", orders.expected)
    assert report.ok and report.archived == len(orders.expected), report.summary()


def test_a_manifest_written_by_an_overlapping_execution_is_never_overwritten(archive):
    """Two executions completing one hour at the same commits (they overlap: the execution timeout
    is longer than the interval) would write the same key with other times in it: the second
    write is conditional, and S3's 412 means the manifest is already there."""
    archive = replace(archive, clock=ManualClock(BASE_MS + 4 * HOUR_MS))
    config = small_config(max_records=25)
    runtime = archive.runtime(config)
    orders = make_orders(partitions=1, per_partition=60, hours=1, late_share=0.0, bad_share=0.0)
    Archiver(runtime).handle(msk_event(orders.records[0]))
    archive.clock.advance(minutes=16)
    for ref in discover_all(runtime):
        sweep_partition(runtime, ref.stream, ref.partition)
    archive.clock.advance(ms=3 * HOUR_MS)
    marks = runtime.ledger.hour_marks("orders")
    keys = {mark.hour: manifest_key("manifests", "orders", mark.hour, mark.commits) for mark in marks}
    theirs = b'{"written": "by the other execution"}'
    for key in keys.values():
        archive.s3.put_object(Bucket=archive.bucket, Key=key, Body=theirs)

    report = CompletenessTracker(runtime).run(archive.clock.now_ms())

    assert sorted(report.completed) == sorted(f"orders/{hour}" for hour in keys)
    assert sorted(report.manifests) == sorted(keys.values())
    for key in keys.values():
        assert archive.s3.get_object(Bucket=archive.bucket, Key=key)["Body"].read() == theirs


def test_past_the_deadline_every_stream_still_gets_one_unit(archive):
    """One stream's backlog must not keep the streams after it from being reconciled or
    completed: past its deadline a run still checks one hour, and writes one manifest, per stream."""
    data = small_config_data(max_records=10_000)
    payments = copy.deepcopy(data["streams"][0])
    payments.update(name="payments", source={**payments["source"], "topic": "payments"})
    data["streams"].append(payments)
    config = parse_config(data)
    runtime = archive.runtime(config)
    for topic in ("orders", "payments"):
        orders = make_orders(partitions=1, per_partition=40, hours=2, late_share=0.0, bad_share=0.0, topic=topic)
        Archiver(runtime).handle(msk_event(orders.records[0]))
    archive.clock.advance(minutes=16)
    for ref in discover_all(runtime):
        sweep_partition(runtime, ref.stream, ref.partition)
    archive.clock.advance(ms=4 * HOUR_MS)
    now = archive.clock.now_ms()

    reconciled = Reconciler(runtime).run(now, deadline_ms=now)
    completed = CompletenessTracker(runtime).run(now, deadline_ms=now)

    assert reconciled.hours_checked == 2 and reconciled.hours_deferred > 0
    assert sorted(name.split("/")[0] for name in completed.completed) == ["orders", "payments"]
    assert completed.deferred > 0
