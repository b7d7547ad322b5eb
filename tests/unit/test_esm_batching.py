"""tidemark.embedded.esm.batching: when the local event source mapping invokes."""

from __future__ import annotations

import pytest

from tidemark.embedded.esm.batching import ENVELOPE_BYTES, GROUP_OVERHEAD_BYTES, BatchBuilder, BatchLimits
from tidemark.exceptions import ConfigError
from tidemark.records.esm import payload_size
from tidemark.records.model import Record


def record(offset: int, size: int = 100, partition: int = 0) -> Record:
    return Record("orders", partition, offset, 0, b"x" * size)


def test_batch_closes_at_batch_size():
    builder = BatchBuilder(BatchLimits(batch_size=3, window_ms=1000))
    assert [builder.offer(record(n), now_ms=0) for n in range(3)] == [True, True, True]
    assert builder.full and builder.ready(now_ms=0)
    assert not builder.offer(record(3), now_ms=0)  # goes into the next batch
    assert [r.offset for r in builder.take()] == [0, 1, 2]
    assert builder.offer(record(3), now_ms=5) and not builder.ready(now_ms=5)


def test_window_counts_from_the_first_record():
    builder = BatchBuilder(BatchLimits(batch_size=100, window_ms=500))
    assert builder.remaining_ms(now_ms=10_000) == 500  # empty: a whole window to wait
    builder.offer(record(0), now_ms=1_000)
    builder.offer(record(1), now_ms=1_400)
    assert builder.remaining_ms(now_ms=1_400) == 100
    assert not builder.ready(now_ms=1_499)
    assert builder.ready(now_ms=1_500)
    builder.take()
    assert not builder.ready(now_ms=99_999)  # nothing to send


def test_payload_limit_holds_the_record_that_would_pass_it():
    one = payload_size(record(0, size=3000))
    first = one + ENVELOPE_BYTES + len("orders") + GROUP_OVERHEAD_BYTES  # the event's own fields count too
    builder = BatchBuilder(BatchLimits(batch_size=100, window_ms=1000, max_payload_bytes=first + one + one // 2))
    assert builder.offer(record(0, 3000), 0) and builder.offer(record(1, 3000), 0)
    assert not builder.offer(record(2, 3000), 0)
    assert builder.payload_bytes == first + one
    assert len(builder.take()) == 2
    assert builder.payload_bytes == 0 and not builder.groups


def test_every_new_partition_group_adds_its_key_to_the_payload():
    builder = BatchBuilder(BatchLimits(batch_size=100, window_ms=1000))
    builder.offer(record(0, partition=0), 0)
    before = builder.payload_bytes
    builder.offer(record(1, partition=0), 0)
    same_group = builder.payload_bytes - before
    builder.offer(record(0, partition=1), 0)
    assert builder.payload_bytes - before - same_group == same_group + len("orders") + GROUP_OVERHEAD_BYTES


def test_a_record_larger_than_the_limit_travels_alone():
    builder = BatchBuilder(BatchLimits(batch_size=100, window_ms=1000, max_payload_bytes=1000))
    assert builder.offer(record(0, 5000), 0)
    assert builder.full
    assert not builder.offer(record(1, 10), 0)
    assert [r.offset for r in builder.take()] == [0]


def test_batches_mix_partitions_like_the_msk_mapping():
    builder = BatchBuilder(BatchLimits(batch_size=4, window_ms=0))
    for offset, partition in ((7, 0), (3, 1), (8, 0), (4, 1)):
        builder.offer(record(offset, partition=partition), 0)
    assert [(r.partition, r.offset) for r in builder.take()] == [(0, 7), (1, 3), (0, 8), (1, 4)]


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"batch_size": 0}, "batch_size must be 1..10000"),
        ({"batch_size": 10_001}, "batch_size must be 1..10000"),
        ({"window_ms": -1}, "batching window must be 0..300s"),
        ({"window_ms": 300_001}, "batching window must be 0..300s"),
        ({"max_payload_bytes": 0}, "max_payload_bytes must be positive"),
    ],
)
def test_limits_are_validated(limits, message):
    with pytest.raises(ConfigError, match=message):
        BatchLimits(**limits)
