"""What an independent reader should find in an object: the format tests decode objects with
the libraries themselves (pyarrow.parquet, fastavro, csv, gzip, zstandard, struct), never with
``tidemark.formats``, and compare with these expectations."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from typing import Any

import zstandard

from tidemark.formats.base import RenderContext
from tidemark.staging.frames import Frame

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def plain(body: bytes, codec: str) -> bytes:
    """An object's bytes with its gzip or zstd compression undone."""
    if codec == "gzip":
        return gzip.decompress(body)
    if codec == "zstd":
        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    return body


def as_string(data: bytes | None, encoding: str) -> Any:
    if data is None:
        return None
    return data.decode() if encoding in ("text", "json") else data


def expected_envelopes(frames: list[Frame], context: RenderContext) -> list[dict[str, Any]]:
    """The records of a Parquet or Avro object, as their readers give them back."""
    return [
        {
            "topic": context.topic,
            "partition": context.partition,
            "offset": frame.offset,
            "timestamp": frame.timestamp_ms,
            "event_time": EPOCH + timedelta(milliseconds=frame.event_time_ms),
            "key": as_string(frame.key, context.key_encoding),
            "value": as_string(frame.value, context.value_encoding),
            "headers": [
                {"key": name, "value": as_string(data, context.header_encoding)} for name, data in frame.headers
            ],
        }
        for frame in frames
    ]


def expected_kinesis_envelopes(frames: list[Frame], context: RenderContext) -> list[dict[str, Any]]:
    """The records of a Kinesis stream's Parquet or Avro object, as their readers give them
    back: the shard id and the sequence number as strings, both times as UTC datetimes, no
    headers."""
    return [
        {
            "stream": context.topic,
            "shard_id": context.partition,
            "sequence_number": str(frame.offset),
            "approximate_arrival_timestamp": EPOCH + timedelta(milliseconds=frame.timestamp_ms),
            "event_time": EPOCH + timedelta(milliseconds=frame.event_time_ms),
            "partition_key": as_string(frame.key, context.key_encoding),
            "value": as_string(frame.value, context.value_encoding),
        }
        for frame in frames
    ]
