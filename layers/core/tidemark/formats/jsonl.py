"""JSON Lines, zstd by default: one envelope per record.

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
itself (json), a string (text) or base64 (bytes). A record with schema references (a schema
registry integration, Confluent's wire format) ends with ``"key_schema"`` and/or
``"value_schema"``: ``{"format": "AVRO", "id": "42"}`` (:mod:`tidemark.formats.schema_refs`);
other records' lines are exactly as before those existed.

A Kafka tombstone (a null value) is archived like any record, with ``"value":null`` and, after
its headers, ``"tombstone":true`` (then its schema references, if any): the marker tells it
from a json value that is the JSON text ``null`` (which ``"value":null`` alone also renders,
and did before tombstones were archived), so the archive never turns one into the other. Only
tombstones carry the field. A null key is ``"key":null``, a null header value ``{"key": ..,
"value": null}``; a dead-lettered tombstone has ``"value_base64":null``, and so has a dead
letter's null header value.

Compression ``zstd`` (a stream's default, at its ``zstd_level``), ``gzip`` or ``none``
(:mod:`tidemark.formats.compression`). Output is byte-for-byte deterministic (gzip
``mtime=0``, no file name; zstd at the level of the buffer's render spec), so re-uploading an
object after a crash overwrites it with identical bytes (invariant 5). Records are rendered a
chunk at a time, column by column (:class:`_ChunkRenderer`), into exactly the bytes of
:meth:`JsonLinesFormat.lines` (``tests/unit/test_render_pins.py`` pins them).

Also here: the envelope helpers every format's reader shares (base64, the encodings of keys
and header values, ISO-8601 event times and seconds-with-fraction timestamps back to epoch
milliseconds).
"""

from __future__ import annotations

import base64
import re
from binascii import b2a_base64
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import chain, islice, repeat
from operator import floordiv, mod
from typing import Any, BinaryIO

import orjson

from tidemark.eventtime import iso_utc
from tidemark.formats import schema_refs
from tidemark.formats.base import ArchivedEnvelope, RenderContext
from tidemark.formats.compression import ZSTD_LEVEL, compressed, decompress, extension
from tidemark.records.model import Headers
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


#: what ends a tombstone's line, before its closing brace (see the module docstring)
TOMBSTONE_FIELD = b',"tombstone":true'


def _tombstone_line(line: bytes) -> bytes:
    """An archived record's line, rendered with ``"value":null``, marked as a tombstone's."""
    return b"%b%b}\n" % (line[:-2], TOMBSTONE_FIELD)


