"""Binary records: every key, value and header byte exactly as the source held them.

Layout, every integer big-endian (network order). Version 1, for sources whose positions are
numbers (Kafka: a partition number and 64-bit offsets)::

    file    := magic "TMRB" | version u16 (= 1) | partition i32 | topic_len u16 | topic (UTF-8)
               | record*
    record  := offset i64 | timestamp i64 | event_time i64
               | key_len i32 (-1 = null key) | key
               | value_len u32 | value
               | header_count u32 | header*
    header  := name_len u32 | name (UTF-8) | value_len u32 | value

Version 2, for sources whose positions are written as text (``EnvelopeNames.position_is_text``,
Kinesis: a shard id such as ``shardId-000000000007`` and sequence numbers of up to 129
decimal digits, far beyond 64 bits). It differs from version 1 in exactly two places: the
partition is a length-prefixed string, and each record's position is its decimal digits,
length-prefixed::

    file    := magic "TMRB" | version u16 (= 2) | partition_len u16 | partition (UTF-8)
               | topic_len u16 | topic (UTF-8) | record*
    record  := position_len u8 | position (ASCII decimal digits) | timestamp i64 | event_time i64
               | key_len i32 (-1 = null key) | key
               | value_len u32 | value
               | header_count u32 | header*

Version 3, for Kafka (whose records may be tombstones): version 1 in which a value and a header
value may be null, as a key always could. It differs from version 1 in exactly those two
lengths, now signed::

    file    := magic "TMRB" | version u16 (= 3) | partition i32 | topic_len u16 | topic (UTF-8)
               | record*
    record  := offset i64 | timestamp i64 | event_time i64
               | key_len i32 (-1 = null key) | key
               | value_len i32 (-1 = null value: a tombstone) | value
               | header_count u32 | header*
    header  := name_len u32 | name (UTF-8) | value_len i32 (-1 = null value) | value

Kafka objects are written as version 3 whether or not they hold a null (a format writes its
header before it meets its records); RabbitMQ objects stay version 1 and Kinesis objects
version 2, byte for byte: neither source has tombstones or null header values (a null reaching
them raises ``ValueError``). A reader that predates version 3 refuses such an object by its
version (``not a tidemark bytes object (..., version 3)``), never misreads it.

``topic`` is the source log (a Kafka topic, a Kinesis stream's name), ``partition`` a Kafka
partition or a Kinesis shard id, a position a Kafka offset or a Kinesis sequence number.
``timestamp`` is the source's record timestamp (Kafka: epoch ms, -1 when unset; Kinesis: the
approximate arrival timestamp, epoch ms), ``event_time`` the event time the record was filed
under (epoch ms). Kinesis records have no headers: their ``header_count`` is always 0. Records
follow each other in position order up to the end of the (decompressed) object; there is no
index or trailer. Compression ``zstd`` (a stream's default), ``gzip`` or ``none`` around the whole
layout. An object says its version, so it reads back without knowing its source kind.

Reading it needs nothing but ``struct``::

    magic, version = struct.unpack_from(">4sH", data, 0)
    partition, topic_len = struct.unpack_from(">iH", data, 6)  # version 1
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from tidemark.formats.base import ArchivedEnvelope, RenderContext
from tidemark.formats.compression import ZSTD_LEVEL, chunked, compressed, decompress, extension
from tidemark.sources import PartitionId, shape_of
from tidemark.staging.frames import Frame

MAGIC = b"TMRB"
VERSION = 1  # numeric positions (RabbitMQ; Kafka before version 3)
TEXT_POSITIONS_VERSION = 2  # positions and partition ids as text (Kinesis)
NULLS_VERSION = 3  # version 1 with null values and null header values (Kafka)
VERSIONS = (VERSION, TEXT_POSITIONS_VERSION, NULLS_VERSION)
FILE_HEADER = struct.Struct(">4sHiH")  # magic, version, partition, topic length
FILE_HEADER_2 = struct.Struct(">4sHH")  # magic, version, partition length (then partition, topic)
RECORD_HEAD = struct.Struct(">qqqi")  # offset, timestamp, event_time, key length (-1 = null)
RECORD_TAIL_2 = struct.Struct(">qqi")  # after the position: timestamp, event_time, key length
U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
I32 = struct.Struct(">i")
CHUNK_ROWS = 512
CHUNK_BYTES = 4 * 1024 * 1024


def _key_to_headers(frame: Frame, head: bytes) -> bytes:
    """``head`` (the record's position and times), then key, value and headers: versions 1 and 2,
    which hold no nulls but the key."""
    key, value = frame.key, frame.value
    if value is None or any(data is None for _name, data in frame.headers):
        raise ValueError(f"position {frame.offset}: a null value or header value needs a Kafka (version 3) object")
    parts = [head, key or b"", U32.pack(len(value)), value, U32.pack(len(frame.headers))]
    for name, data in frame.headers:
        name_bytes = name.encode("utf-8")
        parts += [U32.pack(len(name_bytes)), name_bytes, U32.pack(len(data or b"")), data or b""]
    return b"".join(parts)


def encode_record(frame: Frame) -> bytes:
    """A version 1 record (a 64-bit offset)."""
    key_len = -1 if frame.key is None else len(frame.key)
    return _key_to_headers(frame, RECORD_HEAD.pack(frame.offset, frame.timestamp_ms, frame.event_time_ms, key_len))


def encode_record_3(frame: Frame) -> bytes:
    """A version 3 record: version 1's, a null value or header value as length -1."""
    key, value = frame.key, frame.value
    parts = [
        RECORD_HEAD.pack(frame.offset, frame.timestamp_ms, frame.event_time_ms, -1 if key is None else len(key)),
        key or b"",
        I32.pack(-1 if value is None else len(value)),
        value or b"",
        U32.pack(len(frame.headers)),
    ]
    for name, data in frame.headers:
        name_bytes = name.encode("utf-8")
        parts += [U32.pack(len(name_bytes)), name_bytes, I32.pack(-1 if data is None else len(data)), data or b""]
    return b"".join(parts)


def encode_record_2(frame: Frame) -> bytes:
    """A version 2 record (the position's decimal digits)."""
    if frame.offset < 0:
        raise ValueError(f"position {frame.offset}: a text position is a non-negative integer")
    digits = b"%d" % frame.offset
    if len(digits) > 255:
        raise ValueError(f"position {frame.offset}: more than 255 digits")
    key_len = -1 if frame.key is None else len(frame.key)
    tail = RECORD_TAIL_2.pack(frame.timestamp_ms, frame.event_time_ms, key_len)
    return _key_to_headers(frame, U8.pack(len(digits)) + digits + tail)


def _short_string(text: str, what: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 0xFFFF:
        raise ValueError(f"{what} is longer than 65535 bytes")
    return U16.pack(len(data)) + data


class BytesFormat:
    content_type = "application/octet-stream"

    def __init__(self, compression: str = "gzip", gzip_level: int = 6, zstd_level: int = ZSTD_LEVEL) -> None:
        self.extension = extension("bin", compression)
        self.compression = compression
        self.gzip_level = gzip_level
        self.zstd_level = zstd_level

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        topic = context.topic.encode("utf-8")
        if context.envelope.position_is_text:
            header = (
                MAGIC
                + U16.pack(TEXT_POSITIONS_VERSION)
                + _short_string(str(context.partition), "the partition id")
                + _short_string(context.topic, "the source name")
            )
            encode = encode_record_2
        else:
            nulls = shape_of(context.source).tombstones  # Kafka's: tombstones, null header values
            header = FILE_HEADER.pack(MAGIC, NULLS_VERSION if nulls else VERSION, context.partition, len(topic)) + topic
            encode = encode_record_3 if nulls else encode_record
        count = 0
        with compressed(out, self.compression, self.gzip_level, self.zstd_level) as sink:
            sink.write(header)
            for chunk in chunked(frames, CHUNK_ROWS, CHUNK_BYTES):
                sink.write(b"".join([encode(frame) for frame in chunk]))
                count += len(chunk)
        return count

    def read(self, body: bytes, context: RenderContext) -> Iterator[ArchivedEnvelope]:
        """Every record back, all of it: the object's version says how (``context`` is not
        needed)."""
        data = decompress(body, self.compression)
        try:
            magic, version = struct.unpack_from(">4sH", data, 0)
        except struct.error:
            raise ValueError("not a tidemark bytes object (too short)") from None
        if magic != MAGIC or version not in VERSIONS:
            raise ValueError(f"not a tidemark bytes object (magic {magic!r}, version {version})")
        pos = 6
        try:
            partition: PartitionId
            text_positions = version == TEXT_POSITIONS_VERSION
            length = I32 if version == NULLS_VERSION else U32  # of a value and a header value
            if not text_positions:
                partition, topic_len = struct.unpack_from(">iH", data, pos)
                pos += 6
            else:
                (partition_len,) = U16.unpack_from(data, pos)
                partition = data[pos + 2 : pos + 2 + partition_len].decode("utf-8")
                pos += 2 + partition_len
                (topic_len,) = U16.unpack_from(data, pos)
                pos += 2
            if pos + topic_len > len(data):
                raise struct.error("the file header runs past the end")
            topic = data[pos : pos + topic_len].decode("utf-8")
            pos += topic_len
            end = len(data)
            while pos < end:
                if not text_positions:
                    offset, timestamp, event_time, key_len = RECORD_HEAD.unpack_from(data, pos)
                    pos += RECORD_HEAD.size
                else:
                    (digits,) = U8.unpack_from(data, pos)
                    text = data[pos + 1 : pos + 1 + digits]
                    if len(text) != digits or not text.isdigit():
                        raise struct.error(f"bad position digits {text!r}")
                    offset = int(text)
                    pos += 1 + digits
                    timestamp, event_time, key_len = RECORD_TAIL_2.unpack_from(data, pos)
                    pos += RECORD_TAIL_2.size
                key = None
                if key_len >= 0:
                    key = data[pos : pos + key_len]
                    pos += key_len
                (value_len,) = length.unpack_from(data, pos)
                pos += 4
                value = None if value_len < 0 else data[pos : pos + value_len]
                pos += max(value_len, 0)
                (count,) = U32.unpack_from(data, pos)
                pos += 4
                headers: list[tuple[str, bytes | None]] = []
                for _ in range(count):
                    (name_len,) = U32.unpack_from(data, pos)
                    name = data[pos + 4 : pos + 4 + name_len].decode("utf-8")
                    pos += 4 + name_len
                    (data_len,) = length.unpack_from(data, pos)
                    headers.append((name, None if data_len < 0 else data[pos + 4 : pos + 4 + data_len]))
                    pos += 4 + max(data_len, 0)
                if pos > end:
                    raise struct.error("record runs past the end")
                yield ArchivedEnvelope(
                    topic, partition, offset, timestamp, event_time, key, value, tuple(headers), tombstone=value is None
                )
        except struct.error as exc:
            raise ValueError(f"truncated or corrupt bytes object at byte {pos}: {exc}") from None
