"""The partitions of one event are archived concurrently: a crash in one of them fails the
invocation only once every other partition has run to its end, and the redelivery archives
everything exactly once."""

from __future__ import annotations

import pytest

from tests.support.events import msk_event
from tests.support.harness import EsmModel, assert_exactly_once, finish, small_config
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.faults import BEFORE_SEGMENT_WRITE, CrashAt, SimulatedCrash


def test_a_crash_in_one_partition_fails_the_event_after_the_others_finished(archive):
    config = small_config(max_records=1000)
    workload = make_orders(partitions=4, per_partition=80, seed=31)
    firsts = {partition: records[:30] for partition, records in workload.records.items()}
    event = msk_event([record for records in firsts.values() for record in records])

    crash = CrashAt(BEFORE_SEGMENT_WRITE)  # the first partition to write a segment dies before it
    with pytest.raises(SimulatedCrash):
        Archiver(archive.runtime(config, crash)).handle(event)

    ledger = archive.runtime(config).ledger
    staged = {partition: ledger.load("orders", partition).staged_offset for partition in firsts}
    finished = [partition for partition, records in firsts.items() if staged[partition] == records[-1].offset]
    assert len(finished) == 3  # the other three ran to their end (one after another, they would not have)
    assert [staged[partition] for partition in firsts if partition not in finished] == [-1]

    # The mapping redelivers the event, then the rest of every partition.
    response = Archiver(archive.runtime(config)).handle(event)
    assert response["orders"].duplicates == 90 and response["orders"].staged == 30
    esm = EsmModel(workload, lambda points: archive.runtime(config, points))
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)
