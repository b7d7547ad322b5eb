"""``tidemark status`` from a real ledger (moto server): offsets, buffers, flushes, lag, staleness."""

from __future__ import annotations

from tests.support.harness import EsmModel, finish, quarantined_partition, small_config
from tests.support.workload import make_orders
from tidemark.sources import PartitionId
from tidemark.status import stream_status

MINUTE = 60_000


class Ends:
    """The source's end offsets, as a test says they are; every offset a record, unless
    ``markers`` says how many of the offsets past the staged ones are transaction markers."""

    def __init__(self, ends: dict[PartitionId, int], markers: int = 0) -> None:
        self.ends = ends
        self.markers = markers

    def end_offset(self, partition: PartitionId) -> int:
        return self.ends[partition]

    def records_between(self, partition: PartitionId, first: int, last: int) -> int | None:
        return max(last - first + 1 - self.markers, 0)


def test_a_partition_with_open_buffers_and_everything_before_them_in_s3(archive):
    config = small_config(max_records=10_000)
    workload = make_orders(partitions=2, per_partition=80, seed=3)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    for partition in (0, 1):
        assert esm.deliver(esm.batch(partition, 80))
    runtime = archive.runtime(config)
    now = archive.clock.now_ms()
    status = stream_status(config.streams[0], runtime.ledger, now, partitions=[0, 1], source=Ends({0: 80, 1: 95}))
    assert [row.partition for row in status.partitions] == [0, 1]
    zero, one = status.partitions
    assert (zero.staged_offset, zero.committed_through, zero.lag, zero.end_offset) == (79, -1, 0, 80)
    assert one.lag == 15  # 15 records the source holds beyond the staged offset
    assert zero.open_buffers == len(runtime.ledger.load("orders", 0).buffers) > 0
    assert sum(buffer.records for buffer in zero.buffers) == 80
    assert all(buffer.state == "open" and buffer.age_s == 0 for buffer in zero.buffers)
    assert status.stale == []  # young buffers, recent accepts

    # Half an hour later nothing was flushed (no sweeper ran): past max_age plus the grace.
    later = now + 31 * MINUTE
    stale = stream_status(config.streams[0], runtime.ledger, later, partitions=[0, 1], source=Ends({0: 80, 1: 95}))
    assert [row.partition for row in stale.stale] == [0, 1]
    assert any("open for 31m" in reason for reason in stale.partitions[0].stale)
    assert any("15 records behind and nothing accepted for 31m" in reason for reason in stale.partitions[1].stale)

    # The sweeper's maintenance flushes them: everything in S3, nothing stale (partition 0 caught up).
    archive.clock.advance(minutes=31)
    finish(archive, config, esm)
    done = stream_status(config.streams[0], runtime.ledger, later, partitions=[0, 1], source=Ends({0: 80, 1: 80}))
    assert [(row.committed_through, row.open_buffers, row.stale) for row in done.partitions] == [
        (79, 0, []),
        (79, 0, []),
    ]


def test_a_quarantined_flush_makes_its_partition_stale(archive):
    config, runtime = quarantined_partition(archive)
    status = stream_status(config.streams[0], runtime.ledger, archive.clock.now_ms(), partitions=[0])
    (row,) = status.partitions
    quarantined = [buffer for buffer in row.buffers if buffer.state == "quarantined"]
    assert len(quarantined) == 1 and quarantined[0].detail
    assert row.committed_through < quarantined[0].first or row.committed_through == quarantined[0].first - 1
    first, last = quarantined[0].first, quarantined[0].last
    command = f"tidemark rearchive --stream orders -p 0 --from-offset {first} --to-offset {last}"
    assert any("quarantined" in reason and command in reason for reason in row.stale)  # what to run, said


def test_a_commit_marker_is_no_lag_and_a_partition_never_seen_is_not_stale(archive):
    config = small_config(max_records=10_000)
    workload = make_orders(partitions=1, per_partition=40, hours=1, seed=8)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert esm.deliver(esm.batch(0, 40))
    archive.clock.advance(minutes=31)
    finish(archive, config, esm)
    runtime = archive.runtime(config)
    later = archive.clock.now_ms() + 60 * MINUTE
    # offset 40 is a transaction's commit marker: the end offset is 41, no record is missing
    (quiet,) = stream_status(
        config.streams[0], runtime.ledger, later, partitions=[0], source=Ends({0: 41}, 1)
    ).partitions
    assert (quiet.end_offset, quiet.lag, quiet.stale) == (41, 0, [])
    # partition 5 was never archived (a mapping started at LATEST): it lags, it is not stale
    never = stream_status(config.streams[0], runtime.ledger, later, partitions=[5], source=Ends({5: 3000}))
    (row,) = never.partitions
    assert (row.staged_offset, row.lag, row.stale) == (-1, 3000, [])
