"""Decide, per record, which buffer it joins: its event hour's raw buffer, or a dead-letter one.

Bad input never blocks a partition and is never silently dropped: a record that is oversized,
not valid for the configured encoding, or without a usable event time is staged like any other
record, into the ``errors`` buffer of its Kafka-timestamp hour, with its original bytes and the
reason. It therefore gets the same exactly-once treatment as archived records.
"""

from __future__ import annotations

from typing import NamedTuple

import orjson

from tidemark.buffers import ERRORS_KIND, RAW_KIND, BufferKey
from tidemark.clock import Clock
from tidemark.config.model import StreamConfig
from tidemark.eventtime import MAX_MS, MIN_MS, EventTimeError, HourBucketer, build_extractor
from tidemark.exceptions import UnsafePathError
from tidemark.partitioning import MissingPartitionValue, Partitioner
from tidemark.records.model import Record
from tidemark.staging.frames import DEAD_LETTER, NO_EVENT_TIME, RAW, encode_frame
from tidemark.valuepath import UnrenderableField, cell
from tidemark.valueschema import ValueSchema

OVERSIZED = "oversized"
INVALID_VALUE = "invalid_value_encoding"
INVALID_KEY = "invalid_key_encoding"
INVALID_HEADER = "invalid_header_encoding"
SCHEMA_MISMATCH = "schema_mismatch"
MISSING_PARTITION_VALUE = "missing_partition_value"
MULTILINE_TEXT = "multiline_text_value"  # format text keeps one value per line
UNRENDERABLE = "unrenderable_value"  # a field the format or a partition level needs cannot be written


class Rejected(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Routed(NamedTuple):
    buffer: BufferKey
    frame: bytes
    reason: str  # "" for archived records, else the dead-letter reason code
    event_ms: int = -1  # the event time of an archived record (-1 for dead letters)


class Router:
    def __init__(self, stream: StreamConfig, clock: Clock) -> None:
        self._clock = clock
        self._extract = build_extractor(stream.event_time, clock)
        self._hours = HourBucketer(stream.event_time.timezone)
        self._max_bytes = int(stream.dead_letter.max_record_bytes)
        self._value_encoding = stream.encoding.value
        self._key_text = stream.encoding.key == "text"
        self._headers_text = stream.encoding.headers == "text"
        schema = stream.format.value_schema
        self._schema = ValueSchema(schema.fields) if schema is not None else None
        self._one_line = stream.format.type == "text" and self._value_encoding == "text"
        self._partitioner = Partitioner(stream.partition_by)
        # csv value.<path> columns re-serialise fields: checked here, so rendering cannot fail
        self._csv_paths = [
            column.removeprefix("value.").split(".")
            for column in (stream.csv_columns if stream.format.type == "csv" else ())
            if column.startswith("value.")
        ]
        self._needs_parse = (
            stream.event_time.source == "json_field"
            or self._schema is not None
            or self._partitioner.needs_value
            or bool(self._csv_paths)
        )
        self._keys: dict[tuple[str, str, str], BufferKey] = {}

    def _key(self, kind: str, hour: str, folders: str = "") -> BufferKey:
        key = self._keys.get((kind, hour, folders))
        if key is None:
            if len(self._keys) > 10_000:  # a long-lived container meeting many distinct hours or values
                self._keys.clear()
            key = self._keys[(kind, hour, folders)] = BufferKey(kind, hour, folders)
        return key

    def _check(self, record: Record) -> object:
        """Validate the record's bytes; return the parsed JSON value when the stream needs it."""
        size = len(record.value) + (len(record.key) if record.key else 0)
        if record.headers:
            size += sum(len(name) + len(data) for name, data in record.headers)
        if size > self._max_bytes:
            raise Rejected(OVERSIZED, f"record is {size} bytes (key, value and headers), limit {self._max_bytes}")
        if self._key_text and record.key is not None:
            try:
                record.key.decode("utf-8")
            except UnicodeDecodeError:
                raise Rejected(INVALID_KEY, "key is not UTF-8") from None
        if self._headers_text:
            for name, data in record.headers:
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError:
                    raise Rejected(INVALID_HEADER, f"header {name!r} is not UTF-8") from None
        parsed: object = None
        if self._value_encoding == "json":
            try:
                parsed = orjson.loads(record.value)
            except orjson.JSONDecodeError as exc:
                raise Rejected(INVALID_VALUE, f"value is not JSON ({exc})") from None
            if self._schema is not None and (why := self._schema.mismatch(parsed)) is not None:
                raise Rejected(SCHEMA_MISMATCH, why)
            for path in self._csv_paths:
                try:
                    cell(parsed, path)
                except UnrenderableField as exc:
                    raise Rejected(UNRENDERABLE, f"field {'.'.join(path)}: {exc}") from None
        elif self._value_encoding == "text":
            try:
                record.value.decode("utf-8")
            except UnicodeDecodeError:
                raise Rejected(INVALID_VALUE, "value is not UTF-8") from None
            if self._one_line and (b"\n" in record.value or b"\r" in record.value):
                raise Rejected(MULTILINE_TEXT, "the text format keeps one value per line; this value has a line break")
        return parsed if self._needs_parse else None

    def route(self, record: Record) -> Routed:
        try:
            parsed = self._check(record)
            event_ms = self._extract(record, parsed)
            buffer = self._key(RAW_KIND, self._hours.label(event_ms), self._partitioner.folders(record, parsed))
        except (Rejected, EventTimeError) as exc:
            return self.dead_letter(record, exc.reason, exc.detail)
        except MissingPartitionValue as exc:
            return self.dead_letter(record, MISSING_PARTITION_VALUE, str(exc))
        except (UnrenderableField, UnsafePathError) as exc:  # defence in depth: levels are made safe
            return self.dead_letter(record, UNRENDERABLE, f"partition_by: {exc}")
        frame = encode_frame(
            RAW, record.offset, record.timestamp_ms, event_ms, record.key, record.value, record.headers
        )
        return Routed(buffer, frame, "", event_ms)

    def dead_letter(self, record: Record, reason: str, detail: str) -> Routed:
        # Filed under its Kafka timestamp's hour; a timestamp that is itself unusable (-1, or a
        # producer's microseconds) falls back to processing time, so dead-lettering never fails.
        usable = MIN_MS <= record.timestamp_ms <= MAX_MS
        filed_ms = record.timestamp_ms if usable else self._clock.now_ms()
        frame = encode_frame(
            DEAD_LETTER,
            record.offset,
            record.timestamp_ms,
            NO_EVENT_TIME,
            record.key,
            record.value,
            record.headers,
            reason=f"{reason}: {detail}"[:1000],
        )
        return Routed(self._key(ERRORS_KIND, self._hours.label(filed_ms)), frame, reason)
