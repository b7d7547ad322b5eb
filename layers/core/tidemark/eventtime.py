"""Event-time extraction and the event-hour a record is filed under.

A record goes to the folder of its own event hour however late it arrives (seed rule: late
events are attributed to their event time). Times are epoch milliseconds throughout; naive
ISO-8601 strings are read in the stream's configured time zone.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tidemark.clock import Clock
from tidemark.config.model import EventTimeConfig
from tidemark.records.model import Record

MISSING_EVENT_TIME = "missing_event_time"
INVALID_EVENT_TIME = "invalid_event_time"

# Epoch numbers below this are seconds, above are milliseconds (1e11 s is the year 5138,
# 1e11 ms is 1973), the usual heuristic for 'auto'.
_SECONDS_LIMIT = 100_000_000_000
MIN_MS = 0  # 1970-01-01
# 9999-12-30T23:59:59.999Z: a day short of datetime's limit, so the hour label of any accepted
# time exists in every time zone.
MAX_MS = 253_402_214_399_999
_HOUR_MS = 3_600_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class EventTimeError(ValueError):
    """The record has no usable event time; ``reason`` is the dead-letter reason code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


Extractor = Callable[[Record, Any], int]


def _check_range(ms: int) -> int:
    if not MIN_MS <= ms <= MAX_MS:
        raise EventTimeError(INVALID_EVENT_TIME, f"{ms} ms is outside 1970..9999")
    return ms


def _from_number(number: float, fmt: str) -> int:
    try:
        seconds = fmt == "epoch_s" or (fmt == "auto" and abs(number) < _SECONDS_LIMIT)
        ms = round(number * 1000) if seconds else int(number)
    except (OverflowError, ValueError):  # infinities and NaN, however they arose
        raise EventTimeError(INVALID_EVENT_TIME, f"{number!r} is not a finite time") from None
    return _check_range(ms)


def _from_iso(text: str, zone: ZoneInfo) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise EventTimeError(INVALID_EVENT_TIME, f"{text[:64]!r} is not ISO-8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    # Exact integer arithmetic: float timestamps lose the last millisecond for some instants.
    return _check_range((moment - _EPOCH) // timedelta(milliseconds=1))


def parse_time_value(value: Any, fmt: str, zone: ZoneInfo) -> int:
    """Interpret a field or header value as epoch milliseconds."""
    if type(value) is int and fmt != "iso8601":  # the common case, checked first
        return _from_number(value, fmt)
    if isinstance(value, bool) or value is None:
        raise EventTimeError(INVALID_EVENT_TIME, f"{value!r} is not a time")
    if isinstance(value, int | float):
        if fmt == "iso8601":
            raise EventTimeError(INVALID_EVENT_TIME, f"{value!r} is a number, expected ISO-8601")
        if value != value or value in (float("inf"), float("-inf")):
            raise EventTimeError(INVALID_EVENT_TIME, f"{value!r} is not a finite number")
        return _from_number(value, fmt)
    if isinstance(value, str):
        text = value.strip()
        if fmt != "iso8601":
            try:
                return _from_number(float(text) if "." in text else int(text), fmt)
            except ValueError:
                if fmt != "auto":
                    raise EventTimeError(INVALID_EVENT_TIME, f"{text[:64]!r} is not an epoch number") from None
        return _from_iso(text, zone)
    raise EventTimeError(INVALID_EVENT_TIME, f"a {type(value).__name__} is not a time")


def build_extractor(config: EventTimeConfig, clock: Clock) -> Extractor:
    """Return ``f(record, parsed_json_value) -> epoch ms`` for the configured source."""
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
            for header, data in record.headers:
                if header == name:
                    try:
                        text = data.decode("utf-8")
                    except UnicodeDecodeError:
                        raise EventTimeError(INVALID_EVENT_TIME, f"header {name!r} is not UTF-8") from None
                    return parse_time_value(text, fmt, zone)
            raise EventTimeError(MISSING_EVENT_TIME, f"header {name!r} is absent")

        return from_header
    assert config.field is not None
    path = tuple(config.field.split("."))

    def from_field(_record: Record, parsed: Any) -> int:
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
        bucket = ms // _HOUR_MS
        offset = self._offsets.get(bucket)
        if offset is None:
            first, last = self._offset_ms(bucket * _HOUR_MS), self._offset_ms(bucket * _HOUR_MS + _HOUR_MS - 1)
            offset = self._offsets[bucket] = first if first == last else self._VARIES
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
