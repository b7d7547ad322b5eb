"""``tidemark audit`` must never call a broken archive clean, nor a whole one broken (issue 29):

* each epoch is tiled from its known first position (epoch 0: the first offset the ledger
  accepted; a later epoch: its start) to its known last one, and a partition with accepted records
  but no object left is a gap -- not silence;
* a flush that commits while the audit reads is no gap: the ledger's positions are taken before
  the listing;
* objects of a format that keeps no positions are count-checked, and the objects beside them that
  keep positions are still tiled.

Objects are *erased* here -- the S3 object and its ledger item both, so that nothing but the
tiling can tell."""

from __future__ import annotations

from tests.support.audit import Probe, committed, dense, erase, holding_all
from tests.support.harness import EsmModel, finish, small_config, small_config_data
from tests.support.workload import BASE_MS, HOUR_MS, Workload, make_orders
from tidemark.audit import Auditor, AuditReport
from tidemark.audit.findings import GAP, MISSING_OBJECT
from tidemark.config import TidemarkConfig, parse_config
from tidemark.ledger.dynamodb import state_pk
from tidemark.sources import KINESIS, PartitionId

TEXT = {"type": "text", "compression": "zstd"}


def text_config(**flush) -> TidemarkConfig:
    """The stream archived as plain text, which keeps no positions (and so has no aggregation)."""
    data = small_config_data(format=TEXT, **flush)
    del data["streams"][0]["aggregations"]
    return parse_config(data)


def archived(archive, config: TidemarkConfig, workload: Workload, batch: int = 40) -> EsmModel:
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    finish(archive, config, esm, batch)
    return esm


def audit(archive, config, probe=None, progress=None) -> AuditReport:
    runtime = archive.runtime(config)
    return Auditor(config, "orders", runtime.ledger, archive.s3, archive.bucket, probe=probe).run(progress=progress)


def gaps(report: AuditReport) -> list[tuple[PartitionId, int, int, int]]:
    return sorted((f.partition, f.epoch, f.first, f.last) for f in report.findings if f.kind == GAP)


def lines(report: AuditReport) -> list[str]:
    return [finding.line() for finding in report.findings]


# -- finding 2: the ends of an epoch, and a whole partition ------------------------------------


def test_the_first_object_of_a_partition_erased_is_a_gap(archive):
    config = small_config()
    archived(archive, config, dense(partitions=1, per_partition=120, seed=3))
    first = committed(archive.runtime(config).ledger)[0]
    assert first.first == 0 and first.last < 119
    erase(archive, first)

    report = audit(archive, config)
    assert gaps(report) == [(0, 0, 0, first.last)], lines(report)
    assert report.partitions[0].checked_from == 0  # the ledger's first accepted offset, not the lowest held
    # With the source asked: Kafka still holds those records, so they are lost from the archive.
    holding = Probe(holding_all)
    report = audit(archive, config, probe=holding)
    assert gaps(report) == [(0, 0, 0, first.last)] and (0, 0, first.last) in holding.asked
    assert f"still holds {first.records} records" in report.findings[0].detail
    # Kafka holds nothing there any more (compacted away since): offset 0 is still a record the
    # ledger accepted, so the gap is the archive's.
    compacted = Probe(lambda _p, _first, _last: 0)
    report = audit(archive, config, probe=compacted)
    assert gaps(report) == [(0, 0, 0, first.last)]
    assert "the ledger accepted a record at offset 0" in report.findings[0].detail


def test_the_tail_of_an_earlier_epoch_and_the_head_of_the_next_erased_are_gaps(archive):
    config = small_config(max_records=20)
    old = archived(archive, config, dense(partitions=1, per_partition=100, seed=1), 10)
    archive.runtime(config).writer(config.streams[0], 0).start_epoch(0, reason="topic recreated")
    archived(archive, config, dense(partitions=1, per_partition=100, seed=2, base_ms=BASE_MS + 2 * HOUR_MS), 10)
    assert old.workload.records[0][-1].offset == 99
    objects = committed(archive.runtime(config).ledger)
    tail = next(obj for obj in objects if obj.epoch == 0 and obj.last == 99)
    head = next(obj for obj in objects if obj.epoch == 1 and obj.first == 0)
    assert (tail.first, head.last) == (80, 19)
    erase(archive, tail)
    erase(archive, head)

    report = audit(archive, config)
    assert gaps(report) == [(0, 0, 80, 99), (0, 1, 0, 19)], lines(report)
    # The source is the *recreated* topic: it says nothing of epoch 0's log, whatever it holds at
    # those offsets -- an earlier epoch's gap stays a finding even where the new log has no record.
    empty = Probe(lambda _p, _first, _last: 0)
    report = audit(archive, config, probe=empty)
    assert gaps(report) == [(0, 0, 80, 99)], lines(report)
    assert "epoch 0" in report.findings[0].detail
    assert all(first <= last for _partition, first, last in empty.asked)
    assert (0, 80, 99) not in empty.asked


