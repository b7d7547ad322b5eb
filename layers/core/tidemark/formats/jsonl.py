"""JSON Lines, gzip by default: one envelope per record.

The envelope's field names are the source kind's (``RenderContext.envelope``,
:mod:`tidemark.sources`). Kafka archived records::

    {"topic", "partition", "offset", "timestamp", "event_time", "key", "value", "headers"}

``partition`` and ``offset`` numbers, ``timestamp`` the record timestamp in epoch ms (-1 when
unset), ``event_time`` ISO-8601 UTC with milliseconds, ``headers`` ``[{"key", "value"}]``.
Kinesis archived records (no headers: Kinesis records have none)::

    {"stream", "shard_id", "sequence_number", "approximate_arrival_timestamp", "event_time",
     "partition_key", "value"}

``shard_id`` and ``sequence_number`` strings (a sequence number has up to 129 digits, beyond
every integer type a JSON reader has), ``approximate_arrival_timestamp`` epoch seconds as a
JSON number with exactly three decimals (``1732406400.123``: the millisecond is exact and
reads back exactly), ``event_time`` as for Kafka.

Dead-lettered records keep every original byte (base64) and say why (Kafka, then Kinesis)::

    {"topic", "partition", "offset", "timestamp", "error", "key_base64", "value_base64", "headers"}
    {"stream", "shard_id", "sequence_number", "approximate_arrival_timestamp", "error",
     "partition_key_base64", "value_base64"}

Keys and header values are text or base64 per the stream's encodings; values are the JSON
itself (json), a string (text) or base64 (bytes).

Compression ``gzip`` (default), ``zstd`` or ``none`` (:mod:`tidemark.formats.compression`).
Output is byte-for-byte deterministic (gzip ``mtime=0``, no file name; zstd at a pinned
level), so re-uploading an object after a crash overwrites it with identical bytes
(invariant 5).

Also here: the envelope helpers every format's reader shares (base64, the encodings of keys
and header values, ISO-8601 event times and seconds-with-fraction timestamps back to epoch
milliseconds).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, BinaryIO

import orjson

from tidemark.eventtime import iso_utc
from tidemark.formats.base import ArchivedEnvelope, RenderContext
from tidemark.formats.compression import Sink, compressed, decompress, extension
from tidemark.sources import EnvelopeNames, PartitionId
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


def seconds_text(ms: int) -> str:
    """Epoch milliseconds as epoch seconds with exactly three decimals: ``1732406400123`` ->
    ``1732406400.123`` (a timestamp written in seconds, ``EnvelopeNames.timestamp_in_seconds``)."""
    seconds, millis = divmod(abs(ms), 1000)
    return f"{'-' if ms < 0 else ''}{seconds}.{millis:03d}"


def ms_of_seconds(seconds: float | str) -> int:
    """``seconds_text`` backwards, from its text (exact) or from the number a JSON reader gives
    (a double: exact to the millisecond for any epoch a double holds to 1e-4 s)."""
    if isinstance(seconds, str):
        return int((Decimal(seconds) * 1000).to_integral_value())
    return round(seconds * 1000)


def json_position(position: int, names: EnvelopeNames) -> int | str:
    """A position as the envelope holds it in JSON: a number, or its decimal digits."""
    return str(position) if names.position_is_text else position


def json_partition(partition: PartitionId, names: EnvelopeNames) -> PartitionId:
    """A partition id as the envelope holds it in JSON: a number, or a string."""
    return str(partition) if names.position_is_text else partition


def line_template(names: EnvelopeNames) -> bytes:
    """The byte template of an archived record's line after its head (``{source, partition,``):
    position, timestamp, event time, key, value and (when the source has them) headers, each a
    ``%`` placeholder. Kafka's is
    ``%b"offset":%d,"timestamp":%d,"event_time":"%b","key":%b,"value":%b,"headers":%b}\n``."""
    dumps = orjson.dumps
    position = b'"%d"' if names.position_is_text else b"%d"
    stamp = b"%b" if names.timestamp_in_seconds else b"%d"
    headers = b"" if names.headers is None else b",%b:%%b" % dumps(names.headers)
    return b'%%b%b:%b,%b:%b,"event_time":"%%b",%b:%%b,"value":%%b%b}\n' % (
        dumps(names.position),
        position,
        dumps(names.timestamp),
        stamp,
        dumps(names.key),
        headers,
    )


# Each renders the bytes of a JSON value for the envelope.
_VALUE: dict[str, Callable[[bytes], bytes]] = {"json": _json_value, "text": _text_value, "bytes": _b64_value}
# Each renders a key or header value as a Python string (orjson escapes it).
_STRING: dict[str, Callable[[bytes], str]] = {"text": _text, "bytes": _b64}
#: encoding (``text | bytes``) -> how a key or header value is held as a string (the other formats too)
ENCODE_STRING = _STRING
#: a JSON value on one line, every token intact (the text format's lines too)
one_line_json = _json_value


class JsonLinesFormat:
    content_type = "application/x-ndjson"

    def __init__(self, compression: str = "gzip", gzip_level: int = 6) -> None:
        self.extension = extension("jsonl", compression)
        self.compression = compression
        self.gzip_level = gzip_level

    def lines(self, frames: Iterable[Frame], context: RenderContext) -> Iterable[bytes]:
        names = context.envelope
        value = _VALUE[context.value_encoding]
        key = _STRING[context.key_encoding]
        header = _STRING[context.header_encoding]
        topic, partition = context.topic, json_partition(context.partition, names)
        dumps = orjson.dumps
        # Archived records are rendered from a byte template (every variable part comes from
        # orjson, an int or a fixed-format timestamp): the same bytes ``orjson.dumps`` of the
        # envelope dict gives, several times faster.
        head = b"{%b:%b,%b:%b," % (dumps(names.source), dumps(topic), dumps(names.partition), dumps(partition))
        template = line_template(names)
        if names.headers is not None and not names.timestamp_in_seconds:
            # Kafka's envelope: the hot path, one tuple per record and nothing else.
            for frame in frames:
                if frame.kind == DEAD_LETTER:
                    yield _dead_letter_line(frame, names, topic, partition)
                    continue
                yield template % (
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
            return
        with_headers = names.headers is not None
        stamp: Callable[[int], int | bytes] = _seconds_bytes if names.timestamp_in_seconds else _same_int
        for frame in frames:
            if frame.headers and not with_headers:
                raise ValueError(f"position {frame.offset}: this source's envelope has no headers to keep them in")
            if frame.kind == DEAD_LETTER:
                yield _dead_letter_line(frame, names, topic, partition)
                continue
            parts: tuple[Any, ...] = (
                head,
                frame.offset,
                stamp(frame.timestamp_ms),
                iso_utc(frame.event_time_ms).encode("ascii"),
                b"null" if frame.key is None else dumps(key(frame.key)),
                value(frame.value),
            )
            if with_headers:
                parts += (
                    dumps([{"key": name, "value": header(data)} for name, data in frame.headers])
                    if frame.headers
                    else b"[]",
                )
            yield template % parts

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        with compressed(out, self.compression, self.gzip_level) as sink:
            return _write_chunked(self.lines(frames, context), sink)

    def read(self, body: bytes, context: RenderContext) -> Iterator[ArchivedEnvelope]:
        """Every line back as an envelope: archived records with the value's bytes exactly as
        the line holds them, dead letters with their original bytes and ``error``. Positions
        read back as ints (Kinesis sequence numbers from their digits), record timestamps as
        epoch ms; a source without headers (Kinesis) reads back ``()``."""
        names = context.envelope
        key_of = DECODE_STRING[context.key_encoding]
        header_of = DECODE_STRING[context.header_encoding]
        value_encoding = context.value_encoding
        stamp_of: Callable[[Any], int] = ms_of_seconds if names.timestamp_in_seconds else _same_int
        source, partition, position, timestamp = names.source, names.partition, names.position, names.timestamp
        key_name, dead_key_name, headers_name = names.key, f"{names.key}_base64", names.headers
        for line in decompress(body, self.compression).split(b"\n"):
            if not line:
                continue
            envelope = orjson.loads(line)
            if "error" in envelope:
                key = envelope.get(dead_key_name)
                yield ArchivedEnvelope(
                    envelope[source],
                    envelope[partition],
                    int(envelope[position]),
                    stamp_of(envelope[timestamp]),
                    None,
                    None if key is None else _unb64(key),
                    _unb64(envelope["value_base64"]),
                    ()
                    if headers_name is None
                    else tuple((item["key"], _unb64(item["value_base64"])) for item in envelope[headers_name]),
                    error=envelope["error"],
                )
                continue
            key = envelope.get(key_name)
            if value_encoding == "json":
                value = _json_of_line(line, envelope, names)
            elif value_encoding == "text":
                value = _untext(envelope["value"])
            else:
                value = _unb64(envelope["value"])
            yield ArchivedEnvelope(
                envelope[source],
                envelope[partition],
                int(envelope[position]),
                stamp_of(envelope[timestamp]),
                ms_of_iso(envelope["event_time"]),
                None if key is None else key_of(key),
                value,
                ()
                if headers_name is None
                else tuple((item["key"], header_of(item["value"])) for item in envelope[headers_name]),
            )


def _same_int(number: int) -> int:
    return number


def _seconds_bytes(ms: int) -> bytes:
    return seconds_text(ms).encode("ascii")


def _dead_letter_line(frame: Frame, names: EnvelopeNames, topic: str, partition: PartitionId) -> bytes:
    """A dead letter's line: the envelope's identity, every original byte in base64, the error."""
    envelope: dict[str, Any] = {
        names.source: topic,
        names.partition: partition,
        names.position: json_position(frame.offset, names),
        names.timestamp: orjson.Fragment(_seconds_bytes(frame.timestamp_ms))
        if names.timestamp_in_seconds
        else frame.timestamp_ms,
        "error": frame.reason,
        f"{names.key}_base64": None if frame.key is None else _b64(frame.key),
        "value_base64": _b64(frame.value),
    }
    if names.headers is not None:
        envelope[names.headers] = [{"key": name, "value_base64": _b64(data)} for name, data in frame.headers]
    return orjson.dumps(envelope, option=orjson.OPT_APPEND_NEWLINE)


def _json_of_line(line: bytes, envelope: dict[str, Any], names: EnvelopeNames) -> bytes:
    """The JSON value's bytes as the line holds them (every token as produced, raw line breaks
    blanked): the line is the byte template, so everything around the value is known. A line
    written otherwise gives the value re-serialised."""
    dumps = orjson.dumps
    stamp = envelope[names.timestamp]
    head = b'{%b:%b,%b:%b,%b:%b,%b:%b,"event_time":%b,%b:%b,"value":' % (
        dumps(names.source),
        dumps(envelope[names.source]),
        dumps(names.partition),
        dumps(envelope[names.partition]),
        dumps(names.position),
        dumps(envelope[names.position]),
        dumps(names.timestamp),
        _seconds_bytes(ms_of_seconds(stamp)) if names.timestamp_in_seconds else dumps(stamp),
        dumps(envelope["event_time"]),
        dumps(names.key),
        dumps(envelope.get(names.key)),
    )
    tail = b"}" if names.headers is None else b",%b:%b}" % (dumps(names.headers), dumps(envelope[names.headers]))
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
