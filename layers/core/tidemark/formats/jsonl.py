"""JSON Lines, gzip by default: one envelope per record.

Archived records::

    {"topic", "partition", "offset", "timestamp", "event_time", "key", "value", "headers"}

Dead-lettered records keep every original byte (base64) and say why::

    {"topic", "partition", "offset", "timestamp", "error", "key_base64", "value_base64", "headers"}

Compression ``gzip`` (default), ``zstd`` or ``none`` (:mod:`tidemark.formats.compression`).
Output is byte-for-byte deterministic (gzip ``mtime=0``, no file name; zstd at a pinned
level), so re-uploading an object after a crash overwrites it with identical bytes
(invariant 5).

Also here: the envelope helpers every format's reader shares (base64, the encodings of keys
and header values, ISO-8601 event times back to epoch milliseconds).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO

import orjson

from tidemark.eventtime import iso_utc
from tidemark.formats.base import ArchivedEnvelope, RenderContext
from tidemark.formats.compression import Sink, compressed, decompress, extension
from tidemark.staging.frames import DEAD_LETTER, Frame

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


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


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _untext(text: str) -> bytes:
    return text.encode("utf-8")


#: encoding (``text | bytes``) -> how a key or header value held as a string reads back to bytes
DECODE_STRING: dict[str, Callable[[str], bytes]] = {"text": _untext, "bytes": _unb64}


def ms_of_iso(text: str) -> int:
    """``iso_utc`` backwards: ``2026-11-21T07:12:33.123Z`` -> epoch milliseconds."""
    return (datetime.fromisoformat(text) - _EPOCH) // _MILLISECOND


# Each renders the bytes of a JSON value for the envelope.
_VALUE: dict[str, Callable[[bytes], bytes]] = {"json": _json_value, "text": _text_value, "bytes": _b64_value}
# Each renders a key or header value as a Python string (orjson escapes it).
_STRING: dict[str, Callable[[bytes], str]] = {"text": _text, "bytes": _b64}
#: encoding (``text | bytes``) -> how a key or header value is held as a string (the other formats too)
ENCODE_STRING = _STRING
#: a JSON value on one line, every token intact (the text format's lines too)
one_line_json = _json_value
_RAW_LINE = b'%b"offset":%d,"timestamp":%d,"event_time":"%b","key":%b,"value":%b,"headers":%b}\n'


class JsonLinesFormat:
    content_type = "application/x-ndjson"

    def __init__(self, compression: str = "gzip", gzip_level: int = 6) -> None:
        self.extension = extension("jsonl", compression)
        self.compression = compression
        self.gzip_level = gzip_level

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
        with compressed(out, self.compression, self.gzip_level) as sink:
            return _write_chunked(self.lines(frames, context), sink)

    def read(self, body: bytes, context: RenderContext) -> Iterator[ArchivedEnvelope]:
        """Every line back as an envelope: archived records with the value's bytes exactly as
        the line holds them, dead letters with their original bytes and ``error``."""
        key_of = DECODE_STRING[context.key_encoding]
        header_of = DECODE_STRING[context.header_encoding]
        value_encoding = context.value_encoding
        for line in decompress(body, self.compression).split(b"\n"):
            if not line:
                continue
            envelope = orjson.loads(line)
            key = envelope.get("key")
            if "error" in envelope:
                key = envelope.get("key_base64")
                yield ArchivedEnvelope(
                    envelope["topic"],
                    envelope["partition"],
                    envelope["offset"],
                    envelope["timestamp"],
                    None,
                    None if key is None else _unb64(key),
                    _unb64(envelope["value_base64"]),
                    tuple((item["key"], _unb64(item["value_base64"])) for item in envelope["headers"]),
                    error=envelope["error"],
                )
                continue
            if value_encoding == "json":
                value = _json_of_line(line, envelope)
            elif value_encoding == "text":
                value = _untext(envelope["value"])
            else:
                value = _unb64(envelope["value"])
            yield ArchivedEnvelope(
                envelope["topic"],
                envelope["partition"],
                envelope["offset"],
                envelope["timestamp"],
                ms_of_iso(envelope["event_time"]),
                None if key is None else key_of(key),
                value,
                tuple((item["key"], header_of(item["value"])) for item in envelope["headers"]),
            )


def _json_of_line(line: bytes, envelope: dict[str, Any]) -> bytes:
    """The JSON value's bytes as the line holds them (every token as produced, raw line breaks
    blanked): the line is the byte template, so everything around the value is known. A line
    written otherwise gives the value re-serialised."""
    dumps = orjson.dumps
    head = b'{"topic":%b,"partition":%d,"offset":%d,"timestamp":%d,"event_time":%b,"key":%b,"value":' % (
        dumps(envelope["topic"]),
        envelope["partition"],
        envelope["offset"],
        envelope["timestamp"],
        dumps(envelope["event_time"]),
        dumps(envelope["key"]),
    )
    tail = b',"headers":%b}' % dumps(envelope["headers"])
    if line.startswith(head) and line.endswith(tail) and len(line) > len(head) + len(tail):
        return line[len(head) : len(line) - len(tail)]
    return dumps(envelope["value"])


def _write_chunked(lines: Iterable[bytes], out: Sink, chunk_lines: int = 512) -> int:
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
