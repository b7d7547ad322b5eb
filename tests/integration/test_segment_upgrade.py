"""Upgrading mid-stream: segments staged by the previous version (per-record frames, segment
format 1) are read and flushed by the current code (format 2) exactly once, also when a buffer
holds both kinds and when the old version crashed with flushes sealed or segments unaccepted;
and rolling back: a segment of a newer version (format 4, tombstones) waits, never damaged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.harness import EsmModel, assert_exactly_once, finish, small_config, staged_files
from tests.support.legacy_segments import (
    LegacySegmentEncoder,
    decode_segment_before_tombstones,
    is_legacy_segment,
    newer_version,
)
from tests.support.workload import make_orders, utc_hour
from tidemark.faults import AFTER_SEAL, AFTER_SEGMENT_WRITE, CrashAt
from tidemark.sources import KAFKA, KINESIS
from tidemark.staging.segment import is_segment_v2

BATCH = 40


def _segment_versions(archive) -> tuple[int, int]:
    """(old, new) segment files in the staging directory now."""
    files = [path.read_bytes()[:4] for path in archive.staging_root.rglob("*.seg")]
    return sum(map(is_legacy_segment, files)), sum(map(is_segment_v2, files))


@pytest.mark.parametrize("kind", [KAFKA, KINESIS])
@pytest.mark.parametrize("crash", [None, AFTER_SEAL, AFTER_SEGMENT_WRITE])
def test_old_segments_are_flushed_by_the_new_code_exactly_once(archive, monkeypatch, kind, crash):
    # Buffers stay open across the upgrade (100 records per object, batches of 40), so most
    # objects mix segments of both versions; a late share and bad records put dead letters and
    # late hours among them.
    config = small_config(kind=kind, max_records=100)
    workload = make_orders(partitions=2, per_partition=240, hours=3, seed=23, kind=kind)
    esm = EsmModel(workload, lambda crash_points: archive.runtime(config, crash_points))

    # The old version stages the first half of every partition (and, in the crash cases, dies
    # at the given point on its last delivery: a sealed flush or an unaccepted segment of the
    # old format is left for the new version to finish).
    with monkeypatch.context() as old_version:
        old_version.setattr("tidemark.writer.stream.SegmentEncoder", LegacySegmentEncoder)
        for partition in workload.records:
            for _ in range(3):
                assert esm.deliver(esm.batch(partition, BATCH))
        if crash == AFTER_SEAL:
            archive.clock.advance(minutes=16)  # every open buffer is past max age: sealed, not uploaded
        if crash is not None:
            assert not esm.deliver(esm.batch(next(iter(workload.records)), BATCH), CrashAt(crash))
    old, new = _segment_versions(archive)
    assert old > 0 and new == 0

    # The new version is deployed: new containers, the same staging directory and ledger.
    esm._warm = None
    for partition in workload.records:
        assert esm.deliver(esm.batch(partition, BATCH))
    old, new = _segment_versions(archive)
    assert old > 0 and new > 0  # open buffers now hold segments of both versions

    finish(archive, config, esm, BATCH)
    assert_exactly_once(archive, config, esm)
    assert staged_files(archive) == set()


def test_a_segment_from_a_newer_version_keeps_its_flush_sealed_never_quarantined(archive):
    """After a rollback, a buffer may hold a segment the newer version staged: its flush waits
    (FlushErrors) for a version that reads it; nothing is quarantined, uploaded or lost."""
    config = small_config()
    workload = make_orders(partitions=1, per_partition=30, hours=1, late_share=0, bad_share=0, seed=29)
    esm = EsmModel(workload, lambda crash_points: archive.runtime(config, crash_points))
    assert esm.deliver(esm.batch(0, 30))
    segments = list(archive.staging_root.rglob("*.seg"))
    for segment in segments:
        segment.write_bytes(newer_version(segment.read_bytes()))

    outcome = archive.runtime(config).writer(config.streams[0], 0).drain()
    state = archive.runtime(config).ledger.load("orders", 0)
    assert (outcome.flush_errors, outcome.quarantined, len(outcome.flushes)) == (1, 0, 0)
    assert len(state.sealed) == len(segments) and not state.quarantined  # one buffer per segment here
    assert all(segment.exists() for segment in segments)


def test_a_rollback_past_tombstones_leaves_their_flush_sealed_until_a_version_reads_it(archive, monkeypatch):
    """A tombstone's segment is version 4. The version before it reads 2 and 3 only: after a
    rollback it must keep that flush SEALED (FlushErrors) and leave the segment for a version
    that reads it -- never quarantine it as damage -- while segments without nulls, still
    version 2, flush as before; rolled forward again, the tombstone is archived exactly once."""
    config = small_config(max_records=1000)
    workload = make_orders(partitions=1, per_partition=30, hours=1, late_share=0, bad_share=0, seed=31)
    records = workload.records[0]
    records[10] = records[10]._replace(value=None)  # a tombstone in the first batch
    expected = [item if item.offset != 10 else replace(item, value=None, hour=utc_hour(records[10].timestamp_ms))
                for item in workload.expected]  # fmt: skip
    workload = replace(workload, expected=expected)
    esm = EsmModel(workload, lambda crash_points: archive.runtime(config, crash_points))
    assert esm.deliver(esm.batch(0, 15))  # holds the tombstone: version 4
    assert esm.deliver(esm.batch(0, 15))  # orders only: version 2
    versions = sorted(path.read_bytes()[:4] for path in archive.staging_root.rglob("*.seg"))
    assert b"TSG4" in versions and b"TSG2" in versions

    with monkeypatch.context() as rolled_back:
        rolled_back.setattr("tidemark.staging.store.decode_segment", decode_segment_before_tombstones)
        outcome = archive.runtime(config).writer(config.streams[0], 0).drain()
        state = archive.runtime(config).ledger.load("orders", 0)
        assert (outcome.flush_errors, outcome.quarantined) == (1, 0)
        assert not state.quarantined and len(state.sealed) == 1  # the hour of the tombstone's buffer waits
        assert all(path.exists() for path in archive.staging_root.rglob("*.seg") if path.read_bytes()[:4] == b"TSG4")

    outcome = archive.runtime(config).writer(config.streams[0], 0).drain()  # rolled forward
    assert (outcome.flush_errors, outcome.quarantined) == (0, 0)
    assert_exactly_once(archive, config, esm)
    assert staged_files(archive) == set()