def _headers_json(headers: Headers, encode: Callable[[bytes], str]) -> bytes:
    """A record's headers as the envelope's JSON array (a null value ``null``)."""
    if not headers:
        return b"[]"
    return orjson.dumps([{"key": name, "value": None if data is None else encode(data)} for name, data in headers])


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

    def __init__(self, compression: str = "gzip", gzip_level: int = 6, zstd_level: int = ZSTD_LEVEL) -> None:
        self.extension = extension("jsonl", compression)
        self.compression = compression
        self.gzip_level = gzip_level
        self.zstd_level = zstd_level

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
                if frame.schemas:
                    yield _with_schemas(next(iter(self.lines([frame._replace(schemas=())], context))), frame)
                    continue
                line = template % (
                    head,
                    frame.offset,
                    frame.timestamp_ms,
                    iso_utc(frame.event_time_ms).encode("ascii"),
                    b"null" if frame.key is None else dumps(key(frame.key)),
                    b"null" if frame.value is None else value(frame.value),
                    _headers_json(frame.headers, header),
                )
                yield line if frame.value is not None else _tombstone_line(line)
            return
        with_headers = names.headers is not None
        stamp: Callable[[int], int | bytes] = _seconds_bytes if names.timestamp_in_seconds else _same_int
        for frame in frames:
            if frame.headers and not with_headers:
                raise ValueError(f"position {frame.offset}: this source's envelope has no headers to keep them in")
            if frame.kind == DEAD_LETTER:
                yield _dead_letter_line(frame, names, topic, partition)
                continue
            if frame.schemas:
                yield _with_schemas(next(iter(self.lines([frame._replace(schemas=())], context))), frame)
                continue
            parts: tuple[Any, ...] = (
                head,
                frame.offset,
                stamp(frame.timestamp_ms),
                iso_utc(frame.event_time_ms).encode("ascii"),
                b"null" if frame.key is None else dumps(key(frame.key)),
                b"null" if frame.value is None else value(frame.value),
            )
            if with_headers:
                parts += (_headers_json(frame.headers, header),)
            yield template % parts if frame.value is not None else _tombstone_line(template % parts)

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        """Every frame's line, rendered a chunk at a time (:class:`_ChunkRenderer`: the bytes
        :meth:`lines` gives, several times faster) and written a chunk at a time, so memory holds
        one chunk's lines however large the buffer."""
        render = _ChunkRenderer(self, context)
        count = 0
        with compressed(out, self.compression, self.gzip_level, self.zstd_level) as sink:
            frames = iter(frames)
            while chunk := list(islice(frames, CHUNK_LINES)):
                for part in render(chunk):
                    sink.write(part)
                count += len(chunk)
        return count

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
                key, dead_value = envelope.get(dead_key_name), envelope["value_base64"]
                yield ArchivedEnvelope(
                    envelope[source],
                    envelope[partition],
                    int(envelope[position]),
                    stamp_of(envelope[timestamp]),
                    None,
                    None if key is None else _unb64(key),
                    None if dead_value is None else _unb64(dead_value),
                    () if headers_name is None else _read_headers(envelope[headers_name], _unb64, "value_base64"),
                    error=envelope["error"],
                    schemas=schema_refs.from_envelope(envelope),
                    tombstone=dead_value is None,
                )
                continue
            key = envelope.get(key_name)
            # a tombstone is marked; "value":null unmarked is a json value's JSON text null
            tombstone = envelope.get("tombstone") is True or (value_encoding != "json" and envelope["value"] is None)
            value: bytes | None
            if tombstone:
                value = None
            elif value_encoding == "json":
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
                () if headers_name is None else _read_headers(envelope[headers_name], header_of, "value"),
                schemas=schema_refs.from_envelope(envelope),
                tombstone=tombstone,
            )


def _read_headers(items: list[dict[str, Any]], decode: Callable[[str], bytes], field: str) -> Headers:
    """An envelope's headers back to ``(name, bytes)`` pairs (``None`` for a null value)."""
    return tuple((item["key"], None if item[field] is None else decode(item[field])) for item in items)


def _with_schemas(line: bytes, frame: Frame) -> bytes:
    """An archived record's line with its schema references after everything else."""
    fields = orjson.dumps(schema_refs.envelope_fields(frame.schemas))
    return b"%b,%b}\n" % (line[:-2], fields[1:-1])


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
        "value_base64": None if frame.value is None else _b64(frame.value),
    }
    if names.headers is not None:
        envelope[names.headers] = [
            {"key": name, "value_base64": None if data is None else _b64(data)} for name, data in frame.headers
        ]
    envelope.update(schema_refs.envelope_fields(frame.schemas))
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
    tail = b"" if names.headers is None else b",%b:%b" % (dumps(names.headers), dumps(envelope[names.headers]))
    refs = {name: envelope[name] for name in schema_refs.FIELDS if name in envelope}
    if refs:
        tail += b",%b" % dumps(refs)[1:-1]
    tail += b"}"
    if line.startswith(head) and line.endswith(tail) and len(line) > len(head) + len(tail):
        return line[len(head) : len(line) - len(tail)]
    return dumps(envelope["value"])


