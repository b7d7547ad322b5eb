"""``tidemark recover`` against the embedded broker and the moto server: records the event source
mapping never delivered (its schema registry integration rejected them, or a batch ran out of
bounded retries) are archived from Kafka exactly once -- across crashes at every point, beside a
concurrent run, while the partition keeps archiving -- and the audit, which names them as gaps
first, comes back clean."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

import pytest

from tests.support.harness import EsmModel, RunOtherAt, assert_objects_describe_themselves, small_config_data
from tests.support.kafka import produce_records
from tests.support.workload import BASE_MS, make_orders
from tidemark.audit import Auditor
from tidemark.audit.findings import GAP
from tidemark.config import TidemarkConfig, parse_config
from tidemark.embedded.workload import ensure_topic, recreate_topic
from tidemark.exceptions import NotRetainedError
from tidemark.faults import AFTER_RECOVERY_CLAIM, AFTER_UPLOAD, RECOVERY_CRASH_POINTS, SimulatedCrash
from tidemark.formats import RenderSpec, format_of
from tidemark.kafka_log import KafkaLog
from tidemark.recover import Limits, LogSource, Recoverer, RecoverMismatchError, UnsupportedStreamError
from tidemark.routing import NOT_DELIVERED
from tidemark.status import stream_status
from tidemark.verify import spec_of_key, verify_archive

GLUE = {"kind": "glue", "registry_arn": "arn:aws:glue:us-east-1:123456789012:registry/orders"}


class CrashAt:
    def __init__(self, point: str) -> None:
        self.point = point

    def hit(self, name: str) -> None:
        if name == self.point:
            raise SimulatedCrash(name)


@dataclass
class Withheld:
    config: TidemarkConfig
    esm: EsmModel
    topic: str
    withheld: set[int]
    registry: bool


def archive_withholding(
    archive: Any,
    bootstrap: str,
    withheld: set[int],
    *,
    records: int = 120,
    registry: bool = False,
    data: dict[str, Any] | None = None,
) -> Withheld:
    """Orders produced to a new topic and delivered in batches of 30 as a mapping that withholds
    the records at ``withheld`` does; every buffer flushed."""
    topic = f"recover-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, 1)
    data = data or small_config_data(max_records=10_000, topic=topic)
    if registry:
        data["streams"][0]["source"]["schema_registry"] = GLUE
        data["streams"][0]["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 2}}
    config = parse_config(data)
    workload = make_orders(partitions=1, per_partition=records, hours=2, seed=9, topic=topic)
    rows = workload.records[0]
    assert produce_records(bootstrap, rows) == [record.offset for record in rows]
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    for start in range(0, len(rows), 30):
        assert esm.deliver([record for record in rows[start : start + 30] if record.offset not in withheld])
    flush(archive, config)
    return Withheld(config, esm, topic, withheld, registry)


def flush(archive: Any, config: TidemarkConfig) -> None:
    archive.clock.advance(minutes=31)
    archive.runtime(config).writer(config.streams[0], 0).maintain()


def recoverer(archive: Any, setup: Withheld, log: LogSource, crash: Any = None, **kwargs: Any) -> Recoverer:
    runtime = archive.runtime(setup.config, crash)
    writer = runtime.writer(setup.config.streams[0], 0)
    return Recoverer(
        writer, runtime.ledger, archive.s3, archive.bucket, log, clock=archive.clock, crash_points=crash, **kwargs
    )


def audit(archive: Any, setup: Withheld, bootstrap: str) -> Any:
    runtime = archive.runtime(setup.config)
    with KafkaLog(bootstrap, setup.topic) as log:
        return Auditor(setup.config, "orders", runtime.ledger, archive.s3, archive.bucket, probe=log).run()


def assert_exactly_once(archive: Any, setup: Withheld) -> None:
    """Every produced record once; a registry stream's withheld ones as dead letters."""
    expected = setup.esm.workload.expected
    if setup.registry:
        expected = [replace(e, hour=None) if e.offset in setup.withheld else e for e in expected]
    report = verify_archive(archive.s3, archive.bucket, "orders", expected, config=setup.config.streams[0])
    wrong = (report.lost, report.duplicated, report.unexpected, report.misfiled, report.corrupted)
    assert wrong == ([], [], [], [], [])
    assert report.archived + report.dead_lettered == report.produced == len(expected)
    assert_objects_describe_themselves(archive, setup.config)


