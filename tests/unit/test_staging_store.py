"""tidemark.staging.store: the segment-name parser, and a store in a temporary directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.legacy_segments import encode_frame
from tidemark.buffers import BufferKey
from tidemark.exceptions import CorruptSegmentError, UnsafePathError
from tidemark.sources import PartitionId
from tidemark.staging.frames import DEAD_LETTER, NO_EVENT_TIME, RAW, Frame
from tidemark.staging.segment import segment_parts
from tidemark.staging.store import (
    PendingSegment,
    SegmentFile,
    SegmentRef,
    SegmentStore,
    _split,
    _write_all,
    parse_segment_name,
    segment_name,
)

NAME = "raw_2026-11-21T07_00000000000000000100-00000000000000000199_1763712000000_0123456789ab.seg"


def test_parses_a_segment_name() -> None:
    assert parse_segment_name(NAME) == SegmentFile(
        name=NAME,
        buffer=BufferKey("raw", "2026-11-21T07"),
        first=100,
        last=199,
        created_ms=1_763_712_000_000,
    )


def test_parses_an_errors_segment_with_a_long_creation_time() -> None:
    name = "errors_1970-01-01T00_00000000000000000000-09223372036854775807_17637120000001_ffffffffffff.seg"
    assert parse_segment_name(name) == SegmentFile(
        name=name,
        buffer=BufferKey("errors", "1970-01-01T00"),
        first=0,
        last=9_223_372_036_854_775_807,
        created_ms=17_637_120_000_001,
    )


@pytest.mark.parametrize(
    "name",
    [
        "",
        "README",
        NAME.replace(".seg", ".tmp"),
        NAME.replace("raw_", "dead_"),
        NAME.replace("0123456789ab", "0123456789AB"),  # nonce is lowercase hex
        NAME.replace("0123456789ab", "0123456789a"),
        NAME.replace("_1763712000000_", "_176371200000_"),  # created ms needs 13+ digits
        NAME.replace("00000000000000000100", "100"),  # offsets are zero-padded to 20 digits
        NAME.replace("2026-11-21T07", "2026-11-21"),
        "../" + NAME,
        NAME + ".bak",
        NAME + "\n",  # trailing newline
    ],
)
def test_other_names_are_not_segments(name: str) -> None:
    assert parse_segment_name(name) is None


# -- wide positions (Kinesis sequence numbers) ----------------------------------------------------

SEQUENCE = 49590338271490256608559692538361571095921575989136588898
WIDEST = 10**129 - 1
SHARD = "shardId-000000000006"
RAW_07 = BufferKey("raw", "2026-11-21T07")


def test_narrow_positions_keep_twenty_decimal_digits() -> None:
    assert segment_name(RAW_07, 100, 10**20 - 1, 1_763_712_000_000, "0123456789ab") == (
        "raw_2026-11-21T07_00000000000000000100-99999999999999999999_1763712000000_0123456789ab.seg"
    )


def test_wide_positions_are_named_in_base36_and_parse_back() -> None:
    name = segment_name(RAW_07, SEQUENCE, SEQUENCE + 5, 1_763_712_000_000, "0123456789ab")
    first, last = name.split("_")[2].split("-")
    assert (len(first), len(last)) == (83, 83)
    assert (int(first, 36), int(last, 36)) == (SEQUENCE, SEQUENCE + 5)
    assert parse_segment_name(name) == SegmentFile(name, RAW_07, SEQUENCE, SEQUENCE + 5, 1_763_712_000_000)


@pytest.mark.parametrize(
    ("first", "last"),
    [(0, 10**20), (5, SEQUENCE), (SEQUENCE, SEQUENCE), (WIDEST - 1, WIDEST), (0, WIDEST)],
    ids=["first-wide", "small-first", "56-digits", "widest", "zero-to-widest"],
)
def test_wide_segment_names_stay_under_255_bytes_and_parse_back(first: int, last: int) -> None:
    buffer = BufferKey("errors", "2026-11-21T07")  # the longer kind
    name = segment_name(buffer, first, last, 17_637_120_000_001, "ffffffffffff")  # a 14-digit creation time
    assert len(name.encode()) <= 255
    assert parse_segment_name(name) == SegmentFile(name, buffer, first, last, 17_637_120_000_001)


def test_wide_segment_names_sort_like_their_positions() -> None:
    positions = [10**20, 2**70 + 1, SEQUENCE, SEQUENCE + 1, 10**128, WIDEST]  # all past 20 digits
    names = [segment_name(RAW_07, p, p, 1_763_712_000_000, "0123456789ab") for p in positions]
    assert sorted(names) == names


def test_positions_beyond_any_source_are_refused() -> None:
    with pytest.raises(UnsafePathError) as caught:
        segment_name(RAW_07, 0, 36**83, 1_763_712_000_000, "0123456789ab")
    assert str(caught.value) == f"position {36**83} is wider than any source's"


@pytest.mark.parametrize(
    "name",
    [
        "raw_2026-11-21T07_" + "0" * 82 + "-" + "0" * 83 + "_1763712000000_0123456789ab.seg",  # 82 digits
        "raw_2026-11-21T07_" + "0" * 83 + "-" + "A" * 83 + "_1763712000000_0123456789ab.seg",  # upper case
        "raw_2026-11-21T07_" + "0" * 83 + "-" + "0" * 20 + "_1763712000000_0123456789ab.seg",  # mixed widths
    ],
    ids=["short", "upper-case", "mixed"],
)
def test_malformed_wide_names_are_not_segments(name: str) -> None:
    assert parse_segment_name(name) is None


def _frames(positions: list[int]) -> list[bytes]:
    return [
        encode_frame(RAW, p, 1_795_245_153_000, NO_EVENT_TIME, b"c-0", b'{"n":%d}' % i) for i, p in enumerate(positions)
    ]


def test_a_store_with_a_shard_partition(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path)
    positions = [SEQUENCE, SEQUENCE + 10**20, 10**128]
    frames = _frames(positions)
    ref = store.write("orders", SHARD, RAW_07, frames, positions[0], positions[-1], 1_763_712_000_000)
    assert ref == SegmentRef(ref.name, 3, sum(len(f) for f in frames), SEQUENCE, 10**128)
    assert (tmp_path / "orders" / f"p{SHARD}" / ref.name).read_bytes() == b"".join(frames)
    assert store.partition_dir("orders", SHARD) == tmp_path.resolve() / "orders" / f"p{SHARD}"
    assert store.read("orders", SHARD, ref) == [
        Frame(RAW, p, 1_795_245_153_000, NO_EVENT_TIME, b"c-0", b'{"n":%d}' % i) for i, p in enumerate(positions)
    ]

    later = [10**128 + 1]
    dead = [encode_frame(DEAD_LETTER, later[0], 1, NO_EVENT_TIME, None, b"x", reason="oversized")]
    errors = BufferKey("errors", "2026-11-21T07")
    ref2 = store.write("orders", SHARD, errors, dead, later[0], later[0], 1_763_712_000_001)
    assert store.segments("orders", SHARD) == [
        SegmentFile(ref.name, RAW_07, SEQUENCE, 10**128, 1_763_712_000_000),
        SegmentFile(ref2.name, errors, later[0], later[0], 1_763_712_000_001),
    ]
    assert store.segments("orders", SHARD, excluding={ref.name}) == [
        SegmentFile(ref2.name, errors, later[0], later[0], 1_763_712_000_001)
    ]

    assert store.delete("orders", SHARD, ref.name) is True
    assert store.delete("orders", SHARD, ref.name) is False
    assert [s.name for s in store.segments("orders", SHARD)] == [ref2.name]
    assert store.remove_partition_dir("orders", SHARD) is False  # still holds a segment
    assert store.delete("orders", SHARD, ref2.name) is True
    assert store.remove_partition_dir("orders", SHARD) is True
    assert store.segments("orders", SHARD) == []
    assert store.partitions("orders") == []


def test_a_wide_segment_that_does_not_hold_its_ref_is_corrupt(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path)
    ref = store.write("orders", SHARD, RAW_07, _frames([SEQUENCE, SEQUENCE + 1]), SEQUENCE, SEQUENCE + 1, 1)
    wrong = SegmentRef(ref.name, ref.records, ref.size, SEQUENCE, SEQUENCE + 2)
    with pytest.raises(CorruptSegmentError) as caught:
        store.read("orders", SHARD, wrong)
    path = store.partition_dir("orders", SHARD) / ref.name
    assert str(caught.value) == f"{path}: offsets {SEQUENCE}..{SEQUENCE + 1} != {SEQUENCE}..{SEQUENCE + 2}"


def test_partitions_list_numbers_then_shard_ids(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path)
    written: list[PartitionId] = ["shardId-000000000010", 10, "shardId-000000000002", 2, 0]
    for partition in written:
        store.write("orders", partition, RAW_07, _frames([1]), 1, 1, 1_763_712_000_000)
    for stray in ("p0123", "p", "pa b", "notes", "q7"):  # not partition directories of ours
        (tmp_path / "orders" / stray).mkdir()
    assert store.partitions("orders") == [0, 2, 10, "shardId-000000000002", "shardId-000000000010"]
    assert store.partitions("payments") == []


@pytest.mark.parametrize("partition", ["", "0123", "7", "shard/7", "../x", "s" * 129, -1, True])
def test_unsafe_partitions_are_refused(tmp_path: Path, partition: object) -> None:
    store = SegmentStore(tmp_path)
    with pytest.raises(UnsafePathError) as caught:
        store.partition_dir("orders", partition)  # type: ignore[arg-type]
    assert str(caught.value) == f"refusing staging path for stream='orders' partition={partition!r}"


def _pending(buffer: BufferKey, first: int, count: int) -> PendingSegment:
    parts = segment_parts(
        [RAW] * count,
        list(range(first, first + count)),
        [1_763_712_000_000] * count,
        [NO_EVENT_TIME] * count,
        [None] * count,
        [b"v%d" % i for i in range(count)],
        [b""] * count,
    )
    return PendingSegment(buffer, parts, count, first, first + count - 1)


def test_segment_parts_are_written_as_the_segment_they_join_into(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path)
    pending = _pending(BufferKey("raw", "2026-11-21T07"), 100, 5)
    [ref] = store.write_batch("orders", 0, [pending], 1_763_712_000_000)
    data = (store.partition_dir("orders", 0) / ref.name).read_bytes()
    assert data == pending.encoded and ref.size == len(data)
    assert [frame.value for frame in store.read("orders", 0, ref)] == [b"v%d" % i for i in range(5)]


@pytest.mark.parametrize("at", [0, 1, 15, 16, 17, 40, 10_000])
def test_split_cuts_the_parts_at_a_byte_without_copying(at: int) -> None:
    parts = [b"a" * 16, b"", b"b" * 24, b"c"]
    head, tail = _split(parts, at)
    joined = b"".join(parts)
    assert b"".join(head) == joined[:at] and b"".join(tail) == joined[at:]
    assert all(isinstance(view, memoryview) for view in head + tail)


def test_short_writes_are_resumed_where_they_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """writev may write less than asked (a signal, a full pipe, NFS): the rest follows, in order."""
    real_writev = os.writev
    calls: list[int] = []

    def short_writev(fd: int, buffers: list[memoryview]) -> int:
        calls.append(len(buffers))
        return real_writev(fd, [bytes(buffers[0])[:3]])  # at most 3 bytes of the first buffer

    monkeypatch.setattr("tidemark.staging.store.os.writev", short_writev)
    parts = [b"header", b"", b"values" * 3, b"x"]
    target = tmp_path / "out"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT)
    try:
        _write_all(fd, [memoryview(part) for part in parts])
    finally:
        os.close(fd)
    assert target.read_bytes() == b"".join(parts)
    assert len(calls) > len(parts)


def test_an_error_inside_writing_still_awaits_the_fsyncs_and_closes_every_file(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path)
    buffers = [BufferKey("raw", "2026-11-21T07"), BufferKey("raw", "2026-11-21T08")]
    before = len(os.listdir("/proc/self/fd"))
    pending = [_pending(buffers[0], 1, 3), _pending(buffers[1], 4, 2)]
    with pytest.raises(RuntimeError, match="prepare failed"), store.writing("orders", 0, pending, 1) as batch:
        assert [ref.records for ref in batch.refs] == [3, 2]
        raise RuntimeError("prepare failed")
    assert len(os.listdir("/proc/self/fd")) == before
    # The segments were written whole (garbage now: no ledger names them; recovery removes them).
    assert len(store.segments("orders", 0)) == 2
