"""tidemark.staging.frames: the framed records of format-1 staging segments (still read after an upgrade)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest

from tests.support.legacy_segments import encode_frame
from tidemark.staging.frames import (
    DEAD_LETTER,
    HEADER_SIZE,
    MAGIC,
    NO_EVENT_TIME,
    RAW,
    WIDE_MAGIC,
    Frame,
    TornFrameError,
    decode_frames,
)


def _encode(frame: Frame) -> bytes:
    return encode_frame(
        frame.kind,
        frame.offset,
        frame.timestamp_ms,
        frame.event_time_ms,
        frame.key,
        frame.value,
        frame.headers,
        reason=frame.reason,
    )


SAMPLE_FRAMES: list[Frame] = [
    # the common case: no headers, not dead-lettered (empty metadata)
    Frame(RAW, 100, 1_763_709_153_000, 1_795_245_153_000, b"o-1000", b'{"order_id":"o-1001"}'),
    # null key, headers with a binary value and a duplicate header name
    Frame(
        RAW,
        101,
        1_763_709_300_100,
        1_763_709_300_000,
        None,
        b'{"a":1}',
        (("source", b"web"), ("trace", b"\x00\xff\x80\n"), ("source", b"mobile")),
    ),
    # empty key (not the same as a null key) and an empty value
    Frame(RAW, 102, 0, 0, b"", b""),
    # a dead-letter frame with a reason, original bytes kept
    Frame(
        DEAD_LETTER,
        103,
        1_763_709_500_000,
        NO_EVENT_TIME,
        b"o-1003",
        b"not json at all",
        (("source", b"web"),),
        "invalid_value_encoding: value is not JSON (unexpected character)",
    ),
    # a dead-letter frame with a negative Kafka timestamp, a non-ASCII reason and an empty header value
    Frame(
        DEAD_LETTER, 2**63 - 1, -1, NO_EVENT_TIME, b"\xff\xfe", b"\x80\x81", (("h\u00e9", b""),), "r\u00e9ason \u2713"
    ),
]


@pytest.mark.parametrize("frame", SAMPLE_FRAMES, ids=lambda f: f"offset-{f.offset}")
def test_single_frame_round_trips(frame: Frame) -> None:
    assert decode_frames(_encode(frame)) == [frame]


def test_multi_frame_segment_round_trips_in_order() -> None:
    data = b"".join(_encode(frame) for frame in SAMPLE_FRAMES)
    assert decode_frames(data) == SAMPLE_FRAMES


def test_empty_segment_decodes_to_no_frames() -> None:
    assert decode_frames(b"") == []


def test_null_key_and_empty_key_are_distinct() -> None:
    null_key = encode_frame(RAW, 1, 2, 3, None, b"v")
    empty_key = encode_frame(RAW, 1, 2, 3, b"", b"v")
    assert null_key != empty_key
    assert decode_frames(null_key) == [Frame(RAW, 1, 2, 3, None, b"v")]
    assert decode_frames(empty_key) == [Frame(RAW, 1, 2, 3, b"", b"v")]


def test_duplicate_header_names_keep_order_and_values() -> None:
    headers = (("x", b"1"), ("y", b"2"), ("x", b"3"), ("x", b"1"))
    (frame,) = decode_frames(encode_frame(RAW, 5, 6, 7, b"k", b"v", headers))
    assert frame.headers == headers


def test_reason_without_headers_round_trips() -> None:
    (frame,) = decode_frames(encode_frame(DEAD_LETTER, 9, 10, NO_EVENT_TIME, None, b"\x00", reason="oversized: big"))
    assert frame == Frame(DEAD_LETTER, 9, 10, NO_EVENT_TIME, None, b"\x00", (), "oversized: big")


def test_headers_given_as_list_decode_as_tuple() -> None:
    (frame,) = decode_frames(encode_frame(RAW, 1, 1, 1, None, b"v", [("a", b"b")]))
    assert frame.headers == (("a", b"b"),)


def test_common_frame_has_no_metadata_and_documented_layout() -> None:
    data = encode_frame(RAW, 7, 8, 9, b"key", b"value")
    assert len(data) == HEADER_SIZE + len(b"key") + len(b"value")
    assert data[:2] == MAGIC
    (crc,) = struct.unpack_from("<I", data, 2)
    assert crc == zlib.crc32(data[6:])
    assert struct.unpack_from("<Bqqqiii", data, 6) == (RAW, 7, 8, 9, 3, 5, 0)
    assert data[HEADER_SIZE:] == b"keyvalue"


def test_null_key_is_stored_as_length_minus_one() -> None:
    data = encode_frame(RAW, 7, 8, 9, None, b"value")
    assert struct.unpack_from("<Bqqqiii", data, 6) == (RAW, 7, 8, 9, -1, 5, 0)


def _segment() -> tuple[bytes, list[int]]:
    """A multi-frame segment and the byte positions where frames start (plus its end)."""
    encoded = [_encode(frame) for frame in SAMPLE_FRAMES]
    boundaries = [0]
    for chunk in encoded:
        boundaries.append(boundaries[-1] + len(chunk))
    return b"".join(encoded), boundaries


def test_truncation_at_every_byte_is_detected_or_yields_an_exact_prefix() -> None:
    data, boundaries = _segment()
    for cut in range(len(data) + 1):
        truncated = data[:cut]
        if cut in boundaries:
            # A cut between frames is a shorter, intact segment: exactly the frames before it.
            assert decode_frames(truncated) == SAMPLE_FRAMES[: boundaries.index(cut)], cut
            continue
        torn_start = max(b for b in boundaries if b < cut)
        with pytest.raises(TornFrameError) as caught:
            decode_frames(truncated)
        assert caught.value.position == torn_start, cut


def test_flipped_byte_anywhere_is_detected() -> None:
    data, boundaries = _segment()
    for index in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(data)
            damaged[index] ^= mask
            frame_start = max(b for b in boundaries if b <= index)
            with pytest.raises(TornFrameError) as caught:
                decode_frames(bytes(damaged))
            assert caught.value.position == frame_start, (index, mask)


def test_garbage_appended_after_valid_frames_is_detected_at_its_position() -> None:
    data, boundaries = _segment()
    with pytest.raises(TornFrameError) as caught:
        decode_frames(data + b"\x00" * (HEADER_SIZE + 10))
    assert caught.value.position == boundaries[-1]


@pytest.mark.parametrize(
    ("damage", "detail"),
    [
        (lambda d: b"XX" + d[2:], "bad magic"),
        (lambda d: d[:2] + struct.pack("<I", zlib.crc32(d[6:]) ^ 1) + d[6:], "checksum mismatch"),
        (lambda d: d[:-1], "frame runs past the end of the segment"),
        (lambda d: d[:10], f"10 bytes left, a frame header needs {HEADER_SIZE}"),
    ],
    ids=["magic", "crc", "short-body", "short-header"],
)
def test_torn_frame_error_message_names_position_and_cause(damage: Callable[[bytes], bytes], detail: str) -> None:
    data = encode_frame(RAW, 1, 2, 3, b"k", b"value")
    with pytest.raises(TornFrameError) as caught:
        decode_frames(damage(data))
    assert str(caught.value) == f"torn or corrupt frame at byte 0: {detail}"
    assert caught.value.position == 0
    assert isinstance(caught.value, ValueError)


def _forge(kind: int, key_len: int, value_len: int, payload: bytes, meta: bytes = b"") -> bytes:
    """A frame with a VALID checksum over arbitrary (possibly inconsistent) header fields."""
    body = struct.pack("<Bqqqiii", kind, 1, 2, 3, key_len, value_len, len(meta)) + payload + meta
    return MAGIC + struct.pack("<I", zlib.crc32(body)) + body


@pytest.mark.parametrize(
    ("kind", "key_len", "value_len"),
    [(2, 0, 0), (255, 0, 0), (RAW, -2, 0), (RAW, 0, -1), (DEAD_LETTER, -5, 0)],
)
def test_bad_header_fields_are_torn_even_with_a_valid_checksum(kind: int, key_len: int, value_len: int) -> None:
    with pytest.raises(TornFrameError, match="bad header fields"):
        decode_frames(_forge(kind, key_len, value_len, b""))


@pytest.mark.parametrize(
    "meta",
    [
        b"\x05\x00ab",  # reason length runs past the metadata
        b"\x00\x00\x01\x00\x01\x00\x05\x00\x00\x00x",  # header value runs past the metadata
        b"\x00\x00\x00\x00trailing",  # trailing bytes after the headers
        b"\x02\x00\xff\xfe\x00\x00",  # reason is not UTF-8
    ],
    ids=["reason-overrun", "header-overrun", "trailing", "reason-not-utf8"],
)
def test_malformed_metadata_with_valid_checksum_raises_torn_frame_error(meta: bytes) -> None:
    # decode_frames promises TornFrameError at the first bad frame (SegmentStore.read turns only
    # that into CorruptSegmentError), whatever is wrong inside the frame.
    with pytest.raises(TornFrameError):
        decode_frames(_forge(RAW, 0, 1, b"v", meta))


# -- wide positions (Kinesis sequence numbers) ----------------------------------------------------

SEQUENCE = 49590338271490256608559692538361571095921575989136588898  # 56 digits, beyond u64
WIDEST = 10**129 - 1  # the largest sequence number the Kinesis API allows

WIDE_FRAMES: list[Frame] = [
    Frame(RAW, SEQUENCE, 1_795_245_153_000, 1_795_245_153_000, b"c-0", b'{"order_id":"o-2001"}'),
    Frame(RAW, SEQUENCE + 1, 1_795_245_213_123, NO_EVENT_TIME, None, b""),
    Frame(DEAD_LETTER, 10**128, 1, NO_EVENT_TIME, b"", b"{not json", (), "invalid_value_encoding: not JSON"),
    Frame(DEAD_LETTER, WIDEST, -1, 5, b"\xff", b"\x00", (("h", b"v"), ("h", b"")), "r\u00e9ason"),
]


@pytest.mark.parametrize("frame", WIDE_FRAMES, ids=lambda f: f"{len(str(f.offset))}-digits")
def test_wide_frame_round_trips(frame: Frame) -> None:
    data = _encode(frame)
    assert data[:2] == b"TW"
    assert decode_frames(data) == [frame]


def test_widest_position_layout() -> None:
    data = encode_frame(RAW, WIDEST, 8, 9, b"key", b"value")
    width = 54  # bytes of the largest 129-digit number
    assert WIDEST.bit_length() <= 8 * width < WIDEST.bit_length() + 8
    assert len(data) == HEADER_SIZE + width + len(b"key") + len(b"value")
    (crc,) = struct.unpack_from("<I", data, 2)
    assert crc == zlib.crc32(data[6:])
    assert struct.unpack_from("<Bqqqiii", data, 6) == (RAW, width, 8, 9, 3, 5, 0)
    assert data[HEADER_SIZE : HEADER_SIZE + width] == WIDEST.to_bytes(width, "big")
    assert data[HEADER_SIZE + width :] == b"keyvalue"
    assert decode_frames(data) == [Frame(RAW, WIDEST, 8, 9, b"key", b"value")]


@pytest.mark.parametrize(
    ("offset", "magic"),
    [(0, b"TM"), (2**63 - 1, b"TM"), (2**63, b"TW"), (2**64, b"TW")],
)
def test_magic_switches_exactly_past_int64(offset: int, magic: bytes) -> None:
    data = encode_frame(RAW, offset, 1, 2, b"k", b"v")
    assert data[:2] == magic
    assert decode_frames(data) == [Frame(RAW, offset, 1, 2, b"k", b"v")]


def test_kafka_frames_are_unchanged_by_wide_positions() -> None:
    # byte-for-byte the narrow layout: magic "TM" and the offset in the header
    data = encode_frame(RAW, 100, 1_795_245_153_000, 2, b"o-1000", b"{}")
    assert data[:2] == MAGIC == b"TM"
    body = struct.pack("<Bqqqiii", RAW, 100, 1_795_245_153_000, 2, 6, 2, 0) + b"o-1000{}"
    assert data == b"TM" + struct.pack("<I", zlib.crc32(body)) + body


def test_kafka_and_wide_frames_mix_in_one_segment() -> None:
    mixed = [SAMPLE_FRAMES[0], WIDE_FRAMES[0], SAMPLE_FRAMES[1], WIDE_FRAMES[3]]
    assert decode_frames(b"".join(_encode(frame) for frame in mixed)) == mixed


def _wide_segment() -> tuple[bytes, list[int]]:
    encoded = [_encode(frame) for frame in WIDE_FRAMES]
    boundaries = [0]
    for chunk in encoded:
        boundaries.append(boundaries[-1] + len(chunk))
    return b"".join(encoded), boundaries


def test_torn_wide_frames_are_detected_at_every_byte() -> None:
    data, boundaries = _wide_segment()
    for cut in range(len(data) + 1):
        if cut in boundaries:
            assert decode_frames(data[:cut]) == WIDE_FRAMES[: boundaries.index(cut)], cut
            continue
        with pytest.raises(TornFrameError) as caught:
            decode_frames(data[:cut])
        assert caught.value.position == max(b for b in boundaries if b < cut), cut


def test_flipped_byte_in_a_wide_frame_is_detected() -> None:
    data, boundaries = _wide_segment()
    for index in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(data)
            damaged[index] ^= mask
            with pytest.raises(TornFrameError) as caught:
                decode_frames(bytes(damaged))
            assert caught.value.position == max(b for b in boundaries if b <= index), (index, mask)


def _forge_wide(width: int, position: bytes) -> bytes:
    """A "TW" frame with a VALID checksum and the given position width field."""
    body = struct.pack("<Bqqqiii", RAW, width, 2, 3, -1, 1, 0) + position + b"v"
    return WIDE_MAGIC + struct.pack("<I", zlib.crc32(body)) + body


@pytest.mark.parametrize("width", [0, 65, -1, 2**40])
def test_a_wide_frame_with_an_impossible_width_is_torn(width: int) -> None:
    with pytest.raises(TornFrameError) as caught:
        decode_frames(_forge_wide(width, b"\x01" * max(0, min(width, 70))))
    assert str(caught.value) == "torn or corrupt frame at byte 0: bad magic"


def test_a_wide_frame_whose_position_runs_past_the_end_is_torn() -> None:
    data = _forge_wide(60, b"\x01" * 4)  # says 60 position bytes, holds 4 (+ the value byte)
    with pytest.raises(TornFrameError) as caught:
        decode_frames(data)
    assert str(caught.value) == "torn or corrupt frame at byte 0: frame runs past the end of the segment"
