"""A Kinesis mapping recreated (consumer shared <-> efo, a new starting position) starts again at
TRIM_HORIZON: the whole retained shard comes again, far below the redelivery window. Kinesis never
hands a sequence number out twice, so that is a replay to drop, not a reset to refuse. Kafka's
recreated topics restart at offset 0, so there the same batch is judged by the epoch's marks: the
archived log replayed from its start (offsets expired, TRIM_HORIZON) is dropped, another log at
those offsets is refused."""

from __future__ import annotations

import pytest

from tests.support.events import event_of
from tests.support.harness import EsmModel, assert_exactly_once, small_config
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.exceptions import PositionResetError
from tidemark.resets import BELOW_WINDOW, BYTES_DIFFER, MARK_GRID
from tidemark.sources import KAFKA, KINESIS


def _archive_in_small_batches(archive, config, kind):
    workload = make_orders(partitions=1, per_partition=200, hours=1, bad_share=0, late_share=0, seed=3, kind=kind)
    ((partition, records),) = workload.records.items()
    archiver = Archiver(archive.runtime(config))
    for start in range(0, 160, 4):  # 40 accepts: the first records fall out of the fingerprint window
        archiver.handle(event_of(records[start : start + 4], kind))
    return workload, partition, records, archiver


def test_a_kinesis_shard_replayed_from_the_start_is_dropped_as_archived(archive):
    config = small_config(kind=KINESIS, max_records=50)
    workload, _shard, records, archiver = _archive_in_small_batches(archive, config, KINESIS)
    replay = archiver.handle(event_of(records[0:120], KINESIS))["orders"]
    assert (replay.records_in, replay.staged, replay.duplicates) == (120, 0, 120)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    esm.committed = {_shard: records[160].offset}
    esm.drain(40)
    archive.clock.advance(minutes=31)
    archive.runtime(config).writer(config.streams[0], _shard).maintain()
    assert_exactly_once(archive, config, esm)


def test_a_kinesis_record_that_differs_at_a_known_position_is_still_refused(archive):
    config = small_config(kind=KINESIS, max_records=50)
    _workload, _shard, records, archiver = _archive_in_small_batches(archive, config, KINESIS)
    changed = records[156]._replace(value=b'{"order_id":"another record"}')  # the last accept's first
    with pytest.raises(PositionResetError) as refused:
        archiver.handle(event_of([changed], KINESIS))
    assert refused.value.refused[0].kind == BYTES_DIFFER


def test_a_kafka_partition_replayed_from_the_start_is_dropped_and_another_log_refused(archive):
    config = small_config(max_records=50)
    _workload, _partition, records, archiver = _archive_in_small_batches(archive, config, KAFKA)
    replay = archiver.handle(event_of(records[0:120], KAFKA))["orders"]
    assert (replay.records_in, replay.staged, replay.duplicates) == (120, 0, 120)
    recreated = [record._replace(value=b'{"order_id":"another log"}') for record in records[0:120]]
    with pytest.raises(PositionResetError) as refused:
        archiver.handle(event_of(recreated, KAFKA))
    assert refused.value.refused[0].kind == BYTES_DIFFER
    # a short batch of the same log is told by the accepts' marked ends (offsets 3, 4, 7, 8, ...)
    short = archiver.handle(event_of(records[1:MARK_GRID], KAFKA))["orders"]
    assert (short.staged, short.duplicates) == (0, MARK_GRID - 1)
    with pytest.raises(PositionResetError) as refused:  # below the window, no marked record: nothing to tell
        archiver.handle(event_of(records[1:3], KAFKA))
    assert refused.value.refused[0].kind == BELOW_WINDOW