#: frames rendered (and written to the compressor) at a time: neither codec's bytes depend on it
CHUNK_LINES = 512
#: ... unless their values are larger than this together: then in smaller chunks, so memory holds
#: at most about this much of rendered lines whatever the records' size
CHUNK_BYTES = 8 * 1024 * 1024
#: the bytes orjson escapes in a string (all others, UTF-8 included, it copies as they are)
_ESCAPED = re.compile(rb'[\x00-\x1f"\\]')
_CACHED_SECONDS = 100_000  # as eventtime.iso_utc's own cache
_CACHED_HEADERS = 1_024


class _IsoSeconds(dict[int, bytes]):
    """Epoch second -> the ``iso_utc`` text of its start up to the milliseconds
    (``b"2026-11-21T07:12:33."``), cached: the records of an object share few seconds."""

    def __missing__(self, seconds: int) -> bytes:
        if len(self) >= _CACHED_SECONDS:
            self.clear()
        prefix = self[seconds] = iso_utc(seconds * 1000)[:-4].encode("ascii")  # without "000Z"
        return prefix


_ISO_SECONDS = _IsoSeconds()


class _HeadersJson(dict[Headers, bytes]):
    """A record's headers -> their JSON array, cached: a partition's records mostly carry the
    same few sets of headers."""

    def __init__(self, encode: Callable[[bytes], str]) -> None:
        super().__init__()
        self._encode = encode

    def __missing__(self, headers: Headers) -> bytes:
        if len(self) >= _CACHED_HEADERS:
            self.clear()
        rendered = self[headers] = _headers_json(headers, self._encode)
        return rendered


def _literal(text: bytes) -> bytes:
    """Bytes to appear as they are in a ``%`` template."""
    return text.replace(b"%", b"%%")


