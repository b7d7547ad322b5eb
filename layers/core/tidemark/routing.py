"""Decide, per record, which buffer it joins: its event hour's raw buffer, or a dead-letter one.

Bad input never blocks a partition and is never silently dropped: a record that is oversized,
not valid for the configured encoding, or without a usable event time is staged like any other
record, into the ``errors`` buffer of its Kafka-timestamp hour, with its original bytes and the
reason. It therefore gets the same exactly-once treatment as archived records.

``Router.route`` decides one record at a time and is the definition of every verdict.
``Router.route_batch`` gives the same verdicts for a whole batch, column at a time: for the
common stream (JSON values, event time from a JSON field or the record's timestamp, no
partition-by levels, no schema) it reads each value once and the event time in one loop, and
sends every record it is not sure about -- any that could be oversized, carries non-ASCII text
that must be UTF-8, is not JSON, or has no plain integer or string event time in range --
through ``route``. It reads values with msgspec (``tidemark.jsonscan``), which skips the
fields it is not asked for in C, over twice as fast as ``orjson.loads``, except for a nested
event-time field, read with orjson as ``route`` does. msgspec is laxer than orjson in what it
skips (numbers that overflow a double, bytes that are not UTF-8, nesting past 1024 levels):
``jsonscan.risky`` flags every value where that could matter, and those go through ``route``
too, as do values msgspec refuses and float event times.
``tests/unit/test_router_equivalence.py`` holds the two to the same verdicts on generated
awkward input.

A tombstone (a Kafka record whose value is null) is a record, never an error: it has no value
to check against the value encoding or a declared value schema, its event time is its record
timestamp where the configured field or header cannot be read (``tidemark.eventtime``), and
its ``partition_by`` levels read from the value are ``__missing__`` whatever ``missing`` says
(``tidemark.partitioning``). It is dead-lettered only for what any record is (oversized key and
headers, a key or header that is not text, an unusable record timestamp, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from itertools import repeat
from operator import attrgetter, mul
from typing import NamedTuple, cast

import msgspec
import orjson

from tidemark import jsonscan
from tidemark.buffers import ERRORS_KIND, RAW_KIND, BufferKey
from tidemark.clock import Clock
from tidemark.config.model import StreamConfig
from tidemark.dedupe.ids import CONTENT_SHA256, MESSAGE_ID, message_id
from tidemark.eventtime import (
    MAX_MS,
    MIN_MS,
    SECONDS_LIMIT,
    EventTimeError,
    HourBucketer,
    build_extractor,
    parse_time_value,
)
from tidemark.exceptions import UnsafePathError
from tidemark.partitioning import MissingPartitionValue, Partitioner
from tidemark.records.model import Headers, Record
from tidemark.records.rabbitmq import UNDECODABLE_HEADER
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
MISSING_MESSAGE_ID = "missing_message_id"  # RabbitMQ: no id under dedupe.id (message_id, header:<name>)
#: RabbitMQ: a message the event showed in a way the decoder cannot read (``records.rabbitmq``)
UNDECODABLE = "undecodable_message"
#: Kafka: a record the event source mapping never delivered (its schema registry integration
#: could not decode it), archived from the log by ``tidemark recover`` with its produced bytes
NOT_DELIVERED = "not_delivered_by_mapping"


class Rejected(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Routed(NamedTuple):
    """Where one record goes. The segment keeps ``event_ms`` (``NO_EVENT_TIME`` for dead
    letters) and, for a dead letter, ``detail``: its reason code and what was wrong."""

    buffer: BufferKey
    reason: str  # "" for archived records, else the dead-letter reason code
    event_ms: int = -1  # the event time of an archived record (-1 for dead letters)
    detail: str = ""  # a dead letter's "reason: what was wrong", at most 1000 characters


_FIELD_VALUE = attrgetter("value")  # of a jsonscan.field_decoder struct
_KEY = attrgetter("key")  # of a Record
_HEADERS = attrgetter("headers")  # of a Record
_INT = frozenset({int})
_archived = partial(tuple.__new__, Routed)  # Routed((buffer, "", event_ms, "")) without the Python-level __new__


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
        # The column-at-a-time path (route_batch) serves streams whose every verdict it can
        # reach by itself for the common record; any other stream is routed record by record.
        event_time = stream.event_time
        self._field_path = tuple(event_time.field.split(".")) if event_time.field else ()
        self._time_format = event_time.format
        self._zone = self._hours.zone
        self._batchable = (
            self._value_encoding == "json"
            and self._schema is None
            and not self._csv_paths
            and not stream.partition_by.fields
            and event_time.source in ("json_field", "record_timestamp")
        )
        self._from_field = event_time.source == "json_field"
        # a top-level event-time field is read by msgspec, a nested one by orjson (see _field_times)
        self._field_decoder = jsonscan.field_decoder(self._field_path[0]) if len(self._field_path) == 1 else None
        self._header_codes: dict[Headers, int] = {}
        # a source without offsets: a message must carry the id it is deduplicated by
        dedupe = stream.dedupe_settings.id if stream.source.shape.assigns_positions else None
        self._id_rule = dedupe if dedupe is not None and dedupe != CONTENT_SHA256 else None
        # only the RabbitMQ decoder marks a record it could not read; a Kafka header of that name
        # is a header like any other
        self._marks_undecodable = stream.source.shape.assigns_positions

    def _some_lack_ids(self, records: Sequence[Record]) -> bool:
        """A queue's records, some without the id they are deduplicated by: those are dead letters,
        which only ``route`` decides (the common batch has every id: one C-level scan of the keys)."""
        if self._id_rule is None:
            return False
        if self._id_rule == MESSAGE_ID:
            return None in map(_KEY, records) or b"" in map(_KEY, records)
        rule = self._id_rule
        return any(message_id(record, rule) is None for record in records)

    def _some_undecodable(self, records: Sequence[Record]) -> bool:
        """A queue's records, some the decoder could not read: only ``route`` dead-letters those."""
        if not self._marks_undecodable:
            return False
        return any(headers and headers[0][0] == UNDECODABLE_HEADER for headers in map(_HEADERS, records))

    def _key(self, kind: str, hour: str, folders: str = "") -> BufferKey:
        key = self._keys.get((kind, hour, folders))
        if key is None:
            if len(self._keys) > 10_000:  # a long-lived container meeting many distinct hours or values
                self._keys.clear()
            key = self._keys[(kind, hour, folders)] = BufferKey(kind, hour, folders)
        return key

    def _check(self, record: Record) -> object:
        """Validate the record's bytes; return the parsed JSON value when the stream needs it."""
        if self._marks_undecodable and record.headers and record.headers[0][0] == UNDECODABLE_HEADER:
            raise Rejected(UNDECODABLE, (record.headers[0][1] or b"").decode("utf-8", "replace"))
        if self._id_rule is not None and message_id(record, self._id_rule) is None:
            raise Rejected(MISSING_MESSAGE_ID, f"no id under dedupe.id {self._id_rule!r}: it cannot be deduplicated")
        value = record.value
        size = (len(value) if value else 0) + (len(record.key) if record.key else 0)
        if record.headers:
            size += sum(len(name.encode("utf-8")) + (len(data) if data else 0) for name, data in record.headers)
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
                    if data is not None:
                        data.decode("utf-8")
                except UnicodeDecodeError:
                    raise Rejected(INVALID_HEADER, f"header {name!r} is not UTF-8") from None
        parsed: object = None
        if value is None:  # a tombstone: no value to check or parse
            return None
        if self._value_encoding == "json":
            try:
                parsed = orjson.loads(value)
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
                value.decode("utf-8")
            except UnicodeDecodeError:
                raise Rejected(INVALID_VALUE, "value is not UTF-8") from None
            if self._one_line and (b"\n" in value or b"\r" in value):
                raise Rejected(MULTILINE_TEXT, "the text format keeps one value per line; this value has a line break")
        return parsed if self._needs_parse else None

    def route_batch(self, records: Sequence[Record]) -> list[Routed]:
        """``[self.route(record) for record in records]``, computed column at a time where the
        stream allows (see the module docstring)."""
        if not self._batchable or len(records) < 2 or self._some_lack_ids(records) or self._some_undecodable(records):
            return [self.route(record) for record in records]
        _topics, _partitions, _offsets, timestamps, values, keys, headers, _schemas = zip(*records, strict=True)
        tombstones: list[int] = []
        if None in values:  # tombstones are routed one by one (below); "{}" holds their place
            tombstones = [index for index, value in enumerate(values) if value is None]
            values = tuple(b"{}" if value is None else value for value in values)
        unsure = self._unsure_bytes(values, keys, headers)
        unsure.update(tombstones)
        if self._from_field:
            event_times = self._field_times(values)
        else:
            unsure.update(self._not_json(values))
            event_times = [ms if MIN_MS <= ms <= MAX_MS else -1 for ms in timestamps]
        if min(event_times) < 0:
            unsure.update(index for index, ms in enumerate(event_times) if ms < 0)
            labels = self._hours.labels([ms if ms >= 0 else 0 for ms in event_times])
        else:
            labels = self._hours.labels(event_times)
        key = self._key
        buffers = {label: key(RAW_KIND, label) for label in set(labels)}
        blanks = [""] * len(records)
        routed = list(map(_archived, zip(map(buffers.__getitem__, labels), blanks, event_times, blanks, strict=True)))
        for index in unsure:
            routed[index] = self.route(records[index])
        return routed

    def _unsure_bytes(
        self,
        values: Sequence[bytes],
        keys: Sequence[bytes | None],
        headers: Sequence[Headers],
    ) -> set[int]:
        """Records that may be oversized or carry text that may not be UTF-8: ``route`` decides them."""
        unsure: set[int] = set()
        cached = list(map(self._header_codes.get, headers))  # records mostly carry the same few headers
        codes = [self._header_code(pairs) for pairs in headers] if None in cached else cast(list[int], cached)
        lowest = min(codes)
        biggest_headers = max(max(codes), ~lowest if lowest < 0 else 0)
        longest_key = max(map(len, filter(None, keys)), default=0)
        if max(map(len, values)) + longest_key + biggest_headers > self._max_bytes:
            unsure.update(
                index
                for index, (value, key, code) in enumerate(zip(values, keys, codes, strict=True))
                if len(value) + (len(key) if key else 0) + (code if code >= 0 else ~code) > self._max_bytes
            )
        if self._key_text and not all(map(bytes.isascii, filter(None, keys))):
            unsure.update(index for index, key in enumerate(keys) if key and not key.isascii())
        if self._headers_text and lowest < 0:
            unsure.update(index for index, code in enumerate(codes) if code < 0)
        return unsure

    def _header_code(self, pairs: Headers) -> int:
        """The bytes of a record's headers as ``_check`` counts them, or its complement (``~size``)
        when some header's data is not ASCII (so may not be UTF-8). Cached: records mostly carry
        the same few headers."""
        code = self._header_codes.get(pairs)
        if code is None:
            size = sum(len(name.encode("utf-8")) + (len(data) if data else 0) for name, data in pairs)
            code = size if all(data is None or data.isascii() for _name, data in pairs) else ~size
            if len(self._header_codes) > 4096:
                self._header_codes.clear()
            self._header_codes[pairs] = code
        return code

    @staticmethod
    def _not_json(values: Sequence[bytes]) -> list[int]:
        """Indices of the values that may not be JSON (``route`` decides them, dead-lettering
        those orjson refuses): those msgspec refuses and those ``jsonscan.risky`` flags, on which
        msgspec could accept what orjson refuses."""
        unsure = jsonscan.risky(values)
        decode, error = jsonscan.document_decoder.decode, msgspec.DecodeError
        for index, value in enumerate(values):
            try:
                decode(value)
            except (error, RecursionError):
                unsure.add(index)
        return sorted(unsure)

    def _field_times(self, values: Sequence[bytes]) -> list[int]:
        """Each value's event time in ms from its JSON field, or -1 where ``route`` must decide
        (not JSON, no such field, a float, or a time ``parse_time_value`` refuses).

        A top-level field is read with msgspec into a struct holding just that field, the
        others skipped unbuilt. A value is -1 when msgspec refuses it (anything but an object
        included) or ``jsonscan.risky`` flags it (orjson might refuse it). What msgspec reads
        for the field is what orjson would whenever it can decide a time here: an int, the
        same for every int a time can be in range (msgspec keeps ints past 64 bits as ints,
        orjson makes floats of them, but those are out of range either way), and a str, the
        same for valid UTF-8; a float is -1 (not to depend on two float parsers agreeing)."""
        decoder = self._field_decoder
        if decoder is None:
            return self._nested_field_times(values)
        decode, error = decoder.decode, msgspec.DecodeError
        risky = jsonscan.risky(values)
        if not risky:
            try:  # the whole column at once: each value decoded exactly once
                nodes = list(map(_FIELD_VALUE, map(decode, values)))
            except (error, RecursionError):
                pass  # some value is no JSON object: decoded one by one below
            else:
                times = self._int_times(nodes)
                return times if times is not None else [self._time_of(node) for node in nodes]
        times = []
        for index, value in enumerate(values):  # the unsure ones are routed one by one afterwards
            try:
                times.append(-1 if index in risky else self._time_of(decode(value).value))
            except (error, RecursionError):
                times.append(-1)
        return times

    def _int_times(self, nodes: list[object]) -> list[int] | None:
        """``_field_times`` of a batch whose every value holds the field as a non-negative int
        (the common epoch timestamp), a column at a time; ``None`` for any other batch."""
        fmt = self._time_format
        if fmt == "iso8601" or set(map(type, nodes)) != _INT:
            return None
        numbers = cast(list[int], nodes)
        if min(numbers) < 0:
            return None
        if fmt == "epoch_s" or (fmt == "auto" and max(numbers) < SECONDS_LIMIT):
            times = list(map(mul, numbers, repeat(1000)))
        elif fmt == "epoch_ms" or min(numbers) >= SECONDS_LIMIT:
            times = numbers
        else:  # "auto" with seconds and milliseconds mixed
            return None
        if max(times) > MAX_MS:
            times = [ms if ms <= MAX_MS else -1 for ms in times]
        return times

    def _time_of(self, node: object, *, any_kind: bool = False) -> int:
        """A value's event time in ms from its field's JSON value, or -1 where ``route`` must
        decide. An int or a str is decided here; ``any_kind`` (the value came from orjson,
        ``route``'s own parser): every other kind but null and booleans goes to
        ``parse_time_value`` too, where from msgspec a float is left to ``route`` (not to depend
        on two float parsers agreeing)."""
        fmt = self._time_format
        if type(node) is int and node >= 0 and fmt != "iso8601":  # parse_time_value's _from_int
            ms = node * 1000 if fmt == "epoch_s" or (fmt == "auto" and node < SECONDS_LIMIT) else node
            return ms if ms <= MAX_MS else -1
        if type(node) is str or (any_kind and node is not None and type(node) is not bool):
            try:
                return parse_time_value(node, fmt, self._zone)
            except EventTimeError:
                return -1
        return -1  # missing, null, a boolean, a negative int, a float, an object or an array

    def _nested_field_times(self, values: Sequence[bytes]) -> list[int]:
        """``_field_times`` for a nested field (``a.b``): each value parsed whole with orjson."""
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        times: list[int] = []
        for value in values:
            try:
                node = loads(value)
            except decode_error:
                times.append(-1)
                continue
            for part in self._field_path:
                node = node.get(part) if type(node) is dict else None
            times.append(self._time_of(node, any_kind=True))
        return times

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
        return Routed(buffer, "", event_ms)

    def dead_letter(self, record: Record, reason: str, detail: str) -> Routed:
        # Filed under its Kafka timestamp's hour; a timestamp that is itself unusable (-1, or a
        # producer's microseconds) falls back to processing time, so dead-lettering never fails.
        usable = MIN_MS <= record.timestamp_ms <= MAX_MS
        filed_ms = record.timestamp_ms if usable else self._clock.now_ms()
        return Routed(self._key(ERRORS_KIND, self._hours.label(filed_ms)), reason, -1, f"{reason}: {detail}"[:1000])
