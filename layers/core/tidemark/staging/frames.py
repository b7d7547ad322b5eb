"""The framed record format of version-1 staging segments, and the metadata both versions share.

Segments are written in version 2 now (``tidemark.staging.segment``: a columnar index and one
checksum); this module still reads version 1, which buffers staged before the upgrade hold.

In version 1, every record carries its offset, its lengths and a CRC-32 over everything after the CRC, so a
torn or damaged write is detected instead of being read as data::

    magic "TM" | crc32 u32 | kind u8 | offset i64 | timestamp i64 | event_time i64
    | key_len i32 (-1 = null) | value_len u32 | meta_len u32 | key | value | meta

``meta`` is empty for the common case (no headers, not dead-lettered, no schema references);
otherwise it holds the dead-letter reason and the headers, each length-prefixed, then -- only
when the record has any -- its schema references (``Record.schemas``)::

    reason_len u32 | reason | header_count u32 | (name_len u32 | data_len u32 | name | data)*
    [ schema_count u32 | (part, format, id: each len u32 | utf-8)* ]

A meta without schema references is byte for byte what it was before they existed. A null
header value (Kafka allows one) has ``data_len`` :data:`NULL_LEN` and no data: only segments of
version 4 (``tidemark.staging.segment``) may hold such a meta, which every other version reads
as damage, so :func:`decode_meta` accepts it only when told (``nulls``).

A position beyond a signed 64-bit offset (a Kinesis sequence number: up to 129 decimal digits)
is framed with magic ``"TW"`` instead: the ``offset`` field holds the position's byte length
``n`` and the position follows the header as ``n`` unsigned big-endian bytes, before the key
(covered by the CRC like everything else). Kafka offsets always fit, so Kafka segments are
byte-for-byte what they were, and segments staged before wide positions existed read as before.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from tidemark.records.model import Headers, SchemaRef, Schemas

RAW = 0
DEAD_LETTER = 1
NO_EVENT_TIME = -1

MAGIC = b"TM"
WIDE_MAGIC = b"TW"  # the position follows the header (see the module docstring)
_I64_MAX = 2**63 - 1
#: a length that says "null" (a tombstone's value, a null header value) in the formats that
#: allow one: no u32 length of real data can be it (a segment is far below 4 GiB)
NULL_LEN = 0xFFFF_FFFF
_PREFIX = struct.Struct("<2sI")
_BODY = struct.Struct("<Bqqqiii")
_U32 = struct.Struct("<I")
_HEADER_ITEM = struct.Struct("<II")
_HEADER = struct.Struct("<2sIBqqqiii")  # prefix + body, unpacked in one call
HEADER_SIZE = _PREFIX.size + _BODY.size
assert _HEADER.size == HEADER_SIZE


class TornFrameError(ValueError):
    """The bytes at ``position`` are not a complete, intact frame."""

    def __init__(self, position: int, detail: str) -> None:
        super().__init__(f"torn or corrupt frame at byte {position}: {detail}")
        self.position = position


class Frame(NamedTuple):
    kind: int
    offset: int
    timestamp_ms: int
    event_time_ms: int
    key: bytes | None
    value: bytes | None  # None: a tombstone (``Record.value``)
    headers: Headers = ()
    reason: str = ""
    schemas: Schemas = ()


Meta = tuple[str, Headers, Schemas]


def has_null_header(headers: Sequence[tuple[str, bytes | None]]) -> bool:
    """Whether some header's value is null (its meta needs a segment of version 4)."""
    return any(data is None for _name, data in headers)


def encode_meta(reason: str, headers: Sequence[tuple[str, bytes | None]], schemas: Schemas = ()) -> bytes:
    reason_bytes = reason.encode("utf-8")
    parts = [_U32.pack(len(reason_bytes)), reason_bytes, _U32.pack(len(headers))]
    for name, data in headers:
        name_bytes = name.encode("utf-8")
        if data is None:
            parts += [_HEADER_ITEM.pack(len(name_bytes), NULL_LEN), name_bytes]
            continue
        parts += [_HEADER_ITEM.pack(len(name_bytes), len(data)), name_bytes, data]
    if schemas:
        parts.append(_U32.pack(len(schemas)))
        for schema in schemas:
            for text in schema:
                encoded = text.encode("utf-8")
                parts += [_U32.pack(len(encoded)), encoded]
    return b"".join(parts)


