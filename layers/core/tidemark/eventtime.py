"""Event-time extraction and the event-hour a record is filed under.

A record goes to the folder of its own event hour however late it arrives (seed rule: late
events are attributed to their event time). Times are epoch milliseconds throughout; naive
ISO-8601 strings are read in the stream's configured time zone.

How a value is read (``EventTimeConfig.format``):

* JSON numbers (int or float) are always epoch numbers. Under ``auto`` a magnitude below 1e11
  is seconds, anything larger milliseconds; ``epoch_s``/``epoch_ms`` fix the unit.
* Under ``auto`` a string of exactly eight ASCII digits is a basic ISO-8601 calendar date,
  ``YYYYMMDD``, at midnight in the stream's time zone ('20240101' is 2024-01-01, not 1970-08-23
  as epoch seconds); an impossible date such as '20241340' is ``invalid_event_time``. Every
  other numeric string is an epoch number, read like a JSON number, and every remaining string
  ISO-8601 (including the basic forms ``datetime.fromisoformat`` reads, '20240101T120000Z').
  Epoch strings of exactly eight digits (1970-04-26..1973-03-03 in seconds) therefore need
  an explicit ``epoch_s`` or ``epoch_ms``.
* ``epoch_s``/``epoch_ms`` read every digit string as a number; ``iso8601`` reads every string
  as ISO-8601 (so '20240101' is a date there too) and rejects numbers.

Fractions are floored to the millisecond, exactly, whatever the notation: the instant
22:59:59.9996 is in hour 22 as ``1700002799.9996``, ``"1700002799.9996"`` or
``"2023-11-14T22:59:59.9996Z"`` (``fromisoformat`` truncates sub-microsecond digits, also a
floor). A float is read through its shortest repr, which is the decimal the producer wrote
whenever a double can hold it, because binary arithmetic on it is inexact (``1.001 * 1000`` is
``1000.9999999999999``); numeric strings are read as exact decimals.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import ROUND_FLOOR, Context, Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

from tidemark.clock import Clock
from tidemark.config.model import EventTimeConfig
from tidemark.records.model import Record

MISSING_EVENT_TIME = "missing_event_time"
INVALID_EVENT_TIME = "invalid_event_time"

# Epoch numbers below this are seconds, above are milliseconds (1e11 s is the year 5138,
# 1e11 ms is 1973), the usual heuristic for 'auto'.
SECONDS_LIMIT = _SECONDS_LIMIT = 100_000_000_000
MIN_MS = 0  # 1970-01-01
# 9999-12-30T23:59:59.999Z: a day short of datetime's limit, so the hour label of any accepted
# time exists in every time zone.
MAX_MS = 253_402_214_399_999
_HOUR_MS = 3_600_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PRINTABLE = 10**40
# Exact bounds for decimal epoch numbers: a value floors into MIN_MS..MAX_MS iff it is in
# [low, high) in its unit.
_MIN_MS_D, _END_MS_D = Decimal(MIN_MS), Decimal(MAX_MS + 1)
_MIN_S, _END_S = _MIN_MS_D.scaleb(-3), _END_MS_D.scaleb(-3)
_MILLI, _ONE = Decimal("0.001"), Decimal(1)
_EXACT = Context(prec=40)


class EventTimeError(ValueError):
    """The record has no usable event time; ``reason`` is the dead-letter reason code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


Extractor = Callable[[Record, Any], int]


def _check_range(ms: int) -> int:
    if not MIN_MS <= ms <= MAX_MS:
        # Never print a huge integer: str() refuses more than 4300 digits with a ValueError, and
        # anything but EventTimeError here would fail the whole batch instead of one record.
        shown = f"{ms} ms" if abs(ms) <= _PRINTABLE else "a time that"
        raise EventTimeError(INVALID_EVENT_TIME, f"{shown} is outside 1970..9999")
    return ms


def _from_int(number: int, fmt: str) -> int:
    seconds = fmt == "epoch_s" or (fmt == "auto" and abs(number) < _SECONDS_LIMIT)
    return _check_range(number * 1000 if seconds else number)


def _from_decimal(number: Decimal, fmt: str, shown: str) -> int:
    """Floor an exact decimal epoch number to the millisecond.

    Bounds come first, on the exact value, so that no arithmetic ever runs on a huge or
    minute exponent ('1.5e-999999999999' would otherwise be a denominator of 10**999999999999).
    Within bounds at most 15 digits remain before the point, so quantizing to 0.001 s (or 1 ms)
    with ROUND_FLOOR is exact in a 40-digit context, unlike ``number * 1000``, which rounds to
    the context's precision first.
    """
    if not number.is_finite():
        raise EventTimeError(INVALID_EVENT_TIME, f"{shown} is not a finite time")
    # copy_abs, not abs(): it is exact, where abs() overflows the context on '1.5e999999999999'.
    seconds = fmt == "epoch_s" or (fmt == "auto" and number.copy_abs() < _SECONDS_LIMIT)
    low, high = (_MIN_S, _END_S) if seconds else (_MIN_MS_D, _END_MS_D)
    if not low <= number < high:
        raise EventTimeError(INVALID_EVENT_TIME, f"{shown} is outside 1970..9999")
    floored = number.quantize(_MILLI if seconds else _ONE, rounding=ROUND_FLOOR, context=_EXACT)
    return _check_range(int(floored.scaleb(3, context=_EXACT)) if seconds else int(floored))