def test_a_partition_whose_every_object_is_erased_is_a_gap(archive):
    config = small_config()
    archived(archive, config, dense(partitions=2, per_partition=120, seed=4))
    archive.runtime(config).ledger.register_partitions("orders", [0, 1])  # as the sweeper does
    for obj in committed(archive.runtime(config).ledger):
        if obj.partition == 1:
            erase(archive, obj)

    report = audit(archive, config)
    assert gaps(report) == [(1, 0, 0, 119)], lines(report)
    assert "no object" in report.findings[0].detail
    summaries = {summary.partition: summary for summary in report.partitions}
    assert sorted(summaries) == [0, 1]
    assert (summaries[1].objects, summaries[1].checked_from, summaries[1].checked_through) == (0, 0, 119)


def test_an_epoch_start_with_nothing_accepted_since_needs_no_object(archive):
    """The other side of the bounds: an epoch begun and not yet written to, and a partition state
    that never accepted a record, are no gaps."""
    config = small_config()
    archived(archive, config, dense(partitions=1, per_partition=60, seed=6))
    archive.runtime(config).writer(config.streams[0], 0).start_epoch(0, reason="topic recreated")
    archive.runtime(config).ledger.register_partitions("orders", [0, 7])  # 7: registered, never written
    report = audit(archive, config)
    assert report.findings == [] and report.complete, lines(report)
    assert [(s.partition, s.epoch, s.records) for s in report.partitions] == [(0, 0, 60)]


def test_a_state_written_before_the_first_accepted_offset_was_kept_says_what_it_cannot_check(archive):
    """A ledger item from before ``first_accepted`` existed still loads: epoch 0 is then tiled from
    its lowest archived offset, and the report says its head was not checked -- never "clean"."""
    config = small_config()
    archived(archive, config, dense(partitions=1, per_partition=120, seed=3))
    key = {"pk": {"S": state_pk("orders", 0)}, "sk": {"S": "STATE"}}
    item = archive.dynamodb.get_item(TableName=archive.table, Key=key, ConsistentRead=True)["Item"]
    assert item.pop("first_accepted") == {"N": "0"}
    archive.dynamodb.put_item(TableName=archive.table, Item=item)
    assert archive.runtime(config).ledger.load("orders", 0).first_accepted is None
    assert audit(archive, config).complete  # offset 0 is archived: nothing can be below it

    first = committed(archive.runtime(config).ledger)[0]
    erase(archive, first)
    report = audit(archive, config)
    assert report.findings == [] and not report.complete
    [unchecked] = report.unchecked
    assert (unchecked.partition, unchecked.epoch, unchecked.first, unchecked.last) == (0, 0, None, first.last)
    assert "first accepted offset is not known" in unchecked.line()
    for obj in committed(archive.runtime(config).ledger):  # every object: the staged offset says records were
        erase(archive, obj)
    archive.runtime(config).ledger.register_partitions("orders", [0])  # as the sweeper does
    report = audit(archive, config)
    assert gaps(report) == [(0, 0, 119, 119)] and "no object holds any" in report.findings[0].detail


# -- finding 3: an audit beside a live archiver -----------------------------------------------


def test_a_flush_committed_while_the_audit_reads_is_no_gap(archive):
    config = small_config()
    esm = EsmModel(dense(partitions=1, per_partition=60, seed=8), lambda crash: archive.runtime(config, crash))
    assert esm.deliver(esm.batch(0, 50))  # 50 records seal and commit one object
    assert esm.deliver(esm.batch(0, 10))  # 10 stay open
    runtime = archive.runtime(config)
    assert runtime.ledger.load("orders", 0).committed_through() == 49

    def flush_meanwhile(done: int, _total: int) -> None:  # at the audit's first read of an object
        if done == 1:
            archive.clock.advance(minutes=31)
            runtime.writer(config.streams[0], 0).maintain()

    report = audit(archive, config, progress=flush_meanwhile)
    assert runtime.ledger.load("orders", 0).committed_through() == 59  # it did commit, mid-audit
    assert report.findings == [], lines(report)
    assert report.partitions[0].checked_through == 49
    report = audit(archive, config)  # and the next audit sees the new object
    assert report.findings == [] and report.partitions[0].checked_through == 59


