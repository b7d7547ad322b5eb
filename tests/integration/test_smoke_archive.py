from __future__ import annotations

from dataclasses import replace

from tests.support.events import msk_event
from tests.support.workload import batches, make_orders
from tidemark.archiver import Archiver
from tidemark.verify import RecordMeta, verify_archive


def test_workload_round_trip(archive, example_config):
    runtime = archive.runtime(example_config)
    archiver = Archiver(runtime)
    workload = make_orders(partitions=2, per_partition=300)
    for records in workload.records.values():
        for batch in batches(records, 50):
            archiver.handle(msk_event(batch))
    archive.clock.advance(minutes=16)
    for partition in workload.records:
        runtime.writer(example_config.streams[0], partition).maintain()
    report = verify_archive(archive.s3, archive.bucket, "orders", workload.expected)
    print(report.summary())
    assert report.ok, report.summary()


def test_drain_writes_every_open_buffer_now_with_its_reason(archive, example_config):
    """Nothing is due (small buffers, no time passed), yet drain seals and writes them all."""
    runtime = archive.runtime(example_config)
    workload = make_orders(partitions=2, per_partition=120, hours=3)
    Archiver(runtime).handle(msk_event(workload.all_records()))
    stream = example_config.streams[0]
    assert all(runtime.writer(stream, p).maintain().flushes == [] for p in workload.records)

    outcomes = [runtime.writer(stream, p).drain() for p in workload.records]

    assert {flush.reason for outcome in outcomes for flush in outcome.flushes} == {"drain"}
    assert all(not runtime.ledger.load("orders", p).buffers for p in workload.records)
    report = verify_archive(archive.s3, archive.bucket, "orders", workload.expected)
    assert report.ok and report.archived + report.dead_lettered == len(workload.expected), report.summary()
    assert not list(archive.staging_root.rglob("*.seg"))


def test_verification_checks_topic_key_and_headers_when_it_knows_them(archive, example_config):
    runtime = archive.runtime(example_config)
    workload = make_orders(partitions=1, per_partition=60)
    records = {(r.partition, r.offset): r for r in workload.all_records()}
    Archiver(runtime).handle(msk_event(list(records.values())))
    runtime.writer(example_config.streams[0], 0).drain()
    with_meta = [
        replace(
            item,
            meta=RecordMeta(
                records[(item.partition, item.offset)].topic,
                records[(item.partition, item.offset)].key,
                records[(item.partition, item.offset)].headers,
            ),
        )
        for item in workload.expected
    ]
    assert verify_archive(archive.s3, archive.bucket, "orders", with_meta).ok

    wrong_key = replace(with_meta[5], meta=replace(with_meta[5].meta, key=b"someone-else"))
    wrong_header = replace(with_meta[9], meta=replace(with_meta[9].meta, headers=(("trace", b"x"),)))
    report = verify_archive(
        archive.s3,
        archive.bucket,
        "orders",
        [*with_meta[:5], wrong_key, *with_meta[6:9], wrong_header, *with_meta[10:]],
    )
    assert report.corrupted == [(0, with_meta[5].offset), (0, with_meta[9].offset)]
    assert not report.lost and not report.duplicated and not report.misfiled
