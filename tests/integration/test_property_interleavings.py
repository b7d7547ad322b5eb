"""Property: whatever the interleaving of deliveries, redeliveries, rewinds, crashes at any
crash point, overlapping invocations and sweeps, the archive ends up exactly once."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import replace
from functools import partial
from pathlib import Path
from unittest.mock import patch

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import make_archive
from tests.support.events import event_of
from tests.support.harness import EsmModel, RunOtherAt, small_config
from tests.support.workload import make_orders
from tidemark.archiver import Archiver, PositionResetsError
from tidemark.exceptions import StagingConflictError
from tidemark.faults import AFTER_ACCEPT, AFTER_SEGMENT_WRITE, AFTER_UPLOAD, ALL_CRASH_POINTS, CrashAt
from tidemark.ledger import model
from tidemark.records.model import Record
from tidemark.resets import BELOW_WINDOW, MARK_GRID
from tidemark.runtime import Runtime
from tidemark.sources import KAFKA, KINESIS, PartitionId
from tidemark.verify import ExpectedRecord, verify_archive

PARTITIONS = 2
PER_PARTITION = 150

crash = st.one_of(st.none(), st.tuples(st.sampled_from(ALL_CRASH_POINTS), st.integers(1, 3)))
deliver = st.tuples(st.just("deliver"), st.integers(0, PARTITIONS - 1), st.integers(1, 60), st.integers(0, 40), crash)
tick = st.tuples(st.just("tick"), st.integers(1, 40))
sweep = st.tuples(st.just("sweep"), st.integers(0, PARTITIONS - 1), crash)
overlap = st.tuples(
    st.just("overlap"),
    st.integers(0, PARTITIONS - 1),
    st.integers(1, 60),
    st.integers(0, 40),
    st.sampled_from(ALL_CRASH_POINTS),
)
# A sweep (maintain) running inside a writer's window at a crash point.
sweep_inside = st.tuples(
    st.just("sweep_inside"), st.integers(0, PARTITIONS - 1), st.integers(1, 60), st.sampled_from(ALL_CRASH_POINTS)
)
# The group's committed offsets expired: the mapping starts again at TRIM_HORIZON.
expire = st.tuples(st.just("expire"), st.integers(0, PARTITIONS - 1))
# The operator re-archives the same log from a position at or below the staged one (``tidemark
# epoch start --from-offset``, that many records back) and resets the group there.
epoch = st.tuples(st.just("epoch"), st.integers(0, PARTITIONS - 1), st.integers(0, 40))
steps = st.lists(
    st.one_of(deliver, deliver, tick, sweep, overlap, sweep_inside, expire, epoch), min_size=1, max_size=14
)


def assert_unverifiable(runtime: Runtime, batch: list[Record], refused: PositionResetsError) -> None:
    """The archived log is refused only where nothing can tell it: a Kafka batch reaching below
    the fingerprint window with no marked record there (a batch holding a whole run of MARK_GRID
    offsets always holds one: the run's first record is marked)."""
    state = runtime.ledger.load("orders", batch[0].partition)
    below = [r.offset for r in batch if r.offset < state.fingerprints[0][0]]
    assert refused.kind == BELOW_WINDOW, refused
    assert below and not runtime.ledger.marks("orders", batch[0].partition, state.epoch, below), refused
    assert len(below) < 2 * MARK_GRID - 1, refused


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plan=steps,
    seed=st.integers(0, 10_000),
    max_records=st.sampled_from([7, 25, 50, 1000]),
    kind=st.sampled_from([KAFKA, KINESIS]),
    window=st.sampled_from([model.FINGERPRINT_WINDOW, 4]),
)
# Pinned cases that random plans reach only rarely (found by mutation testing).
@example(
    plan=[("deliver", 0, 20, 0, None), ("tick", 1), ("sweep_inside", 0, 40, AFTER_SEGMENT_WRITE)],
    seed=4,
    max_records=1000,
    kind=KAFKA,
    window=model.FINGERPRINT_WINDOW,
).via("pinned: sweep inside a writer's accept window")
@example(
    plan=[("deliver", 0, 20, 0, None), ("overlap", 0, 60, 10, AFTER_SEGMENT_WRITE)],
    seed=9,
    max_records=25,
    kind=KAFKA,
    window=model.FINGERPRINT_WINDOW,
).via("pinned: overlapping invocation inside the accept window")
@example(
    plan=[("deliver", 1, 60, 0, (AFTER_UPLOAD, 1)), ("deliver", 1, 60, 0, None)],
    seed=17,
    max_records=25,
    kind=KAFKA,
    window=model.FINGERPRINT_WINDOW,
).via("pinned: crash after upload, then a redelivery")
@example(
    plan=[("deliver", 0, 30, 0, None), ("overlap", 0, 60, 20, AFTER_SEGMENT_WRITE), ("sweep", 1, None)],
    seed=3,
    max_records=7,
    kind=KINESIS,
    window=model.FINGERPRINT_WINDOW,
).via("pinned: a Kinesis shard, rewound and overlapped inside the accept window")
@example(
    plan=[
        ("deliver", 0, 20, 0, None),
        ("deliver", 0, 20, 0, (AFTER_ACCEPT, 1)),
        ("deliver", 0, 20, 0, None),
        ("deliver", 0, 20, 0, None),
        ("expire", 0),
        ("deliver", 0, 7, 0, None),  # 0..6: offset 0 is marked
        ("deliver", 0, 7, 0, None),  # 7..13: nothing to compare, refused
        ("deliver", 0, 30, 0, None),
    ],
    seed=21,
    max_records=25,
    kind=KAFKA,
    window=4,
).via("pinned: offsets expired after a crash after the accept, a replay from far below the window")
@example(
    plan=[("deliver", 0, 60, 0, None), ("epoch", 0, 30), ("deliver", 0, 20, 0, None), ("sweep", 0, None)],
    seed=5,
    max_records=25,
    kind=KINESIS,
    window=model.FINGERPRINT_WINDOW,
).via("pinned: a warm container's stale cache meets records of an epoch started below it")
def test_any_interleaving_is_exactly_once(moto_endpoint, tmp_path_factory, plan, seed, max_records, kind, window):
    """For Kafka partitions and for Kinesis shards (56-digit sequence numbers with gaps) alike.
    ``window``: the fingerprint window, shrunk so that a few steps reach below it."""
    with patch.object(model, "FINGERPRINT_WINDOW", window):
        run_plan(moto_endpoint, tmp_path_factory, plan, seed, max_records, kind)