def keys(archive: Any) -> list[str]:
    pages = archive.s3.get_paginator("list_objects_v2").paginate(Bucket=archive.bucket)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


WITHHELD = {3, 17, 18, 19, 44, 90, 91, 118}


def test_records_a_bounded_retry_abandoned_are_archived_where_the_archiver_would_have(archive, kafka_bootstrap):
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD)
    before = audit(archive, setup, kafka_bootstrap)
    gaps = sorted((f.first, f.last) for f in before.findings if f.kind == GAP)
    assert gaps == [(3, 3), (17, 19), (44, 44), (90, 91), (118, 118)], [f.line() for f in before.findings]

    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        report = recoverer(archive, setup, log).run()
    assert report.records == len(WITHHELD) and report.not_retained == [] and not report.unchecked
    assert all(not unit.by_another_run for unit in report.units)
    assert_exactly_once(archive, setup)
    after = audit(archive, setup, kafka_bootstrap)
    assert [f.line() for f in after.findings] == [] and after.clean

    objects = keys(archive)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        again = recoverer(archive, setup, log).run()  # a rerun: nothing left, nothing written
    assert again.units == [] and keys(archive) == objects


def test_a_registry_streams_withheld_records_are_dead_letters_with_their_produced_bytes(archive, kafka_bootstrap):
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD, registry=True)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        report = recoverer(archive, setup, log).run()
    assert report.records == len(WITHHELD)
    assert_exactly_once(archive, setup)
    dead = [key for unit in report.units for key in unit.keys]
    assert dead and all(key.startswith("errors/orders/") for key in dead)
    runtime = archive.runtime(setup.config)
    reasons = set()
    for key in dead:
        body = archive.s3.get_object(Bucket=archive.bucket, Key=key)["Body"].read()
        spec = spec_of_key(key, RenderSpec.decode(runtime.stream(setup.config.streams[0]).errors_spec))
        reasons |= {envelope.error.split(":", 1)[0] for envelope in format_of(spec).read(body, spec.context(0, key))}
    assert reasons == {NOT_DELIVERED}
    assert audit(archive, setup, kafka_bootstrap).clean


@pytest.mark.parametrize("point", RECOVERY_CRASH_POINTS)
def test_a_recovery_that_crashed_is_finished_by_running_it_again(archive, kafka_bootstrap, point):
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        with pytest.raises(SimulatedCrash):
            recoverer(archive, setup, log, CrashAt(point), limits=Limits(objects=1)).run()
        report = recoverer(archive, setup, log).run()
    assert 0 < report.records <= len(WITHHELD) or point == RECOVERY_CRASH_POINTS[-1]
    assert_exactly_once(archive, setup)
    for key in keys(archive):  # uploaded once, never overwritten
        assert len(archive.s3.list_object_versions(Bucket=archive.bucket, Prefix=key)["Versions"]) == 1
    assert audit(archive, setup, kafka_bootstrap).clean


def test_a_run_inside_another_runs_claim_finishes_it_and_the_first_run_says_so(archive, kafka_bootstrap):
    """Run B starts while run A holds a claim: B finishes A's unit and recovers the rest; A's
    commit then loses the generation and reports the unit as another run's. Nothing twice."""
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        inner: list[Any] = []
        hook = RunOtherAt(AFTER_RECOVERY_CLAIM, lambda: inner.append(recoverer(archive, setup, log).run()))
        outer = recoverer(archive, setup, log, hook, limits=Limits(objects=1)).run()
    [inside] = inner
    assert inside.records == len(WITHHELD)
    assert outer.units and outer.units[0].by_another_run and outer.records == 0
    assert_exactly_once(archive, setup)
    assert audit(archive, setup, kafka_bootstrap).clean


