"""JSON Lines, gzip by default: one envelope per record.

Archived records::

    {"topic", "partition", "offset", "timestamp", "event_time", "key", "value", "headers"}

Dead-lettered records keep every original byte (base64) and say why::

    {"topic", "partition", "offset", "timestamp", "error", "key_base64", "value_base64", "headers"}

Output is byte-for-byte deterministic (gzip ``mtime=0``, no file name), so re-uploading an
object after a crash overwrites it with identical bytes (invariant 5).
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

import orjson

from tidemark.eventtime import iso_utc
from tidemark.formats.base import RenderContext
from tidemark.staging.frames import DEAD_LETTER, Frame


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _json_value(data: bytes) -> bytes:
    # Validated as JSON when staged. Raw newlines can only be insignificant whitespace in valid
    # JSON (inside strings they must be escaped), so blanking them keeps the value on one line
    # and every original token (big integers included) byte-exact.
    if b"\n" in data or b"\r" in data:
        data = data.replace(b"\r", b" ").replace(b"\n", b" ")
    return data


def _text_value(data: bytes) -> bytes:
    return orjson.dumps(data.decode("utf-8"))


def _b64_value(data: bytes) -> bytes:
    return orjson.dumps(_b64(data))


def _text(data: bytes) -> str:
    return data.decode("utf-8")


# Each renders the bytes of a JSON value for the envelope.
_VALUE: dict[str, Callable[[bytes], bytes]] = {"json": _json_value, "text": _text_value, "bytes": _b64_value}
# Each renders a key or header value as a Python string (orjson escapes it).
_STRING: dict[str, Callable[[bytes], str]] = {"text": _text, "bytes": _b64}
_RAW_LINE = b'%b"offset":%d,"timestamp":%d,"event_time":"%b","key":%b,"value":%b,"headers":%b}\n'


class JsonLinesFormat:
    content_type = "application/x-ndjson"

    def __init__(self, compression: str = "gzip", gzip_level: int = 6) -> None:
        if compression not in ("gzip", "none"):
            raise ValueError(f"unsupported compression {compression!r}")
        self.compression = compression
        self.gzip_level = gzip_level
        self.extension = "jsonl.gz" if compression == "gzip" else "jsonl"

    def lines(self, frames: Iterable[Frame], context: RenderContext) -> Iterable[bytes]:
        value = _VALUE[context.value_encoding]
        key = _STRING[context.key_encoding]
        header = _STRING[context.header_encoding]
        topic, partition = context.topic, context.partition
        # Archived records are rendered from a byte template (every variable part comes from
        # orjson, an int or a fixed-format timestamp): the same bytes ``orjson.dumps`` of the
        # envelope dict gives, several times faster.
        head = b'{"topic":%b,"partition":%d,' % (orjson.dumps(topic), partition)
        dumps = orjson.dumps
        for frame in frames:
            if frame.kind == DEAD_LETTER:
                envelope: dict[str, Any] = {
                    "topic": topic,
                    "partition": partition,
                    "offset": frame.offset,
                    "timestamp": frame.timestamp_ms,
                    "error": frame.reason,
                    "key_base64": None if frame.key is None else _b64(frame.key),
                    "value_base64": _b64(frame.value),
                    "headers": [{"key": name, "value_base64": _b64(data)} for name, data in frame.headers],
                }
                yield dumps(envelope, option=orjson.OPT_APPEND_NEWLINE)
                continue
            yield _RAW_LINE % (
                head,
                frame.offset,
                frame.timestamp_ms,
                iso_utc(frame.event_time_ms).encode("ascii"),
                b"null" if frame.key is None else dumps(key(frame.key)),
                value(frame.value),
                dumps([{"key": name, "value": header(data)} for name, data in frame.headers])
                if frame.headers
                else b"[]",
            )

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        count = 0
        if self.compression == "gzip":
            with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=self.gzip_level, mtime=0) as gz:
                count = _write_chunked(self.lines(frames, context), gz)
        else:
            count = _write_chunked(self.lines(frames, context), out)
        return count


def _write_chunked(lines: Iterable[bytes], out: BinaryIO | gzip.GzipFile, chunk_lines: int = 512) -> int:
    """Write lines in chunks: one compressor call per few hundred records, not per record."""
    count = 0
    pending: list[bytes] = []
    for line in lines:
        pending.append(line)
        if len(pending) == chunk_lines:
            out.write(b"".join(pending))
            count += len(pending)
            pending.clear()
    if pending:
        out.write(b"".join(pending))
        count += len(pending)
    return count
