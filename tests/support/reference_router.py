"""A plain, slow, obviously correct reference router: the verdict every record should get.

It restates the routing rules (README, ``tidemark.routing``, ``tidemark.eventtime``,
``tidemark.partitioning``) from their documentation, and shares no code with the router: it
imports from ``tidemark`` only the types of what it is handed (stream config, record, clock).
JSON is read with the stdlib plus orjson's strictness rules restated (``parse_json``); orjson
itself is used only to render a non-string partition value. ``tests/unit/test_router_equivalence.py``
compares the two on generated records.

The rules, in the order they are applied (the first that fails names the dead-letter reason):

1. ``oversized``: the key, the value and every header's name and data together are more than
   ``dead_letter.max_record_bytes`` bytes.
2. ``invalid_key_encoding``: ``encoding.key: text`` and the key (when there is one) is not UTF-8.
3. ``invalid_header_encoding``: ``encoding.headers: text`` and some header's data is not UTF-8.
4. ``invalid_value_encoding``: ``encoding.value: json`` and the value is not JSON as orjson
   reads it (see ``parse_json``), or ``encoding.value: text`` and the value is not UTF-8.
   ``multiline_text_value``: ``format.type: text`` with text values, and the value has a
   ``\\n`` or ``\\r``.
5. ``missing_event_time`` / ``invalid_event_time``: see ``time_value_ms``. Numbers are epoch
   numbers (under ``auto`` seconds below 1e11, else milliseconds), floats read through their
   shortest repr, numeric strings as exact decimals, fractions floored to the millisecond; an
   8-digit string is a ``YYYYMMDD`` date under ``auto``; other strings ISO-8601
   (``datetime.fromisoformat``), naive ones in the stream's zone; 1970..9999-12-30T23:59:59.999Z.
6. ``missing_partition_value`` (``partition_by.missing: dead_letter``) / ``unrenderable_value``.

A tombstone (a null value) and a null header value count no bytes in rule 1, a null header
value is no text to check in rule 3, and a tombstone has no value for rule 4. A tombstone's
event time (rule 5) is its record timestamp under ``json_field``, and under ``header`` when
the first header of that name is absent or null (a null header is absent for any record); its
``_value.`` partition levels are ``__missing__`` whatever ``missing`` says (rule 6).

An archived record goes to ``raw/<hour of its event time>/<folders>``; a dead letter to
``errors/<hour>``, the hour of its Kafka timestamp when that is in 0..MAX_MS, else of the
clock's now. Hours are ``YYYY-MM-DDTHH`` in the stream's time zone.

Value schemas and csv ``value.`` columns are not modelled: ``ReferenceRouter`` refuses a stream
that has them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import orjson

from tidemark.clock import Clock
from tidemark.config.model import StreamConfig
from tidemark.records.model import Record

#: 1970-01-01T00:00:00.000Z and 9999-12-30T23:59:59.999Z, the accepted event times, in ms
FIRST_MS = 0
LAST_MS = (datetime(9999, 12, 31, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1) - 1
#: ``auto`` reads an epoch number of magnitude below this as seconds, else as milliseconds
SECONDS_BELOW = 10**11
#: orjson reads at most this many levels of nested arrays and objects
JSON_MAX_DEPTH = 1024

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_NAIVE = datetime(1970, 1, 1)
ONE_MS = timedelta(milliseconds=1)


class Verdict(NamedTuple):
    kind: str  # "raw" or "errors"
    hour: str  # YYYY-MM-DDTHH in the stream's time zone
    folders: str  # partition-by folders ("" for dead letters and unpartitioned streams)
    reason: str  # "" for archived records, else the dead-letter reason code
    event_ms: int  # the event time of an archived record, -1 for a dead letter


class DeadLetter(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# -- JSON, as orjson reads it --------------------------------------------------------------------
#
# orjson 3.x, found by experiment, differs from ``json.loads`` in these ways, each restated below:
#   * the input must be UTF-8 (no invalid bytes, no encoded surrogates, no overlong forms), with
#     no byte order mark (``json.loads`` of bytes would accept a BOM);
#   * NaN, Infinity, -Infinity are not JSON, nor is a number too large for a double (1e400);
#   * an integer in -2**63 .. 2**64-1 is an int, any other integer a float (lossy);
#   * a ``\\uXXXX`` escape of a lone surrogate is an error (``json.loads`` keeps it in the str);
#   * at most 1024 levels of nesting (``json.loads`` recurses, and fails at Python's limit).
# Both: duplicate keys keep the last value; whitespace is space, tab, LF and CR only; control
# characters inside strings are errors; no trailing commas, leading zeros or trailing content.


def _int_as_orjson(text: str) -> int | float:
    digits = text.lstrip("-")
    if len(digits) <= 20:  # never int() a huge digit string (Python refuses > 4300 digits)
        number = int(text)
        if -(2**63) <= number <= 2**64 - 1:
            return number
    return _finite_float(text)


def _finite_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"{text[:20]} is infinite as a double")
    return number


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects, brackets inside strings not counted."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _has_lone_surrogate(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if any(0xD800 <= ord(char) <= 0xDFFF for char in item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


@contextmanager
def _recursion_limit(limit: int) -> Iterator[None]:
    # json.loads' C scanner counts each nesting level against Python's recursion limit.
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def parse_json(value: bytes) -> Any:
    """The JSON value, as orjson reads it; ``ValueError`` when orjson would refuse it."""
    text = value.decode("utf-8")  # UnicodeDecodeError is a ValueError
    if text.startswith("\ufeff"):
        raise ValueError("a byte order mark")
    if _depth(text) > JSON_MAX_DEPTH:
        raise ValueError("nested too deep")
    with _recursion_limit(JSON_MAX_DEPTH * 4 + 1000):
        parsed = json.loads(
            text, parse_int=_int_as_orjson, parse_float=_finite_float, parse_constant=_no_constants
        )  # json.JSONDecodeError is a ValueError
    if _has_lone_surrogate(parsed):
        raise ValueError("a lone surrogate escape")
    return parsed


# -- event time ----------------------------------------------------------------------------------

BASIC_DATE = re.compile(r"[0-9]{8}")


def _in_range(ms: int) -> int:
    if not FIRST_MS <= ms <= LAST_MS:
        raise DeadLetter("invalid_event_time")
    return ms


def _floor_times(number: Decimal, factor: int) -> int:
    """floor(number * factor), exactly; numbers far outside 0..LAST_MS are refused unmultiplied."""
    if number.is_zero():
        return 0
    if number.adjusted() > 30:  # |number| >= 1e30: outside 1970..9999 in any unit
        raise DeadLetter("invalid_event_time")
    if number.adjusted() < -30:  # 0 < |number| < 1e-29: floors to 0 or to -1
        return 0 if number > 0 else -1
    return math.floor(Fraction(number) * factor)


def _epoch(number: Decimal, fmt: str) -> int:
    """An exact epoch number in the configured unit, floored to the millisecond."""
    if not number.is_finite():
        raise DeadLetter("invalid_event_time")
    seconds = fmt == "epoch_s" or (fmt == "auto" and -SECONDS_BELOW < number < SECONDS_BELOW)  # exact
    return _in_range(_floor_times(number, 1000 if seconds else 1))


def _iso(text: str, zone: ZoneInfo) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise DeadLetter("invalid_event_time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)  # fold=0: the earlier of a repeated time
    offset = moment.utcoffset()
    assert offset is not None
    # in timedelta arithmetic, never in datetimes: 0001-01-01T00:00+05:00 is before datetime.min in UTC
    return _in_range(((moment.replace(tzinfo=None) - EPOCH_NAIVE) - offset) // ONE_MS)


def _decimal(text: str) -> Decimal | None:
    """A numeric string as the exact decimal it spells, ``None`` if it is not one.

    "Numeric" is what Python's ``Decimal`` reads: an optional sign, digits with an optional
    fraction and an optional exponent ('1.7e9' and '17e8' alike), also Unicode decimal digits
    and ``_`` between digits; 'NaN' and 'Infinity' are numeric, but never a time."""
    try:
        return Decimal(text)
    except (ValueError, ArithmeticError):  # decimal.InvalidOperation is an ArithmeticError
        return None


def time_value_ms(value: Any, fmt: str, zone: ZoneInfo) -> int:
    """A JSON field's (or a header's, as a str) value as epoch ms under ``event_time.format``."""
    if value is None or isinstance(value, bool | dict | list):
        raise DeadLetter("invalid_event_time")
    if isinstance(value, int):
        if fmt == "iso8601":
            raise DeadLetter("invalid_event_time")
        return _epoch(Decimal(value), fmt)
    if isinstance(value, float):
        if fmt == "iso8601" or not math.isfinite(value):
            raise DeadLetter("invalid_event_time")
        return _epoch(Decimal(repr(value)), fmt)  # the shortest repr: what the producer wrote
    assert isinstance(value, str), type(value)
    text = value.strip()
    if fmt == "iso8601" or (fmt == "auto" and BASIC_DATE.fullmatch(text)):
        return _iso(text, zone)
    number = _decimal(text)
    if number is not None:
        return _epoch(number, fmt)
    if fmt == "auto":
        return _iso(text, zone)
    raise DeadLetter("invalid_event_time")  # epoch_s / epoch_ms want a number


def hour_label(ms: int, timezone: str) -> str:
    local = (EPOCH + timedelta(milliseconds=ms)).astimezone(ZoneInfo(timezone))
    return local.strftime("%Y-%m-%dT%H")


# -- partition-by folders ------------------------------------------------------------------------

SAFE_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def folder_level(value: bytes, max_length: int) -> str:
    if not value:
        return "__empty__"
    encoded = "".join(chr(byte) if byte in SAFE_BYTES else f"%{byte:02X}" for byte in value)
    if set(value) == {ord(".")}:
        encoded = "%2E" * len(value)
    elif encoded.startswith("__"):
        encoded = "%5F" + encoded[1:]
    if len(encoded) > max_length:
        kept = ""
        for unit in re.findall(r"%[0-9A-F]{2}|.", encoded):  # never split an escape
            if len(kept) + len(unit) > max_length - 17:
                break
            kept += unit
        encoded = f"{kept}~{hashlib.sha256(value).hexdigest()[:16]}"
    return encoded


def _value_text(parsed: Any, path: list[str]) -> bytes | None:
    node = parsed
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    if node is None:
        return None
    if isinstance(node, str):
        return node.encode("utf-8")
    # Rendering JSON again is orjson's business (its number and escape spellings, and it writes
    # at most 254 levels of nesting): orjson is the oracle here, not a rule restated.
    try:
        return orjson.dumps(node)
    except TypeError:
        raise DeadLetter("unrenderable_value") from None


# -- the router ----------------------------------------------------------------------------------


class ReferenceRouter:
    def __init__(self, stream: StreamConfig, clock: Clock) -> None:
        if stream.format.value_schema is not None or (
            stream.format.type == "csv" and any(column.startswith("value.") for column in stream.csv_columns)
        ):
            raise NotImplementedError("the reference router does not model value schemas or csv value columns")
        self.stream = stream
        self.clock = clock
        self.zone = ZoneInfo(stream.event_time.timezone)

    def verdicts(self, records: Sequence[Record]) -> list[Verdict]:
        return [self.verdict(record) for record in records]

    def verdict(self, record: Record) -> Verdict:
        try:
            parsed = self._check(record)
            event_ms = self._event_ms(record, parsed)
            folders = self._folders(record, parsed)
        except DeadLetter as dead:
            usable = FIRST_MS <= record.timestamp_ms <= LAST_MS
            filed_ms = record.timestamp_ms if usable else self.clock.now_ms()
            return Verdict("errors", hour_label(filed_ms, self.stream.event_time.timezone), "", dead.reason, -1)
        return Verdict("raw", hour_label(event_ms, self.stream.event_time.timezone), folders, "", event_ms)

    def _check(self, record: Record) -> Any:
        """The parsed JSON value (None unless the value encoding is json)."""
        encoding = self.stream.encoding
        size = len(record.value or b"") + len(record.key or b"")
        size += sum(len(name.encode("utf-8")) + len(data or b"") for name, data in record.headers)
        if size > self.stream.dead_letter.max_record_bytes:
            raise DeadLetter("oversized")
        if encoding.key == "text" and record.key is not None and not _is_utf8(record.key):
            raise DeadLetter("invalid_key_encoding")
        if encoding.headers == "text" and not all(_is_utf8(data or b"") for _name, data in record.headers):
            raise DeadLetter("invalid_header_encoding")
        if record.value is None:  # a tombstone: no value to check
            return None
        if encoding.value == "json":
            try:
                return parse_json(record.value)
            except ValueError:
                raise DeadLetter("invalid_value_encoding") from None
        if encoding.value == "text":
            if not _is_utf8(record.value):
                raise DeadLetter("invalid_value_encoding")
            if self.stream.format.type == "text" and (b"\n" in record.value or b"\r" in record.value):
                raise DeadLetter("multiline_text_value")
        return None

    def _event_ms(self, record: Record, parsed: Any) -> int:
        config = self.stream.event_time
        if config.source == "processing_time":
            return self.clock.now_ms()
        if config.source == "record_timestamp":
            return _in_range(record.timestamp_ms)
        if config.source == "header":
            # The first header of that name, as the router reads it today (partition_by's
            # _header.<name> levels take the last one, as Kafka clients' lastHeader does).
            found = [data for name, data in record.headers if name == config.header]
            if not found or found[0] is None:
                if record.value is None:
                    return _in_range(record.timestamp_ms)
                raise DeadLetter("missing_event_time")
            if not _is_utf8(found[0]):
                raise DeadLetter("invalid_event_time")
            return time_value_ms(found[0].decode("utf-8"), config.format, self.zone)
        assert config.source == "json_field" and config.field is not None
        if record.value is None:
            return _in_range(record.timestamp_ms)
        node = parsed
        for part in config.field.split("."):
            if not isinstance(node, dict) or part not in node:
                raise DeadLetter("missing_event_time")
            node = node[part]
        return time_value_ms(node, config.format, self.zone)

    def _folders(self, record: Record, parsed: Any) -> str:
        config = self.stream.partition_by
        levels = []
        for field in config.fields:
            selector = field.field
            value: bytes | None
            if selector == "_key":
                value = record.key
            elif selector == "_topic":
                value = record.topic.encode("utf-8") if record.topic else None
            elif selector == "_partition":
                value = str(record.partition).encode("ascii")
            elif selector.startswith("_header."):
                found = [data for name, data in record.headers if name == selector.removeprefix("_header.")]
                value = found[-1] if found else None
            else:
                value = _value_text(parsed, selector.removeprefix("_value.").split("."))
            if value is None:
                tombstone_value_level = record.value is None and selector.startswith("_value.")
                if config.missing == "dead_letter" and not tombstone_value_level:
                    raise DeadLetter("missing_partition_value")
                level = "__missing__"
            else:
                level = folder_level(value, config.max_value_length)
            levels.append(f"{field.name}={level}" if config.style == "keys_and_values" else level)
        return "/".join(levels)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