def test_recovery_beside_a_partition_that_keeps_archiving(archive, kafka_bootstrap):
    """The archiver stages and commits more while a recovery runs: what it commits lies above the
    recovery's bounds, and a record withheld among them waits for the next run."""
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD, records=120)
    workload = make_orders(partitions=1, per_partition=60, hours=2, seed=10, topic=setup.topic, start_offset=120)
    assert produce_records(kafka_bootstrap, workload.records[0]) == [r.offset for r in workload.records[0]]
    later = [record for record in workload.records[0] if record.offset != 150]

    def archive_more() -> None:
        assert setup.esm.deliver(later)
        flush(archive, setup.config)

    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        first = recoverer(archive, setup, log, RunOtherAt(AFTER_RECOVERY_CLAIM, archive_more)).run()
        assert first.records == len(WITHHELD)
        second = recoverer(archive, setup, log).run()
    assert second.records == 1 and [(u.first, u.last) for u in second.units] == [(150, 150)]
    setup.esm.workload.expected.extend(workload.expected)
    assert_exactly_once(archive, setup)
    assert audit(archive, setup, kafka_bootstrap).clean


def test_a_claimed_unit_whose_records_route_elsewhere_now_is_refused_and_stays_pending(archive, kafka_bootstrap):
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        with pytest.raises(SimulatedCrash):
            recoverer(archive, setup, log, CrashAt(AFTER_RECOVERY_CLAIM)).run()
        data = small_config_data(max_records=10_000, topic=setup.topic, format={"type": "parquet"})
        changed = replace(setup, config=parse_config(data))
        with pytest.raises(RecoverMismatchError, match="stays pending"):
            recoverer(archive, changed, log).run()
        assert archive.runtime(setup.config).ledger.recovery("orders", 0).pending is not None
        report = recoverer(archive, setup, log).run()  # the configuration it was claimed under finishes it
    assert report.records == len(WITHHELD)
    assert_exactly_once(archive, setup)


def test_records_the_log_no_longer_retains_are_reported_not_guessed(archive, kafka_bootstrap):
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD)

    class Truncated:
        """The log as retention left it: offsets below 40 deleted."""

        def __init__(self, log: KafkaLog) -> None:
            self.log = log

        def start_offset(self, partition: int) -> int:
            return 40

        def end_offset(self, partition: int) -> int:
            return self.log.end_offset(partition)

        def records(self, partition: int, first: int, last: int) -> Any:
            if first < 40:
                raise NotRetainedError(f"offset {first} is no longer retained")
            return self.log.records(partition, first, last)

    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        report = recoverer(archive, setup, Truncated(log)).run()
    assert report.not_retained == [(3, 3), (17, 19)]
    assert report.records == len({offset for offset in WITHHELD if offset >= 40})


def test_a_kinesis_stream_is_refused(archive):
    data = small_config_data(kind="kinesis")
    config = parse_config(data)
    runtime = archive.runtime(config)
    with pytest.raises(UnsupportedStreamError, match="recover reads Kafka"):
        Recoverer(
            runtime.writer(config.streams[0], "shardId-000000000000"),
            runtime.ledger,
            archive.s3,
            archive.bucket,
            None,  # type: ignore[arg-type]
            clock=archive.clock,
        )


def test_status_names_a_recovery_claimed_and_not_finished(archive, kafka_bootstrap):
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD)
    runtime = archive.runtime(setup.config)
    stream = setup.config.streams[0]
    assert stream_status(stream, runtime.ledger, archive.clock.now_ms(), partitions=[0]).stale == []
    with KafkaLog(kafka_bootstrap, setup.topic) as log, pytest.raises(SimulatedCrash):
        recoverer(archive, setup, log, CrashAt(AFTER_RECOVERY_CLAIM)).run()
    [row] = stream_status(stream, runtime.ledger, archive.clock.now_ms(), partitions=[0]).stale
    assert row.stale == [
        f"a recovery of {len(WITHHELD)} records at offsets 3..118 was claimed 0s ago and not finished: "
        "tidemark recover --stream orders -p 0 --bootstrap-servers ..."
    ]


