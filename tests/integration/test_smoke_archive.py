from __future__ import annotations

from tests.support.events import msk_event
from tests.support.workload import batches, make_orders
from tidemark.archiver import Archiver
from tidemark.verify import verify_archive


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