def _decode_schemas(meta: bytes, pos: int) -> Schemas:
    (count,) = _U32.unpack_from(meta, pos)
    pos += 4
    schemas = []
    for _ in range(count):
        texts = []
        for _field in range(3):
            (length,) = _U32.unpack_from(meta, pos)
            texts.append(meta[pos + 4 : pos + 4 + length].decode("utf-8"))
            pos += 4 + length
        schemas.append(SchemaRef(*texts))
    if not schemas or pos != len(meta):
        raise ValueError("trailing bytes in frame metadata")
    return tuple(schemas)


def decode_meta(meta: bytes, *, nulls: bool = False) -> Meta:
    """A meta's reason, headers and schema references; ``nulls``: a null header value
    (:data:`NULL_LEN`) may occur (segments of version 4), else such a length runs past the end."""
    (reason_len,) = _U32.unpack_from(meta, 0)
    pos = 4 + reason_len
    reason = meta[4:pos].decode("utf-8")
    (count,) = _U32.unpack_from(meta, pos)
    pos += 4
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        name_len, data_len = _HEADER_ITEM.unpack_from(meta, pos)
        pos += _HEADER_ITEM.size
        name = meta[pos : pos + name_len].decode("utf-8")
        pos += name_len
        if nulls and data_len == NULL_LEN:
            headers.append((name, None))
            continue
        headers.append((name, meta[pos : pos + data_len]))
        pos += data_len
    if pos > len(meta):
        raise ValueError("frame metadata runs past its end")
    return reason, tuple(headers), _decode_schemas(meta, pos) if pos < len(meta) else ()


def decode_frames(data: bytes) -> list[Frame]:
    """Decode a whole segment; raise :class:`TornFrameError` at the first bad frame."""
    frames: list[Frame] = []
    append = frames.append
    unpack_header = _HEADER.unpack_from
    crc32 = zlib.crc32
    view = memoryview(data)
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise TornFrameError(pos, f"{end - pos} bytes left, a frame header needs {HEADER_SIZE}")
        magic, crc, kind, offset, timestamp, event_time, key_len, value_len, meta_len = unpack_header(data, pos)
        cursor = pos + HEADER_SIZE
        wide = 0
        if magic != MAGIC:
            if magic != WIDE_MAGIC or not 0 < offset <= 64:  # 129 decimal digits need 54 bytes
                raise TornFrameError(pos, "bad magic")
            wide = offset
        if kind > DEAD_LETTER or value_len < 0 or meta_len < 0 or key_len < -1:
            raise TornFrameError(pos, "bad header fields")
        if wide:
            if cursor + wide > end:
                raise TornFrameError(pos, "frame runs past the end of the segment")
            offset = int.from_bytes(data[cursor : cursor + wide], "big")
            cursor += wide
        value_start = cursor + key_len if key_len > 0 else cursor
        meta_start = value_start + value_len
        body_end = meta_start + meta_len
        if body_end > end:
            raise TornFrameError(pos, "frame runs past the end of the segment")
        if crc32(view[pos + _PREFIX.size : body_end]) != crc:
            raise TornFrameError(pos, "checksum mismatch")
        key = None if key_len < 0 else data[cursor:value_start]
        if meta_len:
            try:
                reason, headers, schemas = decode_meta(data[meta_start:body_end])
            except (struct.error, ValueError) as exc:  # UnicodeDecodeError is a ValueError
                raise TornFrameError(pos, f"bad metadata ({exc})") from None
            if schemas:  # version 1 predates them
                raise TornFrameError(pos, "schema references in a version-1 frame")
            append(
                Frame(kind, offset, timestamp, event_time, key, data[value_start:meta_start], headers, reason, schemas)
            )
        else:
            append(Frame(kind, offset, timestamp, event_time, key, data[value_start:meta_start]))
        pos = body_end
    return frames
