"""tidemark.eventtime: extractors, the event-hour bucketer and the path/ISO helpers."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tidemark.clock import ManualClock
from tidemark.config.model import EventTimeConfig
from tidemark.eventtime import (
    INVALID_EVENT_TIME,
    MISSING_EVENT_TIME,
    EventTimeError,
    HourBucketer,
    build_extractor,
    hour_path,
    iso_utc,
    parse_time_value,
)
from tidemark.records.model import Record

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, milli: int = 0) -> int:
    """Exact epoch milliseconds (integer arithmetic, no float rounding)."""
    moment = datetime(year, month, day, hour, minute, second, milli * 1000, tzinfo=UTC)
    return (moment - EPOCH) // timedelta(milliseconds=1)


def record(timestamp_ms: int = utc_ms(2025, 11, 21, 8), headers: tuple[tuple[str, bytes], ...] = ()) -> Record:
    return Record(topic="orders", partition=0, offset=1, timestamp_ms=timestamp_ms, value=b"{}", headers=headers)


def extract(
    config: EventTimeConfig, parsed: Any = None, rec: Record | None = None, clock: ManualClock | None = None
) -> int:
    return build_extractor(config, clock or ManualClock())(rec or record(), parsed)


def field_config(field: str = "created_at", fmt: str = "auto", timezone: str = "UTC") -> EventTimeConfig:
    return EventTimeConfig(source="json_field", field=field, format=fmt, timezone=timezone)  # type: ignore[arg-type]


# -- record_timestamp -----------------------------------------------------------------------------


def test_record_timestamp_source_returns_the_kafka_timestamp() -> None:
    ms = utc_ms(2026, 11, 21, 7, 12, 33, 123)
    assert extract(EventTimeConfig(source="record_timestamp"), rec=record(ms)) == ms


def test_default_source_is_record_timestamp() -> None:
    assert extract(EventTimeConfig(), rec=record(1234)) == 1234


@pytest.mark.parametrize("timestamp", [-1, -1000, 253_402_214_400_000, 253_402_300_800_000])
def test_record_timestamp_out_of_range_is_invalid(timestamp: int) -> None:
    with pytest.raises(EventTimeError) as caught:
        extract(EventTimeConfig(source="record_timestamp"), rec=record(timestamp))
    assert caught.value.reason == INVALID_EVENT_TIME


# -- processing_time ------------------------------------------------------------------------------


def test_processing_time_follows_the_injected_clock() -> None:
    clock = ManualClock(start_ms=utc_ms(2026, 1, 2, 3, 4, 5))
    extractor = build_extractor(EventTimeConfig(source="processing_time"), clock)
    assert extractor(record(-1), None) == utc_ms(2026, 1, 2, 3, 4, 5)
    clock.advance(minutes=90, ms=7)
    assert extractor(record(-1), None) == utc_ms(2026, 1, 2, 4, 34, 5, 7)


# -- json_field -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fmt", "timezone", "expected"),
    [
        # epoch seconds / milliseconds, numbers and numeric strings
        (1_763_709_300, "auto", "UTC", utc_ms(2025, 11, 21, 7, 15)),
        (1_763_709_300_000, "auto", "UTC", utc_ms(2025, 11, 21, 7, 15)),
        (1_763_709_300.25, "auto", "UTC", utc_ms(2025, 11, 21, 7, 15, 0, 250)),
        ("1763709300", "auto", "UTC", utc_ms(2025, 11, 21, 7, 15)),
        (" 1763709300123 ", "auto", "UTC", utc_ms(2025, 11, 21, 7, 15, 0, 123)),
        ("1763709300.5", "auto", "UTC", utc_ms(2025, 11, 21, 7, 15, 0, 500)),
        (1_763_709_300, "epoch_s", "UTC", utc_ms(2025, 11, 21, 7, 15)),
        ("1763709300", "epoch_s", "UTC", utc_ms(2025, 11, 21, 7, 15)),
        (1_763_709_300_000, "epoch_ms", "UTC", utc_ms(2025, 11, 21, 7, 15)),
        # under "epoch_ms" a small number is milliseconds, not seconds
        (1_763_709_300, "epoch_ms", "UTC", 1_763_709_300),
        ("1763709300000", "epoch_ms", "UTC", utc_ms(2025, 11, 21, 7, 15)),
        (0, "auto", "UTC", 0),
        # ISO-8601: Z, explicit offsets, fractions
        ("2026-11-21T07:12:33Z", "auto", "UTC", utc_ms(2026, 11, 21, 7, 12, 33)),
        ("2026-11-21T07:12:33Z", "iso8601", "UTC", utc_ms(2026, 11, 21, 7, 12, 33)),
        ("2026-11-21T03:59:59.500Z", "auto", "UTC", utc_ms(2026, 11, 21, 3, 59, 59, 500)),
        ("2026-11-21T08:00:00+00:00", "auto", "UTC", utc_ms(2026, 11, 21, 8)),
        ("2026-11-21T12:42:33+05:30", "iso8601", "UTC", utc_ms(2026, 11, 21, 7, 12, 33)),
        ("2026-11-21T02:12:33-05:00", "auto", "America/New_York", utc_ms(2026, 11, 21, 7, 12, 33)),
        # an explicit offset wins over the configured zone
        ("2026-11-21T07:12:33Z", "auto", "Asia/Kolkata", utc_ms(2026, 11, 21, 7, 12, 33)),
        # naive times are read in the configured zone
        ("2026-11-21T07:12:33", "auto", "UTC", utc_ms(2026, 11, 21, 7, 12, 33)),
        ("2026-11-21T02:12:33", "auto", "America/New_York", utc_ms(2026, 11, 21, 7, 12, 33)),  # EST, -05:00
        ("2026-07-21T03:12:33", "iso8601", "America/New_York", utc_ms(2026, 7, 21, 7, 12, 33)),  # EDT, -04:00
        ("2026-11-21T12:42:33", "auto", "Asia/Kolkata", utc_ms(2026, 11, 21, 7, 12, 33)),  # +05:30
        ("2026-11-21 12:42:33.250", "iso8601", "Asia/Kolkata", utc_ms(2026, 11, 21, 7, 12, 33, 250)),
        # far-future ISO times with milliseconds stay exact to the millisecond
        ("2039-07-06T01:24:33.693Z", "iso8601", "UTC", utc_ms(2039, 7, 6, 1, 24, 33, 693)),
        ("9999-12-30T23:59:59.999Z", "iso8601", "UTC", 253_402_214_399_999),
    ],
)
def test_json_field_values(value: Any, fmt: str, timezone: str, expected: int) -> None:
    assert extract(field_config(fmt=fmt, timezone=timezone), {"created_at": value}) == expected


def test_json_field_dotted_path() -> None:
    config = field_config("meta.times.created")
    parsed = {"meta": {"times": {"created": "2026-11-21T07:00:00Z"}}, "created": 1}
    assert extract(config, parsed) == utc_ms(2026, 11, 21, 7)


@pytest.mark.parametrize(
    "parsed",
    [
        {},
        {"other": 1},
        {"meta": {}},
        {"meta": "2026-11-21T07:00:00Z"},  # an intermediate that is not an object
        {"meta": ["ts"]},
        {"meta": {"ts2": 1}},
        None,  # the value parsed to JSON null
        [1, 2],  # the value is an array
        "2026-11-21T07:00:00Z",  # the value is a bare string
    ],
)
def test_missing_field_is_missing_event_time(parsed: Any) -> None:
    with pytest.raises(EventTimeError) as caught:
        extract(field_config("meta.ts"), parsed)
    assert caught.value.reason == MISSING_EVENT_TIME
    assert caught.value.detail == "field 'meta.ts' is absent"
    assert str(caught.value) == "missing_event_time: field 'meta.ts' is absent"


@pytest.mark.parametrize(
    ("value", "fmt"),
    [
        (None, "auto"),
        (True, "auto"),
        (False, "epoch_s"),
        ("", "auto"),
        ("yesterday", "auto"),
        ("2026-13-45T00:00:00Z", "auto"),
        ("2026-11-21T07:12:33Z", "epoch_s"),  # ISO text where an epoch number is configured
        ("2026-11-21T07:12:33Z", "epoch_ms"),
        (1_763_709_300, "iso8601"),  # a number where ISO-8601 is configured
        ("1763709300", "iso8601"),
        (float("nan"), "auto"),
        (float("inf"), "auto"),
        (float("-inf"), "epoch_ms"),
        (-1, "auto"),  # before 1970
        (-1, "epoch_ms"),
        ("1969-12-31T23:59:59Z", "auto"),
        (253_402_300_800_000, "epoch_ms"),  # after 9999
        (10**20, "auto"),
        ("1.5e400", "auto"),  # a string that parses to infinity
        ("1e400", "epoch_ms"),
        ("-1e400", "epoch_s"),
        (1.8e306, "epoch_s"),  # finite, but its milliseconds are not
        ("9999-12-31T23:30:00+00:00", "iso8601"),  # past the last labelable hour
        ([1_763_709_300], "auto"),
        ({"seconds": 1}, "auto"),
    ],
)
def test_garbage_values_are_invalid_event_time(value: Any, fmt: str) -> None:
    with pytest.raises(EventTimeError) as caught:
        extract(field_config(fmt=fmt), {"created_at": value})
    assert caught.value.reason == INVALID_EVENT_TIME


def test_event_time_error_is_a_value_error_with_reason_and_detail() -> None:
    with pytest.raises(ValueError, match=r"^invalid_event_time: 'yesterday' is not ISO-8601$"):
        parse_time_value("yesterday", "auto", ZoneInfo("UTC"))


# -- header ---------------------------------------------------------------------------------------


def header_config(fmt: str = "auto", timezone: str = "UTC") -> EventTimeConfig:
    return EventTimeConfig(source="header", header="event-time", format=fmt, timezone=timezone)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "fmt", "timezone", "expected"),
    [
        (b"1763709300", "auto", "UTC", utc_ms(2025, 11, 21, 7, 15)),
        (b"1763709300000", "epoch_ms", "UTC", utc_ms(2025, 11, 21, 7, 15)),
        (b"2026-11-21T07:12:33Z", "iso8601", "UTC", utc_ms(2026, 11, 21, 7, 12, 33)),
        (b"2026-11-21T12:42:33", "auto", "Asia/Kolkata", utc_ms(2026, 11, 21, 7, 12, 33)),
    ],
)
def test_header_source(data: bytes, fmt: str, timezone: str, expected: int) -> None:
    rec = record(headers=(("source", b"web"), ("event-time", data)))
    assert extract(header_config(fmt, timezone), rec=rec) == expected


def test_header_source_uses_the_first_header_of_that_name() -> None:
    rec = record(headers=(("event-time", b"1763709300"), ("event-time", b"1000")))
    assert extract(header_config(), rec=rec) == utc_ms(2025, 11, 21, 7, 15)


def test_header_name_match_is_exact() -> None:
    rec = record(headers=(("Event-Time", b"1763709300"),))
    with pytest.raises(EventTimeError) as caught:
        extract(header_config(), rec=rec)
    assert caught.value.reason == MISSING_EVENT_TIME


def test_absent_header_is_missing_event_time() -> None:
    with pytest.raises(EventTimeError) as caught:
        extract(header_config(), rec=record(headers=(("source", b"web"),)))
    assert (caught.value.reason, caught.value.detail) == (MISSING_EVENT_TIME, "header 'event-time' is absent")


@pytest.mark.parametrize("data", [b"\xff\xfe", b"soon", b""])
def test_bad_header_value_is_invalid_event_time(data: bytes) -> None:
    with pytest.raises(EventTimeError) as caught:
        extract(header_config(), rec=record(headers=(("event-time", data),)))
    assert caught.value.reason == INVALID_EVENT_TIME


# -- HourBucketer ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timezone", "ms", "label"),
    [
        ("UTC", 0, "1970-01-01T00"),
        ("UTC", utc_ms(2026, 11, 21, 7, 0, 0, 0), "2026-11-21T07"),
        ("UTC", utc_ms(2026, 11, 21, 7, 59, 59, 999), "2026-11-21T07"),
        ("UTC", utc_ms(2026, 11, 21, 8), "2026-11-21T08"),
        ("Etc/UTC", utc_ms(2026, 12, 31, 23, 59, 59, 999), "2026-12-31T23"),
        # Asia/Kolkata is +05:30: local hours start at UTC half-hours
        ("Asia/Kolkata", utc_ms(2026, 11, 21, 1, 29, 59, 999), "2026-11-21T06"),
        ("Asia/Kolkata", utc_ms(2026, 11, 21, 1, 30), "2026-11-21T07"),
        ("Asia/Kolkata", utc_ms(2026, 11, 21, 1, 44, 59, 999), "2026-11-21T07"),
        ("Asia/Kolkata", utc_ms(2026, 11, 21, 2, 29, 59, 999), "2026-11-21T07"),
        ("Asia/Kolkata", utc_ms(2026, 11, 20, 18, 30), "2026-11-21T00"),
        # Asia/Kathmandu is +05:45
        ("Asia/Kathmandu", utc_ms(2026, 11, 21, 1, 14, 59, 999), "2026-11-21T06"),
        ("Asia/Kathmandu", utc_ms(2026, 11, 21, 1, 15), "2026-11-21T07"),
        # America/New_York, spring forward 2026-03-08: 01:59:59 EST -> 03:00 EDT (no 02 hour)
        ("America/New_York", utc_ms(2026, 3, 8, 6, 59, 59, 999), "2026-03-08T01"),
        ("America/New_York", utc_ms(2026, 3, 8, 7), "2026-03-08T03"),
        # fall back 2026-11-01: 01:xx EDT then 01:xx EST again, then 02:00 EST
        ("America/New_York", utc_ms(2026, 11, 1, 5, 30), "2026-11-01T01"),
        ("America/New_York", utc_ms(2026, 11, 1, 6, 30), "2026-11-01T01"),
        ("America/New_York", utc_ms(2026, 11, 1, 7), "2026-11-01T02"),
        ("America/New_York", utc_ms(2026, 11, 21, 7, 12, 33), "2026-11-21T02"),
        ("America/New_York", utc_ms(2026, 7, 21, 7, 12, 33), "2026-07-21T03"),
    ],
)
def test_hour_labels(timezone: str, ms: int, label: str) -> None:
    assert HourBucketer(timezone).label(ms) == label


def test_default_bucketer_is_utc() -> None:
    assert HourBucketer().label(utc_ms(2026, 11, 21, 7, 30)) == "2026-11-21T07"


def test_bucketer_cache_never_leaks_between_neighbouring_instants() -> None:
    # Walk one minute at a time across a half-hour zone and a DST transition in both
    # directions with ONE bucketer each (so its cache is exercised) and compare with zoneinfo.
    for timezone, start in [
        ("Asia/Kolkata", utc_ms(2026, 11, 20, 22)),
        ("America/New_York", utc_ms(2026, 3, 8, 4)),
        ("America/New_York", utc_ms(2026, 11, 1, 3)),
    ]:
        bucketer = HourBucketer(timezone)
        zone = ZoneInfo(timezone)
        for step in (*range(0, 6 * 60 * 60_000, 60_000), *range(6 * 60 * 60_000, 0, -60_000)):
            for ms in (start + step, start + step - 1):
                expected = (EPOCH + timedelta(milliseconds=ms)).astimezone(zone).strftime("%Y-%m-%dT%H")
                assert bucketer.label(ms) == expected, (timezone, ms)


def test_bucketer_is_exact_for_a_zone_with_a_non_quarter_hour_offset() -> None:
    # Africa/Monrovia was UTC-00:44:30 until 1972: local midnight of 1971-06-01 is 00:44:30 UTC.
    bucketer = HourBucketer("Africa/Monrovia")
    before = utc_ms(1971, 6, 1, 0, 44, 29, 999)
    after = utc_ms(1971, 6, 1, 0, 44, 30)
    assert bucketer.label(before) == "1971-05-31T23"
    assert bucketer.label(after) == "1971-06-01T00"


# -- hour_path / iso_utc --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "path"),
    [("2026-11-21T07", "2026/11/21/07"), ("1970-01-01T00", "1970/01/01/00"), ("9999-12-31T23", "9999/12/31/23")],
)
def test_hour_path(label: str, path: str) -> None:
    assert hour_path(label) == path


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1, "1970-01-01T00:00:00.001Z"),
        (utc_ms(2026, 11, 21, 7, 12, 33, 123), "2026-11-21T07:12:33.123Z"),
        (utc_ms(2026, 11, 21, 7, 12, 33, 0), "2026-11-21T07:12:33.000Z"),
        (utc_ms(2039, 7, 6, 1, 24, 33, 693), "2039-07-06T01:24:33.693Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
    ],
)
def test_iso_utc(ms: int, text: str) -> None:
    assert iso_utc(ms) == text


@pytest.mark.parametrize(
    ("label", "zone", "end_utc"),
    [
        ("2026-11-21T07", "UTC", "2026-11-21T08:00:00+00:00"),
        ("2026-11-21T15", "Asia/Kolkata", "2026-11-21T10:30:00+00:00"),  # +05:30
        ("2026-11-01T01", "America/New_York", "2026-11-01T07:00:00+00:00"),  # the repeated hour: the later one
    ],
)
def test_hour_end_ms(label: str, zone: str, end_utc: str) -> None:
    from datetime import datetime

    from tidemark.eventtime import hour_end_ms

    assert hour_end_ms(label, zone) == int(datetime.fromisoformat(end_utc).timestamp() * 1000)


# -- fractional epoch times floor, exactly, like ISO fractions -----------------------------------
# An instant's millisecond is the one it falls in: 22:59:59.9996 is still hour 22 however it is
# written. Rounding (or inexact float arithmetic) would move it to the next millisecond -- and at
# the end of an hour, into the next hour's folder.

LAST_MS_OF_HOUR_22 = utc_ms(2023, 11, 14, 22, 59, 59, 999)


@pytest.mark.parametrize(
    ("value", "fmt"),
    [
        (1_700_002_799.9996, "auto"),  # a JSON float
        (1_700_002_799.9996, "epoch_s"),
        ("1700002799.9996", "auto"),  # a numeric string
        ("1700002799.9996", "epoch_s"),
        (1_700_002_799_999.6, "auto"),  # a JSON float of milliseconds
        (1_700_002_799_999.6, "epoch_ms"),
        ("1700002799999.6", "epoch_ms"),
        ("1700002799.99999999999999999999999999999", "auto"),  # more digits than a float (or decimal context) keeps
        ("2023-11-14T22:59:59.9996Z", "auto"),  # the ISO counterpart
        ("2023-11-14T22:59:59.9996Z", "iso8601"),
    ],
)
def test_fractional_times_floor_to_the_millisecond(value: Any, fmt: str) -> None:
    assert extract(field_config(fmt=fmt), {"created_at": value}) == LAST_MS_OF_HOUR_22


def test_fractional_seconds_and_the_iso_counterpart_share_the_hour() -> None:
    bucketer = HourBucketer()
    labels = {
        bucketer.label(extract(field_config(fmt=fmt), {"created_at": value}))
        for value, fmt in [
            (1_700_002_799.9996, "auto"),
            ("1700002799.9996", "auto"),
            (1_700_002_799_999.6, "epoch_ms"),
            ("2023-11-14T22:59:59.9996Z", "auto"),
        ]
    }
    assert labels == {"2023-11-14T22"}


@pytest.mark.parametrize(
    ("value", "fmt", "expected"),
    [
        # 1.001 * 1000 is 1000.9999999999999 in binary floating point: the decimal value is meant
        (1.001, "epoch_s", 1001),
        (1.001, "auto", 1001),
        ("1.001", "auto", 1001),
        (0.0005, "auto", 0),
        (1.9, "epoch_ms", 1),
        ("1.9", "epoch_ms", 1),
        (1_763_709_300.0, "auto", utc_ms(2025, 11, 21, 7, 15)),
        (1_763_709_300_000.0, "auto", utc_ms(2025, 11, 21, 7, 15)),
        ("1763709300.000", "epoch_s", utc_ms(2025, 11, 21, 7, 15)),
        ("1763709300.1239", "auto", utc_ms(2025, 11, 21, 7, 15, 0, 123)),
        ("1.5e-999999999999", "auto", 0),  # a huge negative exponent is not expanded
        (253_402_214_399.9999, "epoch_s", 253_402_214_399_999),  # the last accepted millisecond
    ],
)
def test_fractional_epoch_values_are_exact(value: Any, fmt: str, expected: int) -> None:
    assert parse_time_value(value, fmt, ZoneInfo("UTC")) == expected


@pytest.mark.parametrize(
    ("value", "fmt"),
    [
        (-0.0001, "auto"),  # floors to -1 ms: before 1970
        ("-0.5", "epoch_ms"),
        (253_402_214_400.0, "epoch_s"),  # the first millisecond past the last labelable hour
        ("1.5e999999999999", "auto"),  # finite for Decimal, far past 9999
        ("1.5e99999999999999999999", "epoch_s"),  # past Decimal's exponent limit
        ("9" * 4299, "epoch_ms"),  # an integer too long to print in an error message
        ("9" * 4299, "auto"),
        ("9" * 5000 + ".5", "auto"),
        ("1.2.3", "epoch_s"),
        ("Infinity.", "auto"),
    ],
)
def test_unusable_fractional_values_are_invalid_event_time(value: Any, fmt: str) -> None:
    with pytest.raises(EventTimeError) as caught:
        parse_time_value(value, fmt, ZoneInfo("UTC"))
    assert caught.value.reason == INVALID_EVENT_TIME


def test_numeric_seconds_and_the_equivalent_iso_string_always_agree() -> None:
    # A seeded sweep (this module does not use hypothesis): random instants, 1-6 fraction digits,
    # with extra weight on the last microseconds of a second where rounding would carry over.
    rng = random.Random(20240101)
    zone = ZoneInfo("UTC")
    for _ in range(5_000):
        seconds = rng.choice([rng.randrange(0, 253_402_214_400), rng.randrange(0, 100_000_000_000)])
        digits = rng.randint(1, 6)
        fraction = rng.choice([rng.randrange(10**digits), 10**digits - 1, max(0, 10**digits - rng.randint(1, 9))])
        text = f"{seconds}.{fraction:0{digits}d}"
        iso = (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction:0{digits}d}Z"
        expected = parse_time_value(iso, "iso8601", zone)
        assert parse_time_value(text, "epoch_s", zone) == expected, (text, iso)
        number = float(text)
        exact_float = Decimal(repr(number)) == Decimal(text)  # the JSON float reads back as the same decimal
        if exact_float:
            assert parse_time_value(number, "epoch_s", zone) == expected, (number, iso)
        if seconds < 100_000_000_000:  # what auto reads as seconds
            assert parse_time_value(text, "auto", zone) == expected, (text, iso)
            if exact_float:
                assert parse_time_value(number, "auto", zone) == expected, (number, iso)


# -- 8-digit strings under auto are basic ISO dates (YYYYMMDD) ------------------------------------


@pytest.mark.parametrize(
    ("value", "fmt", "timezone", "expected"),
    [
        # under auto a string of exactly 8 digits is a calendar date: midnight in the stream's zone
        ("20240101", "auto", "UTC", utc_ms(2024, 1, 1)),
        (" 20240101 ", "auto", "UTC", utc_ms(2024, 1, 1)),
        ("20240101", "auto", "America/New_York", utc_ms(2024, 1, 1, 5)),
        ("20240229", "auto", "Asia/Kolkata", utc_ms(2024, 2, 28, 18, 30)),
        ("19700101", "auto", "UTC", 0),
        # the other basic forms Python 3.11's fromisoformat reads were never numbers
        ("20240101T120000", "auto", "UTC", utc_ms(2024, 1, 1, 12)),
        ("20240101T120000Z", "auto", "UTC", utc_ms(2024, 1, 1, 12)),
        ("20240101T120000.25Z", "auto", "UTC", utc_ms(2024, 1, 1, 12, 0, 0, 250)),
        ("20240101T120000+0100", "auto", "UTC", utc_ms(2024, 1, 1, 11)),
        ("20240101T1200", "auto", "America/New_York", utc_ms(2024, 1, 1, 17)),
        # iso8601 reads the basic date too
        ("20240101", "iso8601", "UTC", utc_ms(2024, 1, 1)),
        ("20240101T120000Z", "iso8601", "UTC", utc_ms(2024, 1, 1, 12)),
        # other digit counts stay epoch numbers under auto: seconds below 1e11, else milliseconds
        ("2024011", "auto", "UTC", 2_024_011_000),
        ("202401011", "auto", "UTC", 202_401_011_000),
        ("1763709300", "auto", "UTC", utc_ms(2025, 11, 21, 7, 15)),
        ("+20240101", "auto", "UTC", 20_240_101_000),  # signed: a number, not a date
        ("20240101.0", "auto", "UTC", 20_240_101_000),  # a fraction: a number, not a date
        # JSON numbers are always epoch numbers
        (20_240_101, "auto", "UTC", 20_240_101_000),
        (20_240_101.0, "auto", "UTC", 20_240_101_000),
        # an explicit epoch format reads digit strings as numbers
        ("20240101", "epoch_s", "UTC", 20_240_101_000),
        ("20240101", "epoch_ms", "UTC", 20_240_101),
    ],
)
def test_eight_digit_strings(value: Any, fmt: str, timezone: str, expected: int) -> None:
    assert extract(field_config(fmt=fmt, timezone=timezone), {"created_at": value}) == expected


def test_eight_digit_header_under_auto_is_a_date() -> None:
    rec = record(headers=(("event-time", b"20240101"),))
    assert extract(header_config(), rec=rec) == utc_ms(2024, 1, 1)


@pytest.mark.parametrize(
    ("value", "fmt"),
    [
        ("20241340", "auto"),  # month 13: an invalid date, not 1970-08-23 as epoch seconds
        ("20240230", "auto"),
        ("20230229", "auto"),
        ("00000101", "auto"),  # year 0
        ("12345678", "auto"),
        ("99991231", "auto"),  # a valid date, past the last labelable hour
        ("20241340", "iso8601"),
    ],
)
def test_invalid_eight_digit_dates_are_invalid_event_time(value: str, fmt: str) -> None:
    with pytest.raises(EventTimeError) as caught:
        extract(field_config(fmt=fmt), {"created_at": value})
    assert caught.value.reason == INVALID_EVENT_TIME
