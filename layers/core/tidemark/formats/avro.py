"""Apache Avro object container files (fastavro): one record per source record, in position order.

Writer schema (:mod:`tidemark.formats.avro_schema`), record ``tidemark.Envelope``, for Kafka::

    topic       string
    partition   int
    offset      long
    timestamp   long                                  Kafka record timestamp, epoch ms (-1 when unset)
    event_time  long, logicalType timestamp-millis
    key         ["null", string | bytes], default null string for key_encoding text, bytes for bytes
    value       ["null", string | bytes | tidemark.Value], default null (Kinesis: no "null")
                                                      string: the JSON text (value_encoding json) or
                                                      the text (text); bytes for bytes; with a
                                                      declared value_schema a record ``Value`` of its
                                                      fields: string, long, double, boolean
                                                      (nullable ones ["null", T], default null);
                                                      null for a Kafka tombstone (a JSON value that
                                                      is the text ``null`` is the string "null")
    headers     array of tidemark.Header {key: string, value: ["null", string | bytes], default null}
    key_schema  ["null", tidemark.SchemaRef {format: ["null", string], id: string}], default null
    value_schema  the same                       only with schema references (``RenderSpec.schema_refs``):
                                                 the schema the key / value was written with

and for Kinesis (the same record name; no headers field, Kinesis records have none)::

    stream                          string
    shard_id                        string      shardId-000000000007
    sequence_number                 string      the decimal digits (up to 129: beyond a long)
    approximate_arrival_timestamp   long, logicalType timestamp-millis (always set)
    event_time                      long, logicalType timestamp-millis
    partition_key                   ["null", string | bytes], default null   as Kafka's key
    value                           as Kafka's value, tidemark.Value included

Codecs: ``deflate`` (default, at the stream's ``gzip_level``), ``snappy``, ``zstandard`` (at the
stream's ``zstd_level``, compressed with the ``zstandard`` package, registered with fastavro here:
fastavro's own codec needs ``backports.zstd``, which neither layer ships), ``null``.

Deterministic: the sync marker is the first 16 bytes of SHA-256 of the object's key (a
re-upload of the same key gets the same marker, two objects different ones), blocks close at
the pinned :data:`SYNC_INTERVAL`, and the header carries only ``avro.schema`` and
``avro.codec``.

fastavro ships in the formats layer, not the core one: this module is imported only for
streams that write Avro.
"""

from __future__ import annotations

import hashlib
import importlib
import io
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO, cast

import fastavro
import orjson

from tidemark.formats import schema_refs
from tidemark.formats.avro_schema import avro_schema
from tidemark.formats.base import ArchivedEnvelope, RenderContext, ValueColumn
from tidemark.formats.compression import ZSTD_LEVEL, PositionedSink
from tidemark.staging.frames import DEAD_LETTER, Frame

CODECS = ("deflate", "snappy", "zstandard", "null")
SYNC_INTERVAL = 256 * 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def sync_marker(object_key: str) -> bytes:
    return hashlib.sha256(object_key.encode("utf-8")).digest()[:16]


# -- the zstandard codec, with the zstandard package ----------------------------------------


def _long_bytes(number: int) -> bytes:
    """An Avro long: zig-zag, then little-endian base-128 varint."""
    encoded = (number << 1) ^ (number >> 63)
    out = bytearray()
    while encoded > 0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def _read_long(fo: Any) -> int:
    shift = result = 0
    while True:
        byte: int = fo.read(1)[0]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1)
        shift += 7


def _zstandard_write_block(fo: Any, block: bytes, level: int | None) -> None:
    import zstandard

    data = zstandard.ZstdCompressor(level=ZSTD_LEVEL if level is None else level).compress(block)
    if hasattr(fo, "write_long"):  # fastavro's pure-Python writer passes its encoder
        fo.write_long(len(data))
        fo._fo.write(data)
    else:
        fo.write(_long_bytes(len(data)))
        fo.write(data)


def _zstandard_read_block(fo: Any) -> io.BytesIO:
    import zstandard

    # fastavro's pure-Python reader passes its decoder, the compiled one the file
    data = fo.read_fixed(fo.read_long()) if hasattr(fo, "read_fixed") else fo.read(_read_long(fo))
    return io.BytesIO(zstandard.ZstdDecompressor().decompressobj().decompress(data))


