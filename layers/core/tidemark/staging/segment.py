"""The staging segment format (versions 2, 3 and 4): a columnar index and one checksum per segment.

A segment holds the records one batch adds to one buffer. Version 2 writes them column by
column, so encoding and decoding are a handful of C calls per segment rather than several per
record (a header and a CRC per record cost more than everything else a segment write does)::

    header   magic "TSG2" | flags u8 | 3 zero bytes | count u32 | positions_len u32   (16 bytes)
    index    kinds u8[n] | timestamps i64[n] | event_times i64[n]
             | key_lens i32[n] (-1 = null) | value_lens u32[n] | meta_lens u32[n]
    positions  i64[n]                      when flags & WIDE == 0 (every Kafka offset)
               widths u8[n] + big-endian   when flags & WIDE (Kinesis sequence numbers)
    blobs    keys | values | metas         (each column's bytes back to back, in record order)
    trailer  crc32 u32 (over every byte before it) | magic "TSGE"

``meta`` is what a version-1 frame carries there: empty for the common record (no headers, not
dead-lettered), else the dead-letter reason and the headers (``tidemark.staging.frames``).

Version 3 is version 2 whose metas may also hold schema references (``Record.schemas``): a
segment is written as version 3 only when one of its records has any, so every other segment
stays version 2 byte for byte, and a version that predates references meets a version-3
segment as an intact segment of a newer version (its flush waits), never as damage.

Version 4 (``"TSG4"``) is version 3 that may also hold nulls besides a null key: a tombstone's
null value has ``value_len`` :data:`~tidemark.staging.frames.NULL_LEN` and no bytes in the
values blob, and a null header value has that length in its meta
(:mod:`tidemark.staging.frames`). A segment is written as version 4 only when one of its
records has a null value or a null header value, so every other segment is what it was before,
and a version that reads only 2 and 3 meets a version-4 segment as newer (its flush stays
SEALED and waits for a version that reads it), never as damage.

A torn write is detected as surely as with per-record CRCs: the trailer's magic and checksum
cover every byte, and the declared lengths must add up to the file's size exactly. Segments of
version 1 (``"TM"``/``"TW"`` frames, written before this format existed) start with other
magic bytes and are read by :func:`tidemark.staging.frames.decode_frames`, so a buffer staged
before an upgrade is flushed by the new code as it was staged.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Sequence
from itertools import accumulate
from operator import itemgetter
from typing import TypeVar

from tidemark.exceptions import UnsupportedSegmentError
from tidemark.staging.frames import (
    DEAD_LETTER,
    MAGIC,
    NULL_LEN,
    WIDE_MAGIC,
    Frame,
    Meta,
    TornFrameError,
    decode_frames,
    decode_meta,
    encode_meta,
    has_null_header,
)

SEGMENT_MAGIC = b"TSG2"
REFS_MAGIC = b"TSG3"  # version 2's layout, schema references in its metas
NULLS_MAGIC = b"TSG4"  # version 3, plus null values (tombstones) and null header values
_COLUMNAR = (SEGMENT_MAGIC, REFS_MAGIC, NULLS_MAGIC)
# Every segment format from 2 on starts with "TSG" and its version, and ends with the trailer
# below (CRC-32 of every byte before it, "TSGE"): an intact segment of a newer version is told
# from a damaged one, and reported as unsupported (its flush waits), never as damage.
FAMILY = b"TSG"
TRAILER_MAGIC = b"TSGE"
WIDE = 1  # flag: positions are length-prefixed big-endian integers
_HEADER = struct.Struct("<4sB3xII")
_TRAILER = struct.Struct("<I4s")
_I64_MAX = 2**63 - 1
# Bytes per record of the fixed-width index columns: kind, timestamp, event time, three lengths.
_INDEX_WIDTH = 1 + 8 + 8 + 4 + 4 + 4
_INDEX_CODES = ("B", "q", "q", "i", "I", "I")
assert all(array(code).itemsize == size for code, size in zip(_INDEX_CODES, (1, 8, 8, 4, 4, 4), strict=True))


def encode_segment(
    kinds: Sequence[int],
    positions: Sequence[int],
    timestamps: Sequence[int],
    event_times: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    metas: Sequence[bytes],
    *,
    schema_refs: bool = False,
    null_headers: bool = False,
) -> bytes:
    """One segment from its columns (every sequence holds one entry per record, in order);
    ``schema_refs``: some metas hold schema references (version 3); ``null_headers``: some
    metas hold a null header value (version 4, as is a segment with a null value)."""
    return b"".join(
        segment_parts(
            kinds,
            positions,
            timestamps,
            event_times,
            keys,
            values,
            metas,
            schema_refs=schema_refs,
            null_headers=null_headers,
        )
    )


def segment_parts(
    kinds: Sequence[int],
    positions: Sequence[int],
    timestamps: Sequence[int],
    event_times: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    metas: Sequence[bytes],
    *,
    schema_refs: bool = False,
    null_headers: bool = False,
) -> list[bytes]:
    """``encode_segment``'s bytes as the parts they are made of, in order, never joined: the
    archiver hands them to one ``writev`` (joining a batch's values twice more would copy every
    byte of it twice more)."""
    count = len(positions)
    tombstones = None in values  # one C-level scan; the common batch has none
    if tombstones:
        value_lens = array("I", [NULL_LEN if value is None else len(value) for value in values])
        value_bytes = b"".join([value for value in values if value is not None])
    else:
        value_lens = array("I", map(len, values))  # type: ignore[arg-type]  # no None here
        value_bytes = b"".join(values)  # type: ignore[arg-type]
    magic = NULLS_MAGIC if tombstones or null_headers else REFS_MAGIC if schema_refs else SEGMENT_MAGIC
    flags = 0
    if positions and max(positions) > _I64_MAX:
        flags = WIDE
        wide = [position.to_bytes(max(1, (position.bit_length() + 7) // 8), "big") for position in positions]
        position_bytes = array("B", map(len, wide)).tobytes() + b"".join(wide)
    else:
        position_bytes = array("q", positions).tobytes()
    present = [key for key in keys if key is not None]
    key_lens = array("i", [-1 if key is None else len(key) for key in keys]) if len(present) < count else None
    parts = [
        _HEADER.pack(magic, flags, count, len(position_bytes)),
        array("B", kinds).tobytes(),
        array("q", timestamps).tobytes(),
        array("q", event_times).tobytes(),
        (key_lens if key_lens is not None else array("i", map(len, present))).tobytes(),
        value_lens.tobytes(),
        array("I", map(len, metas)).tobytes(),
        position_bytes,
        b"".join(present),
        value_bytes,
        b"".join(metas),
    ]
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    parts.append(_TRAILER.pack(crc, TRAILER_MAGIC))
    return parts


def segment_of_frames(frames: Sequence[Frame]) -> bytes:
    """The segment holding ``frames`` (tools and tests; the archiver encodes columns directly)."""
    return encode_segment(
        [frame.kind for frame in frames],
        [frame.offset for frame in frames],
        [frame.timestamp_ms for frame in frames],
        [frame.event_time_ms for frame in frames],
        [frame.key for frame in frames],
        [frame.value for frame in frames],
        [
            encode_meta(frame.reason, frame.headers, frame.schemas)
            if frame.headers or frame.reason or frame.schemas
            else b""
            for frame in frames
        ],
        schema_refs=any(frame.schemas for frame in frames),
        null_headers=any(has_null_header(frame.headers) for frame in frames),
    )


def is_segment_v2(data: bytes) -> bool:
    """Version 2 or its extensions 3 and 4 (the columnar layout)."""
    return data[:4] in _COLUMNAR


def decode_segment(data: bytes) -> list[Frame]:
    """Every record of a segment of either version; :class:`TornFrameError` if it is torn or
    damaged anywhere, :class:`UnsupportedSegmentError` if a newer version wrote it."""
    if data[:2] in (MAGIC, WIDE_MAGIC) or not data:
        return decode_frames(data)
    if data[:3] == FAMILY and len(data) > 3 and not is_segment_v2(data) and _intact(data):
        raise UnsupportedSegmentError(f"segment format {data[3:4]!r} is newer than this version reads")
    return _decode_v2(data)  # also for a damaged version byte: torn


def _intact(data: bytes) -> bool:
    """The trailer every format from 2 on ends with: CRC-32 of every byte before it, "TSGE"."""
    if len(data) < _TRAILER.size:
        return False
    crc, trailer = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    return bool(trailer == TRAILER_MAGIC and zlib.crc32(memoryview(data)[: len(data) - _TRAILER.size]) == crc)


def _decode_v2(data: bytes) -> list[Frame]:
    size = len(data)
    if size < _HEADER.size + _TRAILER.size:
        raise TornFrameError(0, f"{size} bytes cannot hold a segment's header and trailer")
    magic, flags, count, positions_len = _HEADER.unpack_from(data, 0)
    if magic not in _COLUMNAR:
        raise TornFrameError(0, "bad magic")
    nulls = magic == NULLS_MAGIC
    refs_allowed = magic != SEGMENT_MAGIC
    crc, trailer = _TRAILER.unpack_from(data, size - _TRAILER.size)
    if trailer != TRAILER_MAGIC:
        raise TornFrameError(size - _TRAILER.size, "no segment trailer (a torn write)")
    body_end = size - _TRAILER.size
    view = memoryview(data)
    if zlib.crc32(view[:body_end]) != crc:
        raise TornFrameError(0, "segment checksum mismatch")
    if flags & ~WIDE:
        raise TornFrameError(4, f"unknown segment flags {flags:#x}")
    index_end = _HEADER.size + count * _INDEX_WIDTH
    if index_end + positions_len > body_end:
        raise TornFrameError(_HEADER.size, "index runs past the end of the segment")
    columns: list[array[int]] = []
    cursor = _HEADER.size
    for code in _INDEX_CODES:
        column = array(code)
        width = column.itemsize * count
        column.frombytes(view[cursor : cursor + width])
        columns.append(column)
        cursor += width
    kinds, timestamps, event_times, key_lens, value_lens, meta_lens = columns
    positions = _positions(view[cursor : cursor + positions_len], flags, count)
    cursor += positions_len
    if count and (max(kinds) > DEAD_LETTER or min(key_lens) < -1):
        raise TornFrameError(_HEADER.size, "bad index fields")
    keys_len = sum(length for length in key_lens if length > 0)
    tombstones: frozenset[int] = frozenset()
    if nulls and NULL_LEN in value_lens:  # a tombstone's value takes no bytes
        tombstones = frozenset(index for index, length in enumerate(value_lens) if length == NULL_LEN)
        value_lens = array("I", [0 if length == NULL_LEN else length for length in value_lens])
    if cursor + keys_len + sum(value_lens) + sum(meta_lens) != body_end:
        raise TornFrameError(cursor, "the index does not add up to the segment's size")
    key_ends = list(accumulate((length if length > 0 else 0 for length in key_lens), initial=cursor))
    value_ends = list(accumulate(value_lens, initial=key_ends[-1]))
    meta_ends = list(accumulate(meta_lens, initial=value_ends[-1]))
    frames: list[Frame] = []
    append = frames.append
    metas: dict[bytes, Meta] = {}  # records mostly repeat their headers
    for index in range(count):
        key_len = key_lens[index]
        key = None if key_len < 0 else data[key_ends[index] : key_ends[index + 1]]
        value = None if index in tombstones else data[value_ends[index] : value_ends[index + 1]]
        if meta_lens[index]:
            meta = data[meta_ends[index] : meta_ends[index + 1]]
            decoded = metas.get(meta)
            if decoded is None:
                try:
                    decoded = metas[meta] = decode_meta(meta, nulls=nulls)
                except (struct.error, ValueError) as exc:  # UnicodeDecodeError is a ValueError
                    raise TornFrameError(meta_ends[index], f"bad metadata ({exc})") from None
            reason, headers, schemas = decoded
            if schemas and not refs_allowed:
                raise TornFrameError(meta_ends[index], "schema references in a version-2 segment")
            append(
                Frame(
                    kinds[index],
                    positions[index],
                    timestamps[index],
                    event_times[index],
                    key,
                    value,
                    headers,
                    reason,
                    schemas,
                )
            )
        else:
            append(Frame(kinds[index], positions[index], timestamps[index], event_times[index], key, value))
    return frames


def _positions(raw: memoryview, flags: int, count: int) -> list[int]:
    if not flags & WIDE:
        if len(raw) != 8 * count:
            raise TornFrameError(_HEADER.size, "positions column has the wrong length")
        column = array("q")
        column.frombytes(raw)
        return column.tolist()
    if len(raw) < count:
        raise TornFrameError(_HEADER.size, "positions column has the wrong length")
    widths = raw[:count].tolist()
    if count and not 0 < min(widths) <= max(widths) <= 64:  # 129 decimal digits need 54 bytes
        raise TornFrameError(_HEADER.size, "bad position widths")
    ends = list(accumulate(widths, initial=count))
    if ends[-1] != len(raw):
        raise TornFrameError(_HEADER.size, "positions column has the wrong length")
    data = raw.tobytes()
    return [int.from_bytes(data[ends[i] : ends[i + 1]], "big") for i in range(count)]


T = TypeVar("T")


def take(column: Sequence[T], indices: Sequence[int]) -> list[T]:
    """``[column[i] for i in indices]`` in C (``itemgetter`` returns a bare item for one index)."""
    if len(indices) == 1:
        return [column[indices[0]]]
    return list(itemgetter(*indices)(column)) if indices else []


__all__ = [
    "NULLS_MAGIC",
    "REFS_MAGIC",
    "SEGMENT_MAGIC",
    "decode_segment",
    "encode_segment",
    "is_segment_v2",
    "segment_of_frames",
    "segment_parts",
    "take",
]