def _from_fixed_point(text: str, fmt: str) -> int | None:
    """The fast exact path for plain ``digits.digits`` (the repr of every float from 1e-4 to
    1e16, and nearly every numeric string): floor by cutting the fraction after three digits.
    None for anything else (signs, exponents, a missing side), which takes the Decimal path."""
    whole, _, fraction = text.partition(".")
    if not (0 < len(whole) <= 15 and whole.isdigit() and fraction.isdigit() and text.isascii()):
        return None
    units = int(whole)  # the value is below 1e11 iff its whole part is
    if fmt == "epoch_s" or (fmt == "auto" and units < _SECONDS_LIMIT):
        return _check_range(units * 1000 + int(fraction[:3].ljust(3, "0")))
    return _check_range(units)


def _parse_number(text: str) -> int | Decimal | None:
    """A numeric string as an exact number, None if it is not one."""
    try:
        plain = "." not in text and "e" not in text and "E" not in text  # '17e8' is a number too
        return int(text) if plain else Decimal(text)
    except (ValueError, InvalidOperation):  # ValueError also for ints longer than 4300 digits
        return None


def _from_iso(text: str, zone: ZoneInfo) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise EventTimeError(INVALID_EVENT_TIME, f"{text[:64]!r} is not ISO-8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    # Exact integer arithmetic: float timestamps lose the last millisecond for some instants.
    return _check_range((moment - _EPOCH) // timedelta(milliseconds=1))


def _is_basic_date(text: str) -> bool:
    """``YYYYMMDD``: what an 8-digit string means under ``auto`` (see the module docstring)."""
    return len(text) == 8 and text.isdigit() and text.isascii()


def parse_time_value(value: Any, fmt: str, zone: ZoneInfo) -> int:
    """Interpret a field or header value as epoch milliseconds."""
    if type(value) is int and fmt != "iso8601":  # the common case, checked first
        return _from_int(value, fmt)
    if isinstance(value, bool) or value is None:
        raise EventTimeError(INVALID_EVENT_TIME, f"{value!r} is not a time")
    if isinstance(value, int | float):
        if fmt == "iso8601":
            raise EventTimeError(INVALID_EVENT_TIME, f"{value!r} is a number, expected ISO-8601")
        if isinstance(value, int):
            return _from_int(value, fmt)
        if value != value or value in (float("inf"), float("-inf")):
            raise EventTimeError(INVALID_EVENT_TIME, f"{value!r} is not a finite number")
        shortest = repr(value)
        fixed = _from_fixed_point(shortest, fmt)
        return _from_decimal(Decimal(shortest), fmt, shortest) if fixed is None else fixed
    if isinstance(value, str):
        text = value.strip()
        if fmt == "iso8601" or (fmt == "auto" and _is_basic_date(text)):
            return _from_iso(text, zone)
        if "." in text:
            fixed = _from_fixed_point(text, fmt)
            if fixed is not None:
                return fixed
        number = _parse_number(text)
        if isinstance(number, int):
            return _from_int(number, fmt)
        if number is not None:
            return _from_decimal(number, fmt, repr(text[:64]))
        if fmt != "auto":
            raise EventTimeError(INVALID_EVENT_TIME, f"{text[:64]!r} is not an epoch number")
        return _from_iso(text, zone)
    raise EventTimeError(INVALID_EVENT_TIME, f"a {type(value).__name__} is not a time")


def build_extractor(config: EventTimeConfig, clock: Clock) -> Extractor:
    """Return ``f(record, parsed_json_value) -> epoch ms`` for the configured source.

    A tombstone (``record.value is None``) has no value to read a field from: under
    ``json_field`` its event time is its record timestamp, and under ``header`` too when it lacks
    the header (a header it has is read, and one that is no time is ``invalid_event_time`` as for
    any record). Either way a tombstone is never ``missing_event_time``: a delete is a record."""
    zone = ZoneInfo(config.timezone)
    fmt = config.format
    if config.source == "record_timestamp":
        return lambda record, _parsed: _check_range(record.timestamp_ms)
    if config.source == "processing_time":
        return lambda _record, _parsed: clock.now_ms()
    if config.source == "header":
        name = config.header
        assert name is not None

        def from_header(record: Record, _parsed: Any) -> int:
            missing = f"header {name!r} is absent"
            for header, data in record.headers:
                if header == name:
                    if data is None:  # a null header value holds no time
                        missing = f"header {name!r} is null"
                        break
                    try:
                        text = data.decode("utf-8")
                    except UnicodeDecodeError:
                        raise EventTimeError(INVALID_EVENT_TIME, f"header {name!r} is not UTF-8") from None
                    return parse_time_value(text, fmt, zone)
            if record.value is None:  # a tombstone without the header: its record timestamp
                return _check_range(record.timestamp_ms)
            raise EventTimeError(MISSING_EVENT_TIME, missing)

        return from_header
    assert config.field is not None
    path = tuple(config.field.split("."))

    def from_field(record: Record, parsed: Any) -> int:
        if record.value is None:  # a tombstone has no field to read: its record timestamp
            return _check_range(record.timestamp_ms)
        node = parsed
        for part in path:
            if not isinstance(node, dict) or part not in node:
                raise EventTimeError(MISSING_EVENT_TIME, f"field {config.field!r} is absent")
            node = node[part]
        return parse_time_value(node, fmt, zone)

    return from_field


class HourBucketer:
    """Maps epoch milliseconds to the event-hour label ``YYYY-MM-DDTHH`` in one time zone.

    The zone's UTC offset is looked up once per UTC hour and reused for every record of that
    hour (it is piecewise constant); only an hour that contains an offset change falls back to
    a per-record lookup. Offsets are applied to the second, so historic zones with odd offsets
    (Africa/Monrovia's -00:44:30) and half-hour zones are exact.
    """

    _VARIES = object()

    def __init__(self, timezone: str = "UTC") -> None:
        self._zone = ZoneInfo(timezone)
        self._utc = timezone in ("UTC", "Etc/UTC")
        self._offsets: dict[int, object] = {}
        self._labels: dict[int, str] = {}

    @property
    def zone(self) -> ZoneInfo:
        return self._zone

    def labels(self, times: list[int]) -> list[str]:
        """``[self.label(ms) for ms in times]``, looked up once per distinct UTC hour where the
        zone's offset is a whole number of hours all through it (every UTC hour in UTC); if any
        hour of the batch is not such an hour (a half-hour zone, an offset change), the whole
        batch is labelled record by record."""
        buckets = [ms // _HOUR_MS for ms in times]
        table: dict[int, str] = {}
        for bucket in set(buckets):
            offset = 0 if self._utc else self._offset_of(bucket)
            if offset is self._VARIES or offset % _HOUR_MS:  # type: ignore[operator]
                return [self.label(ms) for ms in times]
            table[bucket] = self._label(bucket + offset // _HOUR_MS)  # type: ignore[operator]
        return list(map(table.__getitem__, buckets))

    def _offset_of(self, bucket: int) -> object:
        """The zone's offset in ms all through UTC hour ``bucket``, or ``_VARIES``."""
        offset = self._offsets.get(bucket)
        if offset is None:
            first, last = self._offset_ms(bucket * _HOUR_MS), self._offset_ms(bucket * _HOUR_MS + _HOUR_MS - 1)
            offset = self._offsets[bucket] = first if first == last else self._VARIES
        return offset

    def _offset_ms(self, ms: int) -> int:
        offset = datetime.fromtimestamp(ms / 1000, self._zone).utcoffset()
        return 0 if offset is None else offset // timedelta(milliseconds=1)

    def _label(self, local_hour: int) -> str:
        label = self._labels.get(local_hour)
        if label is None:
            if len(self._labels) > 100_000:
                self._labels.clear()
                self._offsets.clear()
            label = (_EPOCH + timedelta(hours=local_hour)).strftime("%Y-%m-%dT%H")
            self._labels[local_hour] = label
        return label

    def label(self, ms: int) -> str:
        if self._utc:
            return self._label(ms // _HOUR_MS)
        offset = self._offset_of(ms // _HOUR_MS)
        local_ms = ms + (self._offset_ms(ms) if offset is self._VARIES else offset)  # type: ignore[operator]
        return self._label(local_ms // _HOUR_MS)


def hour_end_ms(label: str, timezone: str = "UTC") -> int:
    """Epoch ms at which the event hour ``label`` (local to ``timezone``) ends: the later of one
    hour after its (last) start and the start of the next label, so a repeated hour of a DST
    fall-back -- also the 30-minute ones -- is never ended too early."""
    local = datetime.strptime(label, "%Y-%m-%dT%H")
    zone = ZoneInfo(timezone)
    last_start = local.replace(tzinfo=zone, fold=1).timestamp()
    next_start = (local + timedelta(hours=1)).replace(tzinfo=zone, fold=1).timestamp()
    return int(max(last_start + 3600, next_start) * 1000)


def hour_path(label: str) -> str:
    """``2026-11-21T07`` -> ``2026/11/21/07`` (the S3 folder)."""
    return f"{label[0:4]}/{label[5:7]}/{label[8:10]}/{label[11:13]}"


_ISO_SECONDS: dict[int, str] = {}


def iso_utc(ms: int) -> str:
    """Epoch ms -> ``2026-11-21T07:12:33.123Z`` (the seconds part is cached: records of one
    object share few distinct seconds, and ``strftime`` dominates rendering otherwise)."""
    seconds, millis = divmod(ms, 1000)
    prefix = _ISO_SECONDS.get(seconds)
    if prefix is None:
        if len(_ISO_SECONDS) > 100_000:
            _ISO_SECONDS.clear()
        prefix = _ISO_SECONDS[seconds] = (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.")
    return f"{prefix}{millis:03d}Z"