def test_offsets_past_the_end_of_a_shorter_log_are_reported_not_dropped(archive, kafka_bootstrap):
    """Found by review: offsets past the log's end (a topic truncated or recreated shorter) were
    neither recovered nor reported ("nothing missing")."""
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD)

    class Short:
        """The log as a shorter one: it ends at offset 60."""

        def __init__(self, log: KafkaLog) -> None:
            self.log = log

        def start_offset(self, partition: int) -> int:
            return 0

        def end_offset(self, partition: int) -> int:
            return 60

        def records(self, partition: int, first: int, last: int) -> Any:
            if first >= 60:
                raise NotRetainedError(f"offset {first} is past the log's end (60)")
            return (record for record in self.log.records(partition, first, last) if record.offset < 60)

    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        report = recoverer(archive, setup, Short(log)).run()
    assert report.not_retained == [(90, 91), (118, 118)]
    assert report.records == len([offset for offset in WITHHELD if offset < 60])


def test_a_recreated_empty_topic_names_every_missing_offset(archive, kafka_bootstrap):
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD)
    recreate_topic(kafka_bootstrap, setup.topic, 1)
    objects = keys(archive)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        report = recoverer(archive, setup, log).run()
    assert report.not_retained == [(3, 3), (17, 19), (44, 44), (90, 91), (118, 118)]
    assert report.units == [] and keys(archive) == objects


@pytest.mark.parametrize("registry", [False, True], ids=["marks", "registry-archive"])
def test_a_recreated_topic_holding_other_records_there_is_refused(archive, kafka_bootstrap, registry):
    """Found by review: a topic recreated under the same name, before the archiver saw it, holds
    other records at the missing offsets; recover checks the log first -- against the ledger's
    marks, or a registry stream's (whose marks are of decoded values) against the archived records'
    timestamps, keys and headers -- and archives nothing."""
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD, registry=registry)
    recreate_topic(kafka_bootstrap, setup.topic, 1)
    later = BASE_MS + 3_600_000  # produced later: other timestamps
    other = make_orders(partitions=1, per_partition=120, hours=2, seed=31, topic=setup.topic, base_ms=later)
    assert produce_records(kafka_bootstrap, other.records[0]) == list(range(120))
    objects = keys(archive)
    with KafkaLog(kafka_bootstrap, setup.topic) as log, pytest.raises(RecoverMismatchError, match="another record"):
        recoverer(archive, setup, log).run()
    assert keys(archive) == objects
    assert archive.runtime(setup.config).ledger.recovery("orders", 0).pending is None


def test_a_partition_the_ledger_never_saw_says_so(archive, kafka_bootstrap):
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD)
    runtime = archive.runtime(setup.config)
    writer = runtime.writer(setup.config.streams[0], 7)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        report = Recoverer(writer, runtime.ledger, archive.s3, archive.bucket, log, clock=archive.clock).run()
    assert report.units == [] and report.unchecked.startswith("the ledger has no state for this partition")