def _register_zstandard() -> None:
    for name in ("fastavro._write", "fastavro._write_py"):
        try:
            module = importlib.import_module(name)
        except ImportError:  # no compiled writer: the pure-Python one is used
            continue
        module.BLOCK_WRITERS["zstandard"] = _zstandard_write_block  # pinned, whatever fastavro finds
    for name in ("fastavro._read", "fastavro._read_py"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        reader = module.BLOCK_READERS.get("zstandard")
        if reader is None or getattr(reader, "__name__", "") == "missing":
            module.BLOCK_READERS["zstandard"] = _zstandard_read_block


_register_zstandard()


# -- the format ------------------------------------------------------------------------------


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _same(data: bytes) -> bytes:
    return data


def _typed_value(columns: tuple[ValueColumn, ...]) -> Callable[[bytes], dict[str, Any]]:
    doubles = frozenset(column.name for column in columns if column.type == "double")
    names = [column.name for column in columns]
    loads = orjson.loads

    def typed(data: bytes) -> dict[str, Any]:
        parsed = loads(data)
        record = {name: parsed.get(name) for name in names}
        for name in doubles:
            item = record[name]
            if item.__class__ is int:
                record[name] = float(item)
        return record

    return typed


def _value_of(context: RenderContext) -> Callable[[bytes], Any]:
    if context.value_schema:
        return _typed_value(context.value_schema)
    return _same if context.value_encoding == "bytes" else _text


def _or_null(convert: Callable[[bytes], Any]) -> Callable[[bytes | None], Any]:
    """``convert``, with a null (a tombstone's value, a null header value) kept null."""

    def nullable(data: bytes | None) -> Any:
        return None if data is None else convert(data)

    return nullable


def _epoch_ms(stamp: Any) -> int:
    """A ``timestamp-millis`` field (fastavro gives a datetime) or a plain long, as epoch ms."""
    if isinstance(stamp, datetime):
        return (stamp - _EPOCH) // _MILLISECOND
    return int(stamp)


class AvroFormat:
    content_type = "application/avro"
    extension = "avro"

    def __init__(self, compression: str = "deflate", gzip_level: int = 6, zstd_level: int = ZSTD_LEVEL) -> None:
        if compression not in CODECS:
            raise ValueError(f"unsupported compression {compression!r}")
        self.compression = compression
        self.gzip_level = gzip_level
        self.zstd_level = zstd_level

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        schema = fastavro.parse_schema(avro_schema(context))
        counted = [0]
        level = {"deflate": self.gzip_level, "zstandard": self.zstd_level}.get(self.compression)
        fastavro.writer(
            cast(BinaryIO, PositionedSink(out)),  # fastavro asks the output whether it is seekable
            schema,
            self._records(frames, context, counted),
            codec=self.compression,
            sync_interval=SYNC_INTERVAL,
            metadata={},
            sync_marker=sync_marker(context.object_key),
            codec_compression_level=level,
        )
        return counted[0]

    @staticmethod
    def _records(frames: Iterable[Frame], context: RenderContext, counted: list[int]) -> Iterator[dict[str, Any]]:
        names = context.envelope
        text = names.position_is_text
        topic, partition = context.topic, str(context.partition) if text else context.partition
        key_of = _text if context.key_encoding == "text" else _same
        header_of = _or_null(_text if context.header_encoding == "text" else _same)
        value_of = _or_null(_value_of(context))
        source, partition_name, position, stamp, key_name, headers_name = (
            names.source,
            names.partition,
            names.position,
            names.timestamp,
            names.key,
            names.headers,
        )
        with_refs = context.schema_refs
        for kind, offset, timestamp, event_time, key, value, headers, _reason, schemas in frames:
            if kind == DEAD_LETTER:
                raise ValueError(f"offset {offset}: dead letters are archived as JSON Lines only")
            record = {
                source: topic,
                partition_name: partition,
                position: str(offset) if text else offset,
                stamp: timestamp,  # a long, or a timestamp-millis long (fastavro takes epoch ms)
                "event_time": event_time,
                key_name: None if key is None else key_of(key),
                "value": value_of(value),
            }
            if headers_name is not None:
                record[headers_name] = (
                    [{"key": name, "value": header_of(data)} for name, data in headers] if headers else []
                )
            elif headers:
                raise ValueError(f"position {offset}: this source's envelope has no headers to keep them in")
            if with_refs:  # (a spec without them has no fields for them: records keep none)
                record["key_schema"], record["value_schema"] = schema_refs.columns(schemas)
            yield record
            counted[0] += 1

    def read(self, body: bytes, context: RenderContext) -> Iterator[ArchivedEnvelope]:
        """Every record back: ``value`` the value's bytes (JSON text for json), or ``fields``
        the typed fields of a declared value schema; positions as ints, record timestamps as
        epoch ms, ``()`` headers for a source without them."""
        names = context.envelope
        for record in fastavro.reader(io.BytesIO(body)):
            assert isinstance(record, dict)
            key, value = record[names.key], record["value"]
            headers = (
                ()
                if names.headers is None
                else tuple(
                    (item["key"], item["value"].encode("utf-8") if isinstance(item["value"], str) else item["value"])
                    for item in record[names.headers]
                )
            )
            yield ArchivedEnvelope(
                record[names.source],
                record[names.partition],
                int(record[names.position]),
                _epoch_ms(record[names.timestamp]),
                _epoch_ms(record["event_time"]),
                key.encode("utf-8") if isinstance(key, str) else key,
                None if isinstance(value, dict) else value.encode("utf-8") if isinstance(value, str) else value,
                headers,
                value if isinstance(value, dict) else None,
                schemas=schema_refs.from_envelope(record),
                tombstone=value is None,
            )