# -- finding 4: objects that keep no positions -------------------------------------------------


def test_an_erased_object_beside_positionless_ones_is_a_gap(archive):
    """Archived as text (no positions) and then as JSON Lines: the JSON Lines objects are tiled."""
    text = text_config()
    workload = dense(partitions=1, per_partition=200, seed=9)
    esm = EsmModel(workload, lambda crash: archive.runtime(text, crash))
    assert esm.deliver(esm.batch(0, 100))
    jsonl = small_config(max_records=95)
    esm.make_runtime = lambda crash: archive.runtime(jsonl, crash)
    esm._warm = None
    finish(archive, jsonl, esm, 5)
    objects = committed(archive.runtime(jsonl).ledger)
    assert {obj.key.rsplit(".", 2)[-2] for obj in objects} == {"txt", "jsonl"}
    victim = next(obj for obj in objects if ".jsonl." in obj.key and obj.records == 95)
    erase(archive, victim)

    report = audit(archive, jsonl)
    assert gaps(report) == [(0, 0, victim.first, victim.last)], lines(report)
    holding = Probe(holding_all)
    assert gaps(audit(archive, jsonl, probe=holding)) == [(0, 0, victim.first, victim.last)]


def test_positionless_objects_are_count_checked(archive):
    """A text archive over several hours (late records: objects' offset ranges interleave) is
    whole by count, and one object lost from S3 leaves a shortfall the count names."""
    config = text_config()
    esm = archived(archive, config, make_orders(partitions=1, per_partition=150, seed=21))
    report = audit(archive, config)
    assert report.findings == [] and report.complete, lines(report)
    produced = len(esm.workload.records[0])
    assert report.partitions[0].records == produced and report.partitions[0].checked_through == produced - 1

    victim = next(obj for obj in committed(archive.runtime(config).ledger) if obj.kind == "raw" and obj.records > 1)
    archive.s3.delete_object(Bucket=archive.bucket, Key=victim.key)  # the ledger still records it
    report = audit(archive, config)
    assert sorted({f.kind for f in report.findings}) == [GAP, MISSING_OBJECT], lines(report)
    found = [f for f in report.findings if f.kind == GAP]
    for position in (victim.first, victim.last):
        assert any(f.first <= position <= f.last for f in found), lines(report)


def test_a_shard_whose_first_or_every_object_is_erased_is_a_gap(archive):
    """Kinesis sequence numbers are never contiguous: no tiling -- but the first record the ledger
    accepted must be in an object, and so must some record of a shard that accepted any."""
    config = small_config(kind=KINESIS)
    esm = archived(archive, config, make_orders(partitions=2, per_partition=150, seed=21, kind=KINESIS))
    assert audit(archive, config).findings == []
    shards = sorted(esm.workload.records)
    objects = committed(archive.runtime(config).ledger)
    first = min((obj for obj in objects if obj.partition == shards[0]), key=lambda obj: obj.first)
    erase(archive, first)
    for obj in objects:
        if obj.partition == shards[1]:
            erase(archive, obj)
    archive.runtime(config).ledger.register_partitions("orders", shards)

    report = audit(archive, config)
    produced = {shard: [record.offset for record in esm.workload.records[shard]] for shard in shards}
    found = {f.partition: f for f in report.findings}
    assert sorted(f.kind for f in report.findings) == [GAP, GAP], lines(report)
    assert found[shards[0]].first == produced[shards[0]][0] < found[shards[0]].last
    assert (found[shards[1]].first, found[shards[1]].last) == (produced[shards[1]][0], produced[shards[1]][-1])


def test_a_shard_whose_state_predates_the_first_accepted_record_is_not_called_clean(archive):
    """Kinesis, a ledger item from before ``first_accepted``: whether the shard's first record is
    archived cannot be proven, so the audit says so instead of "clean" (it has no finding)."""
    config = small_config(kind=KINESIS)
    esm = archived(archive, config, make_orders(partitions=1, per_partition=100, seed=22, kind=KINESIS))
    [shard] = sorted(esm.workload.records)
    assert audit(archive, config).complete
    key = {"pk": {"S": state_pk("orders", shard)}, "sk": {"S": "STATE"}}
    item = archive.dynamodb.get_item(TableName=archive.table, Key=key, ConsistentRead=True)["Item"]
    item.pop("first_accepted")
    archive.dynamodb.put_item(TableName=archive.table, Item=item)
    report = audit(archive, config)
    assert report.findings == [] and not report.complete
    assert [(u.partition, u.epoch) for u in report.unchecked] == [(shard, 0)]