class _ChunkRenderer:
    """The lines of a chunk of archived records, column at a time: the chunk's frames are
    transposed into columns (positions, timestamps, event-time seconds and milliseconds, keys,
    values, headers), each column is rendered with as little per-record Python as possible
    (checked once per chunk: keys that need no escaping, values without raw line breaks; cached:
    ISO seconds, headers), and one ``%`` of the chunk's template with every column interleaved
    makes the lines. The bytes are exactly those of :meth:`JsonLinesFormat.lines`, which a chunk
    holding a dead letter or anything else unusual is rendered with instead."""

    def __init__(self, fmt: JsonLinesFormat, context: RenderContext) -> None:
        names = context.envelope
        self._fallback = fmt.lines
        self._context = context
        self._seconds = names.timestamp_in_seconds
        self._with_headers = names.headers is not None
        self._text_keys = context.key_encoding == "text"
        self._key = _STRING[context.key_encoding]
        self._json_values = context.value_encoding == "json"
        self._value = _VALUE[context.value_encoding]
        self._headers = _HeadersJson(_STRING[context.header_encoding])
        dumps = orjson.dumps
        partition = json_partition(context.partition, names)
        head = b"{%b:%b,%b:%b," % (dumps(names.source), dumps(context.topic), dumps(names.partition), dumps(partition))
        position = b'"%d"' if names.position_is_text else b"%d"
        stamp = b"%d.%03d" if names.timestamp_in_seconds else b"%d"  # seconds: non-negative ones only
        headers = b"" if names.headers is None else b",%b:%%b" % _literal(dumps(names.headers))

        def line(key: bytes) -> bytes:
            return b'%b%b:%b,%b:%b,"event_time":"%%b%%03dZ",%b:%b,"value":%%b%b}\n' % (
                _literal(head),
                _literal(dumps(names.position)),
                position,
                _literal(dumps(names.timestamp)),
                stamp,
                _literal(dumps(names.key)),
                key,
                headers,
            )

        self._lines = {True: line(b'"%b"'), False: line(b"%b")}  # keys quoted as they are, or rendered
        self._templates: dict[bool, bytes] = {}  # the lines of a whole chunk

    def __call__(self, chunk: list[Frame]) -> Iterator[bytes]:
        """The chunk's lines, in one piece -- or several, when its values are large."""
        columns = tuple(zip(*chunk, strict=True))
        values = columns[5]
        size = sum(map(len, values)) if None not in values else sum(len(value) for value in values if value)
        if size <= CHUNK_BYTES:
            yield self._render(chunk, columns)
            return
        part: list[Frame] = []
        size = 0
        for frame in chunk:
            value = frame.value or b""  # a tombstone's takes no room
            if part and size + len(value) > CHUNK_BYTES:
                yield self._render(part, tuple(zip(*part, strict=True)))
                part, size = [], 0
            part.append(frame)
            size += len(value)
        yield self._render(part, tuple(zip(*part, strict=True)))

    def _render(self, chunk: list[Frame], frame_columns: tuple[tuple[Any, ...], ...]) -> bytes:
        """``frame_columns``: the chunk transposed (kinds, positions, ..., reasons)."""
        kinds, positions, stamps, events, keys, values, headers, _reasons, schemas = frame_columns
        tombstones = None in values
        if (
            DEAD_LETTER in kinds
            or any(schemas)
            or (self._seconds and min(stamps) < 0)
            or (not self._with_headers and (any(headers) or tombstones))  # the per-record path says why not
        ):
            return b"".join(self._fallback(chunk, self._context))
        quoted, key_column = self._keys(keys)
        columns: list[Iterable[Any]] = [positions]
        if self._seconds:
            columns += [map(floordiv, stamps, repeat(1000)), map(mod, stamps, repeat(1000))]
        else:
            columns.append(stamps)
        if tombstones:  # "value":null, and the marker after the headers (the last field: see _tombstone_line)
            rendered = self._values(tuple(b"{}" if value is None else value for value in values))
            value_column: Sequence[bytes] = [
                b"null" if value is None else item for value, item in zip(values, rendered, strict=True)
            ]
            header_column: Iterable[bytes] = [
                item + TOMBSTONE_FIELD if value is None else item
                for value, item in zip(values, map(self._headers.__getitem__, headers), strict=True)
            ]
        else:
            value_column, header_column = self._values(values), map(self._headers.__getitem__, headers)
        columns += [
            map(_ISO_SECONDS.__getitem__, map(floordiv, events, repeat(1000))),
            map(mod, events, repeat(1000)),
            key_column,
            value_column,
        ]
        if self._with_headers:
            columns.append(header_column)
        return self._template(quoted, len(chunk)) % tuple(chain.from_iterable(zip(*columns, strict=True)))

    def _keys(self, keys: tuple[bytes | None, ...]) -> tuple[bool, Sequence[bytes]]:
        """``(True, keys to quote as they are)``, or ``(False, each key's JSON)``."""
        try:
            joined = b"".join(keys)  # type: ignore[arg-type]  # TypeError at a null key
        except TypeError:
            joined = None
        if joined is not None:
            if not self._text_keys:  # base64 never needs escaping
                return True, [b2a_base64(key, newline=False) for key in keys]  # type: ignore[arg-type]
            if joined.isascii() and _ESCAPED.search(joined) is None:
                return True, keys  # type: ignore[return-value]
        encode, dumps = self._key, orjson.dumps
        return False, [b"null" if key is None else dumps(encode(key)) for key in keys]

    def _values(self, values: tuple[bytes, ...]) -> Sequence[bytes]:
        if not self._json_values:
            return list(map(self._value, values))
        joined = b"".join(values)
        if 10 in joined or 13 in joined:  # a raw line break somewhere: blank them, value by value
            return list(map(_json_value, values))
        return values

    def _template(self, quoted: bool, lines: int) -> bytes:
        if lines != CHUNK_LINES:
            return self._lines[quoted] * lines
        template = self._templates.get(quoted)
        if template is None:
            template = self._templates[quoted] = self._lines[quoted] * lines
        return template
