"""Binary records: every key, value and header byte exactly as Kafka held them.

Layout, every integer big-endian (network order)::

    file    := magic "TMRB" | version u16 (= 1) | partition i32 | topic_len u16 | topic (UTF-8)
               | record*
    record  := offset i64 | timestamp i64 | event_time i64
               | key_len i32 (-1 = null key) | key
               | value_len u32 | value
               | header_count u32 | header*
    header  := name_len u32 | name (UTF-8) | value_len u32 | value

``timestamp`` is the Kafka record timestamp (epoch ms, -1 when unset), ``event_time`` the
event time the record was filed under (epoch ms). Records follow each other in offset order up
to the end of the (decompressed) object; there is no index or trailer. Compression ``gzip``
(default), ``zstd`` or ``none`` around the whole layout.

Reading it needs nothing but ``struct``::

    magic, version, partition, topic_len = struct.unpack_from(">4sHiH", data, 0)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from tidemark.formats.base import ArchivedEnvelope, RenderContext
from tidemark.formats.compression import chunked, compressed, decompress, extension
from tidemark.staging.frames import Frame

MAGIC = b"TMRB"
VERSION = 1
FILE_HEADER = struct.Struct(">4sHiH")  # magic, version, partition, topic length
RECORD_HEAD = struct.Struct(">qqqi")  # offset, timestamp, event_time, key length (-1 = null)
U32 = struct.Struct(">I")
CHUNK_ROWS = 512
CHUNK_BYTES = 4 * 1024 * 1024


def encode_record(frame: Frame) -> bytes:
    key = frame.key
    parts = [
        RECORD_HEAD.pack(frame.offset, frame.timestamp_ms, frame.event_time_ms, -1 if key is None else len(key)),
        key or b"",
        U32.pack(len(frame.value)),
        frame.value,
        U32.pack(len(frame.headers)),
    ]
    for name, data in frame.headers:
        name_bytes = name.encode("utf-8")
        parts += [U32.pack(len(name_bytes)), name_bytes, U32.pack(len(data)), data]
    return b"".join(parts)


class BytesFormat:
    content_type = "application/octet-stream"

    def __init__(self, compression: str = "gzip", gzip_level: int = 6) -> None:
        self.extension = extension("bin", compression)
        self.compression = compression
        self.gzip_level = gzip_level

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        topic = context.topic.encode("utf-8")
        count = 0
        with compressed(out, self.compression, self.gzip_level) as sink:
            sink.write(FILE_HEADER.pack(MAGIC, VERSION, context.partition, len(topic)) + topic)
            for chunk in chunked(frames, CHUNK_ROWS, CHUNK_BYTES):
                sink.write(b"".join([encode_record(frame) for frame in chunk]))
                count += len(chunk)
        return count

    def read(self, body: bytes, context: RenderContext) -> Iterator[ArchivedEnvelope]:
        """Every record back, all of it."""
        data = decompress(body, self.compression)
        try:
            magic, version, partition, topic_len = FILE_HEADER.unpack_from(data, 0)
        except struct.error:
            raise ValueError("not a tidemark bytes object (too short)") from None
        if magic != MAGIC or version != VERSION:
            raise ValueError(f"not a tidemark bytes object (magic {magic!r}, version {version})")
        pos = FILE_HEADER.size
        topic = data[pos : pos + topic_len].decode("utf-8")
        pos += topic_len
        end = len(data)
        try:
            while pos < end:
                offset, timestamp, event_time, key_len = RECORD_HEAD.unpack_from(data, pos)
                pos += RECORD_HEAD.size
                key = None
                if key_len >= 0:
                    key = data[pos : pos + key_len]
                    pos += key_len
                (value_len,) = U32.unpack_from(data, pos)
                pos += 4
                value = data[pos : pos + value_len]
                pos += value_len
                (count,) = U32.unpack_from(data, pos)
                pos += 4
                headers = []
                for _ in range(count):
                    (name_len,) = U32.unpack_from(data, pos)
                    name = data[pos + 4 : pos + 4 + name_len].decode("utf-8")
                    pos += 4 + name_len
                    (data_len,) = U32.unpack_from(data, pos)
                    headers.append((name, data[pos + 4 : pos + 4 + data_len]))
                    pos += 4 + data_len
                if pos > end:
                    raise struct.error("record runs past the end")
                yield ArchivedEnvelope(topic, partition, offset, timestamp, event_time, key, value, tuple(headers))
        except struct.error as exc:
            raise ValueError(f"truncated or corrupt bytes object at byte {pos}: {exc}") from None
