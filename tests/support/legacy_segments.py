"""Segments of other versions than the current: the writer of Tidemark before segment format 2,
frozen here to stage "old" segments, the reader of Tidemark before segment format 4 (what a
rollback past tombstones runs), and a stand-in for a newer version's segments.

A verbatim copy of the version-1 frame encoder (``tidemark/staging/frames.py`` at commit
``ad7e250``: one ``"TM"``/``"TW"`` frame per record, each with its own CRC-32) and of how the
archiver then joined a batch's frames into one segment per buffer. The upgrade tests stage with
it, switch to the current code mid-stream, and check that the current code flushes every old
segment exactly once. It is a copy, not an import, so that changing the production reader can
never silently change what "old" means.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from tidemark.buffers import ERRORS_KIND, BufferKey
from tidemark.exceptions import UnsupportedSegmentError
from tidemark.records.model import Record
from tidemark.routing import Routed
from tidemark.staging.frames import Frame, decode_frames
from tidemark.staging.segment import decode_segment
from tidemark.staging.store import PendingSegment
from tidemark.writer.segments import SegmentEncoder

RAW = 0
DEAD_LETTER = 1
NO_EVENT_TIME = -1
MAGIC = b"TM"
WIDE_MAGIC = b"TW"
_I64_MAX = 2**63 - 1
_PREFIX = struct.Struct("<2sI")
_BODY = struct.Struct("<Bqqqiii")
_U32 = struct.Struct("<I")
_HEADER_ITEM = struct.Struct("<II")


def _encode_meta(reason: str, headers: Sequence[tuple[str, bytes]]) -> bytes:
    reason_bytes = reason.encode("utf-8")
    parts = [_U32.pack(len(reason_bytes)), reason_bytes, _U32.pack(len(headers))]
    for name, data in headers:
        name_bytes = name.encode("utf-8")
        parts += [_HEADER_ITEM.pack(len(name_bytes), len(data)), name_bytes, data]
    return b"".join(parts)


def encode_frame(
    kind: int,
    offset: int,
    timestamp_ms: int,
    event_time_ms: int,
    key: bytes | None,
    value: bytes,
    headers: Sequence[tuple[str, bytes]] = (),
    reason: str = "",
) -> bytes:
    meta = _encode_meta(reason, headers) if headers or reason else b""
    if offset <= _I64_MAX:
        body = (
            _BODY.pack(
                kind, offset, timestamp_ms, event_time_ms, -1 if key is None else len(key), len(value), len(meta)
            )
            + (key or b"")
            + value
            + meta
        )
        return _PREFIX.pack(MAGIC, zlib.crc32(body)) + body
    key_len = -1 if key is None else len(key)
    wide = offset.to_bytes((offset.bit_length() + 7) // 8, "big")
    body = _BODY.pack(kind, len(wide), timestamp_ms, event_time_ms, key_len, len(value), len(meta))
    body += wide + (key or b"") + value + meta
    return _PREFIX.pack(WIDE_MAGIC, zlib.crc32(body)) + body


class LegacySegmentEncoder(SegmentEncoder):
    """Stages segments as version 1 did: a routed record became one frame (an archived record
    with its event time, a dead letter with ``NO_EVENT_TIME`` and its "reason: detail"), and a
    buffer's frames were joined into one segment."""

    def _segment(self, buffer: BufferKey, records: Sequence[Record], routes: Sequence[Routed]) -> PendingSegment:
        frames = []
        for record, route in zip(records, routes, strict=True):
            if buffer.kind == ERRORS_KIND:
                frame = encode_frame(
                    DEAD_LETTER,
                    record.offset,
                    record.timestamp_ms,
                    NO_EVENT_TIME,
                    record.key,
                    record.value,
                    record.headers,
                    reason=route.detail,
                )
            else:
                frame = encode_frame(
                    RAW, record.offset, record.timestamp_ms, route.event_ms, record.key, record.value, record.headers
                )
            frames.append(frame)
        return PendingSegment(buffer, b"".join(frames), len(frames), records[0].offset, records[-1].offset)


def is_legacy_segment(data: bytes) -> bool:
    return data[:2] in (MAGIC, WIDE_MAGIC)


def newer_version(segment: bytes) -> bytes:
    """A current segment as a version-5 writer would have it (3 is 2 with schema references, 4
    is 3 with null values), keeping what every version from 2 on keeps: the "TSG" family header
    and the trailer (CRC-32 of every byte before it, "TSGE")."""
    body = b"TSG5" + segment[4:-8]
    return body + struct.pack("<I4s", zlib.crc32(body), b"TSGE")


def decode_segment_before_tombstones(data: bytes) -> list[Frame]:
    """``tidemark.staging.segment.decode_segment`` as Tidemark had it before segment format 4
    (null values), which read versions 1 to 3: a verbatim copy of its dispatch (commit
    ``5f0fc46``), which decides between "newer, unsupported" and "damaged" before any decoding.
    What it hands on for the versions it reads, the current decoder reads alike."""
    if data[:2] in (b"TM", b"TW") or not data:
        return decode_frames(data)
    if data[:3] == b"TSG" and len(data) > 3 and data[:4] not in (b"TSG2", b"TSG3") and _intact(data):
        raise UnsupportedSegmentError(f"segment format {data[3:4]!r} is newer than this version reads")
    return decode_segment(data)  # also for a damaged version byte: torn


def _intact(data: bytes) -> bool:
    if len(data) < 8:
        return False
    crc, trailer = struct.unpack_from("<I4s", data, len(data) - 8)
    return bool(trailer == b"TSGE" and zlib.crc32(memoryview(data)[: len(data) - 8]) == crc)
