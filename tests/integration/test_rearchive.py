"""``tidemark rearchive`` against the embedded broker and the moto server: a flush quarantined by a
damaged segment is archived again from Kafka, exactly once, also across crashes and while the
partition keeps archiving; and it is refused -- with nothing changed -- where Kafka no longer
holds the range or holds other records there."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import pytest

from tests.support.audit import committed, erase
from tests.support.harness import (
    EsmModel,
    RunOtherAt,
    assert_exactly_once,
    damage_first_segment,
    finish,
    small_config_data,
    staged_files,
)
from tests.support.kafka import produce_records
from tests.support.legacy_segments import LegacySegmentEncoder
from tests.support.workload import make_orders
from tidemark.audit import Auditor, AuditReport
from tidemark.audit.findings import GAP, QUARANTINED
from tidemark.config import TidemarkConfig, parse_config
from tidemark.embedded.workload import ensure_topic, recreate_topic
from tidemark.exceptions import NotRetainedError
from tidemark.faults import AFTER_COMMIT, AFTER_UPLOAD, BEFORE_UPLOAD, SimulatedCrash
from tidemark.formats import RenderSpec, format_of
from tidemark.kafka_log import KafkaLog
from tidemark.ledger.model import PartitionState, QuarantinedFlush
from tidemark.rearchive import (
    NothingToRearchiveError,
    RangeSplitsFlushError,
    RearchiveError,
    Rearchiver,
    RefetchMismatchError,
)
from tidemark.rearchive.abandon import Abandoner, NoSource, SourceNotGivenError, StillRetainedError
from tidemark.rearchive.exceptions import UnsupportedSourceError
from tidemark.records.model import Record, SchemaRef
from tidemark.sources import PartitionId
from tidemark.status import stream_status
from tidemark.writer.stream import render_spec


class CrashAt:
    def __init__(self, point: str) -> None:
        self.point = point

    def hit(self, name: str) -> None:
        if name == self.point:
            raise SimulatedCrash(name)


@dataclass
class Quarantined:
    config: TidemarkConfig
    esm: EsmModel
    topic: str
    held: QuarantinedFlush
    state: PartitionState


def quarantine(
    archive, bootstrap: str, *, records: int = 60, first_batch: int = 60, event_time: dict | None = None
) -> Quarantined:
    """Orders produced to a new topic, ``first_batch`` of them archived (30 per batch), the main
    raw buffer's first segment damaged and its flush quarantined by maintenance past max age."""
    topic = f"rearchive-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, 1)
    data = small_config_data(max_records=10_000, topic=topic)
    if event_time is not None:
        data["streams"][0]["event_time"] = event_time
    config = parse_config(data)
    workload = make_orders(partitions=1, per_partition=records, hours=1, seed=5, topic=topic)
    assert produce_records(bootstrap, workload.records[0]) == [record.offset for record in workload.records[0]]
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    for _batch in range(first_batch // 30):  # two accepts: a buffer of two segments
        assert esm.deliver(esm.batch(0, 30))
    runtime = archive.runtime(config)
    raw = [buffer for buffer in runtime.ledger.load("orders", 0).buffers.values() if buffer.key.kind == "raw"]
    hour = max(raw, key=lambda buffer: buffer.records).key.hour  # the hour's main buffer, not a late one
    damage_first_segment(archive, runtime, 0, hour)
    archive.clock.advance(minutes=31)
    runtime.writer(config.streams[0], 0).maintain()
    state = runtime.ledger.load("orders", 0)
    [held] = state.quarantined.values()
    return Quarantined(config, esm, topic, held, state)


def rearchiver(archive, setup: Quarantined, source, crash=None) -> Rearchiver:
    runtime = archive.runtime(setup.config, crash)
    return Rearchiver(runtime.writer(setup.config.streams[0], 0), runtime.ledger, source)


def audit_clean(archive, setup: Quarantined, bootstrap: str) -> None:
    runtime = archive.runtime(setup.config)
    with KafkaLog(bootstrap, setup.topic) as log:
        report = Auditor(setup.config, "orders", runtime.ledger, archive.s3, archive.bucket, probe=log).run()
    assert [finding.line() for finding in report.findings] == []
    assert report.clean and report.records == len(setup.esm.workload.expected)


def objects(archive) -> list[str]:
    listed = archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/").get("Contents", [])
    return sorted(item["Key"] for item in listed)


def test_a_quarantined_flush_is_archived_once_from_kafka_and_the_audit_is_clean(archive, kafka_bootstrap):
    setup = quarantine(archive, kafka_bootstrap)
    buffer = setup.held.flush.buffer
    before = objects(archive)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        report = rearchiver(archive, setup, log).run(0, 59)
    [done] = report.flushes
    assert (done.flush_id, done.key, done.first, done.last) == (
        setup.held.flush.flush_id,
        setup.held.flush.object_key,
        buffer.first,
        buffer.last,
    )
    assert done.records == buffer.records and not done.by_another_run
    assert objects(archive) == sorted([*before, setup.held.flush.object_key])
    runtime = archive.runtime(setup.config)
    assert runtime.ledger.load("orders", 0).quarantined == {}
    finish(archive, setup.config, setup.esm)  # the rest of the partition, as the archiver would
    assert_exactly_once(archive, setup.config, setup.esm)
    audit_clean(archive, setup, kafka_bootstrap)
    assert staged_files(archive) == set()  # the damaged segments were garbage once unreferenced

    with KafkaLog(kafka_bootstrap, setup.topic) as log, pytest.raises(NothingToRearchiveError, match="none"):
        rearchiver(archive, setup, log).run(0, 59)  # a rerun: nothing left, nothing written


@pytest.mark.parametrize("point", [BEFORE_UPLOAD, AFTER_UPLOAD, AFTER_COMMIT])
def test_a_rearchive_that_crashed_is_finished_by_running_it_again(archive, kafka_bootstrap, point):
    setup = quarantine(archive, kafka_bootstrap)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        with pytest.raises(SimulatedCrash):
            rearchiver(archive, setup, log, CrashAt(point)).run(0, 59)
        if point == AFTER_COMMIT:
            with pytest.raises(NothingToRearchiveError):
                rearchiver(archive, setup, log).run(0, 59)
        else:
            [done] = rearchiver(archive, setup, log).run(0, 59).flushes
            assert done.records == setup.held.flush.buffer.records
    versions = archive.s3.list_object_versions(Bucket=archive.bucket, Prefix=setup.held.flush.object_key)
    assert len(versions.get("Versions", [])) == 1  # uploaded once, never overwritten
    finish(archive, setup.config, setup.esm)
    assert_exactly_once(archive, setup.config, setup.esm)
    audit_clean(archive, setup, kafka_bootstrap)


def test_a_rearchive_commits_while_the_partition_keeps_archiving(archive, kafka_bootstrap):
    setup = quarantine(archive, kafka_bootstrap, records=90, first_batch=60)
    more = setup.esm.batch(0, 30)
    archiving = RunOtherAt(AFTER_UPLOAD, lambda: setup.esm.deliver(more))  # moves the state's version
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        [done] = rearchiver(archive, setup, log, archiving).run(0, 59).flushes
    assert archiving.fired and done.records == setup.held.flush.buffer.records
    state = archive.runtime(setup.config).ledger.load("orders", 0)
    assert state.staged_offset == 89 and state.quarantined == {}
    finish(archive, setup.config, setup.esm)
    assert_exactly_once(archive, setup.config, setup.esm)
    audit_clean(archive, setup, kafka_bootstrap)


class Tampered:
    """The broker's records with one changed: a compaction gap (``drop``) or other bytes."""

    def __init__(
        self, log: KafkaLog, *, drop: int | None = None, rewrite: int | None = None, rekey: int | None = None
    ) -> None:
        self.log, self.drop, self.rewrite, self.rekey = log, drop, rewrite, rekey

    def records(self, partition: PartitionId, first: int, last: int) -> Iterator[Record]:
        for record in self.log.records(partition, first, last):
            if record.offset == self.drop:
                continue
            if record.offset == self.rewrite:
                record = record._replace(value=b'{"x":1}')
            yield record._replace(key=b"another key") if record.offset == self.rekey else record


def assert_unchanged(archive, setup: Quarantined, before: list[str]) -> None:
    state = archive.runtime(setup.config).ledger.load("orders", 0)
    assert list(state.quarantined) == [setup.held.flush.flush_id]
    assert objects(archive) == before


def test_a_compaction_gap_or_other_bytes_are_refused_and_nothing_changes(archive, kafka_bootstrap):
    setup = quarantine(archive, kafka_bootstrap)
    buffer = setup.held.flush.buffer
    before = objects(archive)
    inner = buffer.first + 1
    assert buffer.records > 2
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        with pytest.raises(RefetchMismatchError, match="compacted or deleted"):
            rearchiver(archive, setup, Tampered(log, drop=buffer.last)).run(0, 59)
        assert_unchanged(archive, setup, before)
        # a record that no longer routes to the buffer (no event time: a dead letter now)
        with pytest.raises(RefetchMismatchError, match="were staged"):
            rearchiver(archive, setup, Tampered(log, rewrite=buffer.first)).run(0, 59)
        assert_unchanged(archive, setup, before)
        # other bytes that route the same: the ledger's fingerprint of a batch's last record names them
        marked = [offset for offset, _crc in setup.state.fingerprints if buffer.first <= offset <= buffer.last]
        with pytest.raises(RefetchMismatchError, match=f"offset {marked[-1]}: the source holds another record"):
            rearchiver(archive, setup, Tampered(log, rekey=marked[-1])).run(0, 59)
        assert_unchanged(archive, setup, before)
        with pytest.raises(RangeSplitsFlushError, match=f"--from-offset {buffer.first}"):
            rearchiver(archive, setup, log).run(inner, 59)
        with pytest.raises(NothingToRearchiveError, match=setup.held.flush.flush_id):
            rearchiver(archive, setup, log).run(buffer.last + 1, buffer.last + 5)
        assert_unchanged(archive, setup, before)


def test_a_recreated_topic_no_longer_holds_the_range(archive, kafka_bootstrap):
    setup = quarantine(archive, kafka_bootstrap)
    before = objects(archive)
    recreate_topic(kafka_bootstrap, setup.topic, 1)
    with KafkaLog(kafka_bootstrap, setup.topic) as log, pytest.raises(NotRetainedError, match="past the log's end"):
        rearchiver(archive, setup, log).run(0, 59)
    assert_unchanged(archive, setup, before)


def test_a_flush_staged_by_the_previous_segment_format_is_rearchived(archive, kafka_bootstrap, monkeypatch):
    with monkeypatch.context() as old_version:  # its segments sized as version 1 wrote them
        old_version.setattr("tidemark.writer.stream.SegmentEncoder", LegacySegmentEncoder)
        setup = quarantine(archive, kafka_bootstrap)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        [done] = rearchiver(archive, setup, log).run(0, 59).flushes
    assert done.records == setup.held.flush.buffer.records
    finish(archive, setup.config, setup.esm)
    assert_exactly_once(archive, setup.config, setup.esm)


def test_a_processing_time_flush_routes_back_with_the_time_it_was_staged(archive, kafka_bootstrap):
    staged_at = archive.clock.now_ms()  # the manual clock stands still while a batch is staged
    setup = quarantine(archive, kafka_bootstrap, event_time={"source": "processing_time"})
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        [done] = rearchiver(archive, setup, log).run(0, 59).flushes
    body = archive.s3.get_object(Bucket=archive.bucket, Key=done.key)["Body"].read()
    spec = RenderSpec.decode(setup.held.flush.buffer.spec)
    times = {record.event_time_ms for record in format_of(spec).read(body, spec.context(0, done.key))}
    assert times == {staged_at}  # what the object would have held, not a time made up for the hour


class InMemory:
    def __init__(self, records: list[Record]) -> None:
        self.held = records

    def records(self, partition: PartitionId, first: int, last: int) -> Iterator[Record]:
        return iter([record for record in self.held if first <= record.offset <= last])


def test_a_configuration_that_swaps_records_of_the_range_is_refused(archive):
    """Count, first and last agree, but another record of the range would take one's place: the
    staged size tells them apart."""
    at = archive.clock.now_ms() + 60_000

    def order(offset: int, pad: int = 0) -> bytes:
        return orjson.dumps({"created_at": at + offset, "pad": "x" * pad})

    records = [
        Record("orders", 0, 0, at, order(0), b"k"),
        Record("orders", 0, 1, at + 1, b"{not json 1", b"k"),  # a dead letter either way
        Record("orders", 0, 2, at + 2, order(2), b"\xff\xfe"),  # a key that is not UTF-8: a dead letter, first
        Record("orders", 0, 3, at + 3, order(3, pad=300), b"k"),  # too large under the second configuration
        Record("orders", 0, 4, at + 4, b"{not json 4", b"k"),
    ]
    first = small_config_data(max_records=10_000)
    second = small_config_data(max_records=10_000)
    second["streams"][0]["encoding"]["key"] = "bytes"
    second["streams"][0]["dead_letter"] = {"max_record_bytes": 200}
    config = parse_config(first)
    runtime = archive.runtime(config)
    runtime.writer(config.streams[0], 0).write(records, source="orders")
    errors = next(buffer for buffer in runtime.ledger.load("orders", 0).buffers.values() if buffer.key.kind == "errors")
    assert [errors.first, errors.last, errors.records] == [1, 4, 3]
    damage = archive.staging_root / "orders" / "p0" / errors.segments[0].name
    damage.write_bytes(damage.read_bytes()[:-3] + b"\x00\x00\x00")
    archive.clock.advance(minutes=31)
    runtime.writer(config.streams[0], 0).maintain()
    [held] = runtime.ledger.load("orders", 0).quarantined.values()
    changed = parse_config(second)
    now = archive.runtime(changed)
    with pytest.raises(RefetchMismatchError, match="not the records that were staged"):
        Rearchiver(now.writer(changed.streams[0], 0), now.ledger, InMemory(records)).run(0, 4)
    assert list(now.ledger.load("orders", 0).quarantined) == [held.flush.flush_id]
    [done] = Rearchiver(runtime.writer(config.streams[0], 0), runtime.ledger, InMemory(records)).run(0, 4).flushes
    assert done.records == 3  # under the configuration it was staged with, it goes through


def quarantined_flush(archive, data: dict, records: list[Record]):
    """``records`` archived under ``data``'s configuration, their raw buffer's segment damaged
    and the flush quarantined; the runtime, config and the flush."""
    config = parse_config(data)
    runtime = archive.runtime(config)
    runtime.writer(config.streams[0], 0).write(records, source="orders")
    [raw] = [buffer for buffer in runtime.ledger.load("orders", 0).buffers.values() if buffer.key.kind == "raw"]
    damage = archive.staging_root / "orders" / "p0" / raw.segments[0].name
    damage.write_bytes(damage.read_bytes()[:-3] + b"\x00\x00\x00")
    archive.clock.advance(minutes=31)
    runtime.writer(config.streams[0], 0).maintain()
    [held] = runtime.ledger.load("orders", 0).quarantined.values()
    return runtime, config, held


def test_a_wire_format_flush_is_rearchived_with_its_schema_ids(archive):
    """The ids are read from the bytes again, so the object is what the flush would have been."""
    at = archive.clock.now_ms() + 60_000
    records = [
        Record("orders", 0, offset, at + offset, b"\x00" + (40 + offset % 2).to_bytes(4, "big") + b"avro", b"k")
        for offset in range(6)
    ]
    data = small_config_data(max_records=10_000)
    data["streams"][0].update(
        encoding={"value": "bytes", "wire_format": "confluent"},
        event_time={"source": "record_timestamp"},
        aggregations=[],
        format={"type": "parquet"},
    )
    runtime, config, _held = quarantined_flush(archive, data, records)
    [done] = Rearchiver(runtime.writer(config.streams[0], 0), runtime.ledger, InMemory(records)).run(0, 5).flushes
    spec = RenderSpec.decode(render_spec(config.streams[0]))
    body = archive.s3.get_object(Bucket=archive.bucket, Key=done.key)["Body"].read()
    read = list(format_of(spec).read(body, spec.context(0, done.key)))
    assert [envelope.schemas for envelope in read] == [(SchemaRef("value", "", str(40 + n % 2)),) for n in range(6)]


def test_a_stream_the_registry_integration_decodes_is_not_rearchived(archive):
    """What was staged is what the mapping decoded; Kafka holds the producers' bytes."""
    at = archive.clock.now_ms() + 60_000
    records = [
        Record(
            "orders", 0, n, at + n, orjson.dumps({"created_at": at + n}), b"k", (), (SchemaRef("value", "AVRO", "7"),)
        )
        for n in range(4)
    ]
    data = small_config_data(max_records=10_000)
    data["streams"][0]["source"]["schema_registry"] = {
        "kind": "glue",
        "registry_arn": "arn:aws:glue:us-east-1:123456789012:registry/orders",
    }
    data["streams"][0]["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 2}}
    runtime, config, held = quarantined_flush(archive, data, records)
    with pytest.raises(UnsupportedSourceError, match="schema registry integration decoded what was staged"):
        Rearchiver(runtime.writer(config.streams[0], 0), runtime.ledger, InMemory(records)).run(0, 3)
    assert list(runtime.ledger.load("orders", 0).quarantined) == [held.flush.flush_id]


def test_a_flush_quarantined_before_an_epoch_start_on_the_same_log_is_rearchived(archive, kafka_bootstrap):
    """Issue 29, finding 5. An epoch started on the same log (the operator resumes at 60, the
    next offset) leaves the epoch-0 flush quarantined. Failing first: rearchive refused it for its
    epoch, replay refused its hour and the audit never came back clean, for good. Now it is
    fetched again from that same log, checked against epoch 0's marks, and archived under its own
    epoch-0 key."""
    setup = quarantine(archive, kafka_bootstrap)
    runtime = archive.runtime(setup.config)
    runtime.writer(setup.config.streams[0], 0).start_epoch(60, reason="resume on the same log")
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        report = rearchiver(archive, setup, log).run(0, 59)
    [done] = report.flushes
    assert (done.key, done.records) == (setup.held.flush.object_key, setup.held.flush.buffer.records)
    assert "+e1+" not in done.key and runtime.ledger.load("orders", 0).quarantined == {}
    archive.clock.advance(minutes=31)
    runtime.writer(setup.config.streams[0], 0).maintain()
    assert_exactly_once(archive, setup.config, setup.esm)


def test_a_flush_quarantined_before_an_epoch_start_on_another_log_is_refused(archive, kafka_bootstrap):
    """The epoch began on another cluster's copy of the topic (a migration): the flush's offsets
    name records of the old log, which the configured topic cannot vouch for: refused, nothing
    changed."""
    setup = quarantine(archive, kafka_bootstrap)
    runtime = archive.runtime(setup.config)
    source = f"tidemark-dr/0a1b2c3d-1111-2222-3333-444455556666-2/{setup.topic}"
    runtime.writer(setup.config.streams[0], 0).start_epoch(0, source=source, reason="migrated")
    before = objects(archive)
    with KafkaLog(kafka_bootstrap, setup.topic) as log, pytest.raises(RefetchMismatchError, match="another log"):
        rearchiver(archive, setup, log).run(0, 59)
    assert objects(archive) == before and runtime.ledger.load("orders", 0).quarantined


def test_a_flush_quarantined_before_a_recreated_topic_is_refused_by_its_epochs_marks(archive, kafka_bootstrap):
    """The usual reason for an epoch start: the topic was recreated (same name, same source
    identity) and holds other records at the flush's offsets now. Epoch 0's marks tell them apart:
    refused, nothing changed (the range is lost with the old topic: README, "Epochs")."""
    setup = quarantine(archive, kafka_bootstrap)
    recreate_topic(kafka_bootstrap, setup.topic, 1)
    other = make_orders(partitions=1, per_partition=60, hours=1, seed=77, topic=setup.topic)
    assert produce_records(kafka_bootstrap, other.records[0]) == list(range(60))
    runtime = archive.runtime(setup.config)
    runtime.writer(setup.config.streams[0], 0).start_epoch(0, reason="topic recreated")
    before = objects(archive)
    with KafkaLog(kafka_bootstrap, setup.topic) as log, pytest.raises(RefetchMismatchError, match="another record"):
        rearchiver(archive, setup, log).run(0, 59)
    assert objects(archive) == before and runtime.ledger.load("orders", 0).quarantined


# -- abandon: a quarantined flush no command can archive any more ---------------------------------


def abandoner(archive, setup: Quarantined, source) -> Abandoner:
    runtime = archive.runtime(setup.config)
    return Abandoner(runtime.writer(setup.config.streams[0], 0), runtime.ledger, source)


def audit_of(archive, setup: Quarantined) -> AuditReport:
    runtime = archive.runtime(setup.config)
    return Auditor(setup.config, "orders", runtime.ledger, archive.s3, archive.bucket).run()


def test_a_flush_a_recreated_topic_no_longer_holds_is_abandoned_recorded_and_audited(archive, kafka_bootstrap):
    """Issue 29, finding 5: the flush quarantined before a recreated topic can never be rearchived.
    Failing first: no command dropped its entry -- the audit reported it for good, status stayed
    stale, its hour never completed. Abandoned, it is recorded lost (with the operator's reason and
    what the check found), and every audit lists it while proving the rest whole."""
    setup = quarantine(archive, kafka_bootstrap)
    recreate_topic(kafka_bootstrap, setup.topic, 1)
    other = make_orders(partitions=1, per_partition=60, hours=1, seed=77, topic=setup.topic)
    assert produce_records(kafka_bootstrap, other.records[0]) == list(range(60))
    runtime = archive.runtime(setup.config)
    runtime.writer(setup.config.streams[0], 0).start_epoch(0, reason="topic recreated")
    before = audit_of(archive, setup)
    assert [finding.kind for finding in before.findings] == [QUARANTINED]
    assert stream_status(setup.config.streams[0], runtime.ledger, archive.clock.now_ms(), partitions=[0]).stale

    keys = objects(archive)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        report = abandoner(archive, setup, log).run(0, 59, "topic recreated on 2026-11-20; the old records are gone")
    [record] = report.flushes
    buffer = setup.held.flush.buffer
    assert (record.flush_id, record.object_key, record.records) == (
        setup.held.flush.flush_id,
        setup.held.flush.object_key,
        buffer.records,
    )
    assert "another record" in record.checked and record.reason.startswith("topic recreated")
    assert objects(archive) == keys  # nothing uploaded, nothing deleted
    state = runtime.ledger.load("orders", 0)
    assert state.quarantined == {} and not state.holds_hour(buffer.key.hour)  # its hour can complete
    assert runtime.ledger.abandoned("orders", 0) == [record]
    assert stream_status(setup.config.streams[0], runtime.ledger, archive.clock.now_ms(), partitions=[0]).stale == []

    after = audit_of(archive, setup)
    assert after.findings == [] and after.clean
    [line] = [item.line() for item in after.abandoned]
    assert line.startswith(f"abandoned: partition 0, offsets {record.first}..{record.last}, {record.object_key}")

    with KafkaLog(kafka_bootstrap, setup.topic) as log, pytest.raises(NothingToRearchiveError):
        abandoner(archive, setup, log).run(0, 59, "again")  # a rerun: nothing quarantined left


def test_a_loss_beside_an_abandoned_flush_is_still_a_gap(archive, kafka_bootstrap):
    """The abandoned record accounts for as many positions as the flush held, no more: an object
    deleted among them is still found."""
    setup = quarantine(archive, kafka_bootstrap)
    recreate_topic(kafka_bootstrap, setup.topic, 1)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        abandoner(archive, setup, log).run(0, 59, "records gone")
    runtime = archive.runtime(setup.config)
    buffer = setup.held.flush.buffer
    inside = [  # an object whose every position lies among the abandoned flush's own segments
        obj
        for obj in committed(runtime.ledger, "orders")
        if any(segment.first <= obj.first and obj.last <= segment.last for segment in buffer.segments)
    ]
    assert inside, "the workload must interleave another buffer's object with the abandoned one"
    erase(archive, inside[0])
    found = audit_of(archive, setup).findings
    assert [finding.kind for finding in found] and all(finding.kind == GAP for finding in found)


def test_a_flush_kafka_still_holds_is_not_abandoned(archive, kafka_bootstrap):
    setup = quarantine(archive, kafka_bootstrap)
    before = objects(archive)
    with KafkaLog(kafka_bootstrap, setup.topic) as log, pytest.raises(StillRetainedError, match="rearchive"):
        abandoner(archive, setup, log).run(0, 59, "impatient")
    assert_unchanged(archive, setup, before)
    assert archive.runtime(setup.config).ledger.abandoned("orders", 0) == []


def test_a_kafka_flush_is_not_abandoned_without_asking_kafka_nor_without_a_reason(archive, kafka_bootstrap):
    setup = quarantine(archive, kafka_bootstrap)
    before = objects(archive)
    with pytest.raises(SourceNotGivenError, match="--bootstrap-servers"):
        abandoner(archive, setup, NoSource()).run(0, 59, "gone")
    with KafkaLog(kafka_bootstrap, setup.topic) as log, pytest.raises(RearchiveError, match="--reason"):
        abandoner(archive, setup, log).run(0, 59, "  ")
    assert_unchanged(archive, setup, before)