def run_plan(moto_endpoint, tmp_path_factory, plan, seed, max_records, kind) -> None:
    archive = make_archive(moto_endpoint, Path(tmp_path_factory.mktemp("prop")))
    config = small_config(max_records=max_records, kind=kind)
    workload = make_orders(partitions=PARTITIONS, per_partition=PER_PARTITION, hours=4, seed=seed, kind=kind)
    esm = EsmModel(workload, lambda crash_points: archive.runtime(config, crash_points))
    stream = config.streams[0]

    def refusable(archiver: Archiver, batch: list[Record]) -> None:
        """An invocation that may meet a refusal (inside another one: the mapping retries it)."""
        try:
            archiver.handle(event_of(batch, kind))
        except PositionResetsError as refused:
            assert_unverifiable(archive.runtime(config), batch, refused)
        except StagingConflictError:
            pass  # refused for a state that moved meanwhile (an epoch started): the mapping retries

    ids = list(workload.records)  # partition numbers, or shard ids
    # partition -> (epoch, its first offset, the last offset of the epoch before it), per start
    starts: dict[PartitionId, list[tuple[int, int, int]]] = {partition: [] for partition in ids}

    for step in plan:
        if step[0] == "deliver":
            _, index, size, rewind, fault = step
            partition = ids[index]
            batch = esm.batch(partition, size, rewind)
            try:
                esm.deliver(batch, CrashAt(*fault) if fault else None)
            except PositionResetsError as refused:  # the batch is retried (as the mapping does)
                assert_unverifiable(archive.runtime(config), batch, refused)
        elif step[0] == "expire":
            partition = ids[step[1]]
            # From TRIM_HORIZON, but not from below the current epoch's start: nothing there can be
            # compared (refused as below_window until an operator resumes: README, Epochs).
            esm.expire(partition, starts[partition][-1][1] if starts[partition] else None)
        elif step[0] == "epoch":
            _, index, back = step
            partition = ids[index]
            offsets = [record.offset for record in workload.records[partition]]
            staged = archive.runtime(config).ledger.load("orders", partition).staged_offset
            first = offsets[max(bisect_right(offsets, staged) - back, 0)]
            started = archive.runtime(config).writer(stream, partition).start_epoch(first, reason="re-archive")
            starts[partition].append((started.epoch, first, started.previous_staged_offset))
            esm.expire(partition, first)  # the operator resets the group to the epoch's first offset
        elif step[0] == "tick":
            archive.clock.advance(minutes=step[1])
        elif step[0] == "sweep":
            _, index, fault = step
            try:
                archive.runtime(config, CrashAt(*fault) if fault else None).writer(stream, ids[index]).maintain()
            except BaseException as exc:  # noqa: BLE001 - only simulated crashes may escape
                assert type(exc).__name__ == "SimulatedCrash"
        elif step[0] == "sweep_inside":
            _, index, size, point = step
            partition = ids[index]
            sweeper = archive.runtime(config).writer(stream, partition).maintain
            esm.deliver(esm.batch(partition, size), RunOtherAt(point, sweeper))
        else:
            _, index, size, rewind, point = step
            partition = ids[index]
            other = partial(refusable, Archiver(archive.runtime(config)), esm.batch(partition, size, rewind))
            batch = esm.batch(partition, size)
            try:
                esm.deliver(batch, RunOtherAt(point, other))
            except PositionResetsError as refused:
                assert_unverifiable(archive.runtime(config), batch, refused)

    esm.drain(50)
    archive.clock.advance(minutes=31)
    for partition in ids:
        archive.runtime(config).writer(stream, partition).maintain()
    report = verify_archive(archive.s3, archive.bucket, "orders", in_epochs(workload.expected, starts))
    assert (report.lost, report.duplicated, report.unexpected, report.misfiled, report.corrupted) == (
        [],
        [],
        [],
        [],
        [],
    )
    assert report.produced == len(in_epochs(workload.expected, starts))
    assert sorted(p.name for p in archive.staging_root.rglob("*.seg")) == []


def in_epochs(
    expected: list[ExpectedRecord], starts: dict[PartitionId, list[tuple[int, int, int]]]
) -> list[ExpectedRecord]:
    """Every record in each epoch that holds it: epoch 0 from the log's start, each later epoch
    from its first offset, every epoch up to the staged offset at the next start (what it
    staged stays archived under its keys), the last to the log's end."""
    held: list[ExpectedRecord] = []
    for item in expected:
        epochs = starts[item.partition]
        firsts = [(0, -1)] + [(number, first) for number, first, _ in epochs]
        ends = [previous for _, _, previous in epochs] + [None]
        for (number, first), end in zip(firsts, ends, strict=True):
            if item.offset >= first and (end is None or item.offset <= end):
                held.append(replace(item, epoch=number))
    return held