def test_a_registry_stream_whose_archiver_saw_decoded_values_is_recovered(archive, kafka_bootstrap):
    """Found by review: the mapping's registry integration delivers its own rendering of each
    value, so the ledger's marks (of what was delivered) never match the log's bytes; the log is
    checked against the archived records instead."""
    topic = f"recover-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_bootstrap, topic, 1)
    data = small_config_data(max_records=10_000, topic=topic)
    data["streams"][0]["source"]["schema_registry"] = GLUE
    data["streams"][0]["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 2}}
    config = parse_config(data)
    workload = make_orders(partitions=1, per_partition=120, hours=2, seed=9, topic=topic)
    rows = workload.records[0]
    assert produce_records(kafka_bootstrap, rows) == [record.offset for record in rows]
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    decoded = [row if row.value is None else row._replace(value=b" " + row.value) for row in rows]
    for start in range(0, len(decoded), 30):
        assert esm.deliver([row for row in decoded[start : start + 30] if row.offset not in {3, 44}])
    flush(archive, config)
    setup = Withheld(config, esm, topic, {3, 44}, True)
    with KafkaLog(kafka_bootstrap, topic) as log:
        report = recoverer(archive, setup, log).run()
    assert report.records == 2
    assert audit(archive, setup, kafka_bootstrap).clean


def test_records_withheld_before_the_first_one_delivered_are_recovered_when_the_archive_began_at_the_log_start(
    archive, kafka_bootstrap
):
    """Found by review: records the mapping withheld before the first one it delivered lie below
    epoch 0's first accepted offset, where neither the audit nor a plain recover looks. With
    ``from_log_start`` (the mapping started at TRIM_HORIZON with a group of its own) they are."""
    withheld = {0, 1, 50}
    setup = archive_withholding(archive, kafka_bootstrap, withheld, registry=True)
    with KafkaLog(kafka_bootstrap, setup.topic) as log:
        plain = recoverer(archive, setup, log).run()
        assert plain.records == 1  # offset 50 only
        report = recoverer(archive, setup, log, from_log_start=True).run()
    assert report.records == 2
    assert_exactly_once(archive, setup)
    assert audit(archive, setup, kafka_bootstrap).clean


def test_an_audit_beside_a_claimed_unit_does_not_call_its_upload_unknown(archive, kafka_bootstrap):
    """Found by the seeded schedule: a recovery that died after its upload left an object the
    audit called ``unknown_object``; like a sealed flush's upload, a claim's is not the archive's
    yet (its positions are still a gap until a rerun commits it)."""
    setup = archive_withholding(archive, kafka_bootstrap, WITHHELD)
    with KafkaLog(kafka_bootstrap, setup.topic) as log, pytest.raises(SimulatedCrash):
        recoverer(archive, setup, log, CrashAt(AFTER_UPLOAD)).run()
    assert archive.runtime(setup.config).ledger.recovery("orders", 0).pending is not None
    report = audit(archive, setup, kafka_bootstrap)
    assert {finding.kind for finding in report.findings} == {GAP}


def deliver_and_recover(archive: Any, bootstrap: str, batches: list[slice], flushed: bool) -> Any:
    topic = f"recover-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, 1)
    config = parse_config(small_config_data(max_records=10_000, topic=topic))
    workload = make_orders(partitions=1, per_partition=80, hours=1, seed=9, topic=topic)
    rows = workload.records[0]
    assert produce_records(bootstrap, rows) == list(range(80))
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert esm.deliver(rows[batches[0]])
    flush(archive, config)
    for batch in batches[1:]:
        assert esm.deliver(rows[batch])
    if flushed:
        flush(archive, config)
    setup = Withheld(config, esm, topic, set(), False)
    with KafkaLog(bootstrap, topic) as log:
        return recoverer(archive, setup, log).run()


def test_records_withheld_at_the_end_of_the_committed_range_are_recovered_beside_a_staged_batch(
    archive, kafka_bootstrap
):
    """Found by the seeded schedule: 0..31 committed, 32 and 33 withheld, 34..79 staged. The read
    around 32..33 held no record the ledger marked, and recover refused."""
    report = deliver_and_recover(archive, kafka_bootstrap, [slice(0, 32), slice(34, 80)], flushed=False)
    assert report.records == 2


def test_a_withheld_run_aligned_on_the_grid_of_marks_is_recovered(archive, kafka_bootstrap):
    """Found by the seeded schedule: 32..47 withheld whole (a batch past bounded retries), the
    records around them flushed; the read of 32..47 alone held no marked record, for good."""
    report = deliver_and_recover(archive, kafka_bootstrap, [slice(0, 32), slice(48, 80)], flushed=True)
    assert report.records == 16
