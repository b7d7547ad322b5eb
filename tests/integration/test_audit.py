"""``tidemark audit`` against a real archive (moto server): clean when whole, and each injected
fault found and named -- a deleted object, changed bytes, a ledger record of a missing object, an
object the ledger does not know, a gap the source still holds records in, a quarantined flush."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.harness import EsmModel, finish, quarantined_partition, small_config
from tests.support.workload import make_orders
from tidemark.audit import Auditor, AuditReport, Finding
from tidemark.audit.findings import (
    CHANGED_BYTES,
    COUNT_MISMATCH,
    GAP,
    MISSING_OBJECT,
    OVERLAP,
    QUARANTINED,
    UNKNOWN_OBJECT,
    UNREADABLE,
)
from tidemark.config import TidemarkConfig
from tidemark.ledger.dynamodb import _serialize, object_to_item
from tidemark.objects.keys import positions_of_key
from tidemark.sources import KINESIS, PartitionId


class Probe:
    """The source log, as a test says it is: ``held`` records between two offsets."""

    def __init__(self, held: int) -> None:
        self.held = held
        self.asked: list[tuple[PartitionId, int, int]] = []

    def records_between(self, partition: PartitionId, first: int, last: int) -> int:
        self.asked.append((partition, first, last))
        return self.held

    def partitions(self) -> list[int]:
        return [0]


def archived(archive, *, kind: str = "kafka", partitions: int = 2) -> tuple[TidemarkConfig, EsmModel]:
    config = small_config(kind=kind)
    workload = make_orders(partitions=partitions, per_partition=150, seed=21, kind=kind)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    finish(archive, config, esm)
    return config, esm


def audit(archive, config, probe=None, **hours) -> AuditReport:
    runtime = archive.runtime(config)
    return Auditor(config, "orders", runtime.ledger, archive.s3, archive.bucket, probe=probe).run(**hours)


def keys(archive, prefix: str = "raw/") -> list[str]:
    pages = archive.s3.get_paginator("list_objects_v2").paginate(Bucket=archive.bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def kinds(report: AuditReport) -> list[str]:
    return sorted({finding.kind for finding in report.findings})


@pytest.mark.parametrize("kind", ["kafka", KINESIS])
def test_a_whole_archive_is_clean(archive, kind):
    config, esm = archived(archive, kind=kind)
    report = audit(archive, config)
    assert report.findings == []
    assert report.clean and report.gaps_checked
    produced = sum(len(records) for records in esm.workload.records.values())
    assert report.records == produced  # dead letters count as present
    assert report.objects == len(keys(archive)) + len(keys(archive, "errors/"))
    for summary in report.partitions:
        records = esm.workload.records[summary.partition]
        assert (summary.first, summary.last) == (records[0].offset, records[-1].offset)
        if kind == "kafka":
            assert summary.checked_through == records[-1].offset


def test_a_deleted_object_is_missing_and_leaves_a_gap(archive):
    config, _esm = archived(archive)
    victim = keys(archive)[1]
    partition, first, last = positions_of_key(victim)
    archive.s3.delete_object(Bucket=archive.bucket, Key=victim)
    report = audit(archive, config)
    missing = [f for f in report.findings if f.kind == MISSING_OBJECT]
    assert [(f.key, f.partition, f.first, f.last) for f in missing] == [(victim, partition, first, last)]
    gaps = [f for f in report.findings if f.kind == GAP]
    assert gaps and all(f.partition == partition and first <= f.first <= f.last <= last for f in gaps)
    assert kinds(report) == [GAP, MISSING_OBJECT]


def test_changed_bytes_are_found(archive):
    config, _esm = archived(archive)
    victim = keys(archive)[0]
    obj = archive.s3.get_object(Bucket=archive.bucket, Key=victim)
    body = obj["Body"].read()
    archive.s3.put_object(Bucket=archive.bucket, Key=victim, Body=body + b"\n", Metadata=obj["Metadata"])
    report = audit(archive, config)
    # A byte appended to a zstd stream: changed, and no longer readable, so its records are gaps.
    assert kinds(report) == [CHANGED_BYTES, GAP, UNREADABLE]
    (changed,) = [f for f in report.findings if f.kind == CHANGED_BYTES]
    assert changed.key == victim and "ledger" in changed.detail
    partition, first, last = positions_of_key(victim)
    assert all(f.partition == partition and first <= f.first <= f.last <= last for f in report.findings)


def test_a_ledger_record_of_an_object_that_was_never_written(archive):
    config, _esm = archived(archive)
    runtime = archive.runtime(config)
    real = next(
        obj
        for mark in runtime.ledger.hour_marks("orders")
        for obj in runtime.ledger.committed_objects("orders", mark.hour)
    )
    ghost = dataclasses.replace(
        real, key=real.key.replace(f"{real.first:020d}", f"{real.first + 1:020d}"), first=real.first + 1
    )
    assert ghost.key != real.key
    archive.dynamodb.put_item(TableName=archive.table, Item=_serialize(object_to_item(ghost)))
    report = audit(archive, config)
    assert [(f.kind, f.key) for f in report.findings] == [(MISSING_OBJECT, ghost.key)]


def test_an_object_the_ledger_does_not_know_is_found_with_the_records_it_repeats(archive):
    config, _esm = archived(archive)
    original = keys(archive)[0]
    partition, first, last = positions_of_key(original)
    stray = original[: original.rindex("/") + 1] + "x" + original[original.rindex("/") + 1 :]
    archive.s3.copy_object(Bucket=archive.bucket, Key=stray, CopySource={"Bucket": archive.bucket, "Key": original})
    report = audit(archive, config)
    assert kinds(report) == [OVERLAP, UNKNOWN_OBJECT]
    unknown = [f for f in report.findings if f.kind == UNKNOWN_OBJECT]
    assert [(f.key, f.partition, f.first, f.last) for f in unknown] == [(stray, partition, first, last)]
    overlaps = [f for f in report.findings if f.kind == OVERLAP]
    assert {f.key for f in overlaps} <= {original, stray} and all(f.partition == partition for f in overlaps)


def test_gaps_are_checked_against_the_source_when_it_can_be_asked(archive):
    config, _esm = archived(archive, partitions=1)
    victim = keys(archive)[0]
    archive.s3.delete_object(Bucket=archive.bucket, Key=victim)
    # Kafka holds nothing there (compaction, transaction markers): explained, not a gap.
    quiet = Probe(held=0)
    report = audit(archive, config, probe=quiet)
    assert kinds(report) == [MISSING_OBJECT] and quiet.asked
    assert report.partitions[0].gaps_explained == len(quiet.asked)
    # Kafka still holds records there: they are missing from the archive.
    holding = Probe(held=3)
    report = audit(archive, config, probe=holding)
    assert kinds(report) == [GAP, MISSING_OBJECT]
    assert all("still holds 3 records" in f.detail for f in report.findings if f.kind == GAP)


def test_an_hour_range_checks_objects_but_not_gaps(archive):
    config, _esm = archived(archive, partitions=1)
    all_keys = keys(archive)
    victim = all_keys[-1]
    archive.s3.delete_object(Bucket=archive.bucket, Key=victim)
    runtime = archive.runtime(config)
    hours = [mark.hour for mark in runtime.ledger.hour_marks("orders")]
    report = audit(archive, config, first_hour=hours[0], last_hour=hours[0])
    assert not report.gaps_checked
    assert all(f.kind != GAP for f in report.findings)
    assert report.objects < len(all_keys)


def test_a_quarantined_flush_is_a_finding(archive):
    config, _runtime = quarantined_partition(archive)
    report = audit(archive, config)
    quarantined = [f for f in report.findings if f.kind == QUARANTINED]
    assert len(quarantined) == 1 and quarantined[0].partition == 0
    assert "not in S3" in quarantined[0].detail


def test_findings_read_as_one_line_each() -> None:
    finding = Finding(COUNT_MISMATCH, 3, 100, 199, "raw/orders/k", "99 records, ledger 100", epoch=2)
    assert (
        finding.line() == "count_mismatch: partition 3 epoch 2, offsets 100..199, raw/orders/k: 99 records, ledger 100"
    )


def test_an_upload_whose_commit_is_in_flight_is_not_an_unknown_object(archive):
    """Between an upload and its commit the object is in S3 and its flush SEALED in the ledger:
    the archive's, not a stray. The audit says nothing of it; once committed, it is audited."""
    from tidemark.faults import AFTER_UPLOAD, CrashAt

    config = small_config()
    workload = make_orders(partitions=1, per_partition=120, hours=1, seed=9)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert not esm.deliver(esm.batch(0, 60), CrashAt(AFTER_UPLOAD))  # the hour's 50th record seals a flush
    runtime = archive.runtime(config)
    sealed = {flush.object_key for flush in runtime.ledger.load("orders", 0).sealed.values()}
    assert sealed and sealed <= set(keys(archive))  # uploaded, not committed
    report = audit(archive, config)
    assert all(finding.kind != UNKNOWN_OBJECT for finding in report.findings)
    finish(archive, config, esm)
    assert audit(archive, config).findings == []
