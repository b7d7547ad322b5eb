"""tidemark.staging.segment: format 2 (columnar index + one checksum) round-trips every record
shape, detects every torn write and flipped bit, and still reads format-1 segments."""

from __future__ import annotations

import pytest

from tests.support.legacy_segments import encode_frame as legacy_frame
from tests.support.legacy_segments import newer_version
from tidemark.exceptions import UnsupportedSegmentError
from tidemark.staging.frames import DEAD_LETTER, NO_EVENT_TIME, RAW, Frame, TornFrameError
from tidemark.staging.segment import SEGMENT_MAGIC, decode_segment, encode_segment, segment_of_frames

FRAMES = [
    Frame(RAW, 5, 1_795_245_153_000, 1_795_245_100_000, b"o-1", b'{"n":1}'),
    Frame(RAW, 6, 1_795_245_153_001, 1_795_245_100_001, None, b'{"n":2}', (("source", b"web"), ("trace", b"\x00\xff"))),
    Frame(DEAD_LETTER, 7, -1, NO_EVENT_TIME, b"", b"\xff not json", (), "invalid_value_encoding: value is not JSON"),
    Frame(RAW, 9, 0, 0, b"k", b""),  # empty value; positions need not be contiguous
]
SEQUENCE = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898  # 56 digits


def test_round_trip_keeps_every_field() -> None:
    data = segment_of_frames(FRAMES)
    assert data.startswith(SEGMENT_MAGIC)
    assert decode_segment(data) == FRAMES


def test_wide_positions_round_trip() -> None:
    wide = [frame._replace(offset=SEQUENCE + 1000 * index) for index, frame in enumerate(FRAMES)]
    assert decode_segment(segment_of_frames(wide)) == wide


def test_a_segment_of_one_record_without_key_headers_or_value() -> None:
    only = [Frame(RAW, 0, 1, 2, None, b"")]
    assert decode_segment(segment_of_frames(only)) == only


def test_columns_must_line_up() -> None:
    data = encode_segment([RAW, RAW], [1, 2], [3, 4], [5, 6], [None, b"k"], [b"a", b"bc"], [b"", b""])
    assert decode_segment(data) == [Frame(RAW, 1, 3, 5, None, b"a"), Frame(RAW, 2, 4, 6, b"k", b"bc")]


@pytest.mark.parametrize("frames", [FRAMES, [frame._replace(offset=SEQUENCE + i) for i, frame in enumerate(FRAMES)]])
def test_every_torn_write_is_detected(frames: list[Frame]) -> None:
    data = segment_of_frames(frames)
    for cut in range(1, len(data)):
        with pytest.raises(TornFrameError):
            decode_segment(data[:cut])


def test_every_flipped_bit_is_detected() -> None:
    data = segment_of_frames(FRAMES)
    for position in range(len(data)):
        for bit in (0x01, 0x80):
            damaged = bytearray(data)
            damaged[position] ^= bit
            with pytest.raises(TornFrameError):
                decode_segment(bytes(damaged))


def test_trailing_bytes_after_the_trailer_are_detected() -> None:
    with pytest.raises(TornFrameError):
        decode_segment(segment_of_frames(FRAMES) + b"\x00")


def test_format_1_segments_are_still_read() -> None:
    """A segment the previous version staged: per-record TM frames (TW for wide positions)."""
    for frames in (FRAMES, [frame._replace(offset=SEQUENCE + i) for i, frame in enumerate(FRAMES)]):
        old = b"".join(
            legacy_frame(f.kind, f.offset, f.timestamp_ms, f.event_time_ms, f.key, f.value, f.headers, f.reason)
            for f in frames
        )
        assert decode_segment(old) == frames
        with pytest.raises(TornFrameError):
            decode_segment(old[:-1])


def test_a_wide_segment_may_hold_position_zero() -> None:
    frames = [Frame(RAW, 0, 1, 2, None, b"a"), Frame(RAW, 2**64, 3, 4, None, b"b")]
    assert decode_segment(segment_of_frames(frames)) == frames


def test_a_segment_format_newer_than_this_version_is_unsupported_not_corrupt() -> None:
    """A rollback meets segments a newer version staged: they must never look damaged (that
    would quarantine healthy records), only unreadable by this version."""
    newer = newer_version(segment_of_frames(FRAMES))
    with pytest.raises(UnsupportedSegmentError):
        decode_segment(newer)
    damaged = bytearray(segment_of_frames(FRAMES))
    damaged[3] ^= 0x07  # "TSG2" -> "TSG5" by flipped bits: the trailer's CRC tells damage apart
    with pytest.raises(TornFrameError):
        decode_segment(bytes(damaged))
