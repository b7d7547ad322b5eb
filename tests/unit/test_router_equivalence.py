"""``Router.route_batch`` gives every record the verdict of the plain reference router
(``tests.support.reference_router``): the same buffer (kind, hour, folders), the same dead-letter
reason and, for archived records, the same event time, on generated batches of awkward records,
in UTC and three zones with offsets that make hour labels interesting."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.reference_router import LAST_MS, ReferenceRouter, Verdict, parse_json
from tidemark.clock import ManualClock
from tidemark.config import StreamConfig, load_config
from tidemark.config.model import (
    DeadLetterConfig,
    EncodingConfig,
    EventTimeConfig,
    FormatConfig,
    PartitionByConfig,
    PartitionField,
)
from tidemark.records.model import Headers, Record
from tidemark.routing import Router

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "tidemark.yaml"
BASE = load_config(EXAMPLE).streams[0]
# UTC; a zone with DST (1-hour gaps and folds); a half-hour offset; a 30-minute DST shift.
ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
LAST_S = LAST_MS // 1000
SMALL = 300  # dead_letter.max_record_bytes of the configs that make some records oversized
# 16 tests of 40 batches of up to 60 records: about 20 s in all.
EQUIVALENCE = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


# -- configs -------------------------------------------------------------------------------------


@cache
def stream_config(
    zone: str,
    source: str = "json_field",
    fmt: str = "auto",
    *,
    field: str = "created_at",
    value: str = "json",
    key: str = "text",
    headers: str = "text",
    max_bytes: int | None = None,
    format_type: str = "jsonl",
    partition_by: tuple[str, str, int] | None = None,  # style, missing, max_value_length
) -> StreamConfig:
    event_time = EventTimeConfig(
        source=source,  # type: ignore[arg-type]
        field=field if source == "json_field" else None,
        header="ts" if source == "header" else None,
        format=fmt,  # type: ignore[arg-type]
        timezone=zone,
    )
    update: dict[str, Any] = {
        "event_time": event_time,
        "encoding": EncodingConfig(value=value, key=key, headers=headers),  # type: ignore[arg-type]
        "format": FormatConfig(type=format_type),  # type: ignore[arg-type]
    }
    if max_bytes is not None:
        update["dead_letter"] = DeadLetterConfig(max_record_bytes=max_bytes)  # type: ignore[arg-type]
    if partition_by is not None:
        style, missing, max_value_length = partition_by
        update["partition_by"] = PartitionByConfig(
            fields=[PartitionField(field=field) for field in ("_value.country", "_header.tenant", "_key")],
            style=style,  # type: ignore[arg-type]
            missing=missing,  # type: ignore[arg-type]
            max_value_length=max_value_length,
        )
    return BASE.model_copy(update=update)


def verdict_of(routed: Any) -> Verdict:
    """The router's verdict, from ``buffer``, ``reason`` and (archived records) ``event_ms`` only."""
    kind = routed.buffer.kind
    return Verdict(
        kind, routed.buffer.hour, routed.buffer.folders, routed.reason, routed.event_ms if kind == "raw" else -1
    )


def assert_equivalent(stream: StreamConfig, records: list[Record], clock: ManualClock | None = None) -> None:
    clock = clock or ManualClock()
    routed = Router(stream, clock).route_batch(records)
    expected = ReferenceRouter(stream, clock).verdicts(records)
    assert len(routed) == len(records)
    differences = [
        (index, record, verdict_of(got), want)
        for index, (record, got, want) in enumerate(zip(records, routed, expected, strict=True))
        if verdict_of(got) != want
    ]
    assert differences == [], "\n".join(
        f"#{index} {record!r}\n    router:    {got}\n    reference: {want}" for index, record, got, want in differences
    )


# -- awkward times -------------------------------------------------------------------------------


def _transitions() -> list[tuple[datetime, timedelta]]:
    """(UTC instant, UTC offset before it) of every offset change of the zones, 1970..2040."""
    found = []
    for name in ZONES:
        zone = ZoneInfo(name)
        day = datetime(1970, 1, 1, tzinfo=UTC)
        before = day.astimezone(zone).utcoffset()
        while day < datetime(2040, 1, 1, tzinfo=UTC):
            after = (day + timedelta(days=1)).astimezone(zone).utcoffset()
            if after != before:
                low, high = day, day + timedelta(days=1)
                while high - low > timedelta(minutes=1):
                    middle = low + (high - low) / 2
                    low, high = (middle, high) if middle.astimezone(zone).utcoffset() == before else (low, middle)
                assert before is not None
                found.append((high, before))
                before = after
            day += timedelta(days=1)
    return found


TRANSITIONS = _transitions()
DIGITS = "0123456789"

# Instants on the zones' hour boundaries (every zone here has hours starting at :00 or :30 UTC).
boundary_seconds = st.builds(
    lambda half_hours, shift: half_hours * 1800 + shift, st.integers(1, LAST_S // 1800), st.integers(-2, 1)
)
fraction_digits = st.one_of(
    st.sampled_from(["9996", "9995", "999", "9999999999999999999", "0001", "5", "000"]),
    st.text(DIGITS, min_size=1, max_size=22),
)
whole_seconds = st.one_of(boundary_seconds, st.integers(0, LAST_S + 2), st.integers(0, 99_999_999_999 + 2))
decimal_seconds = st.builds(lambda whole, fraction: f"{whole}.{fraction}", whole_seconds, fraction_digits)
decimal_ms = st.builds(
    lambda whole, fraction: f"{whole}.{fraction}",
    st.one_of(st.integers(99_999_999_990, 100_000_000_010), st.integers(0, LAST_MS + 2)),
    fraction_digits,
)
INTERESTING_INTS = [
    0, -1, 1, 99_999_999_999, 100_000_000_000, 100_000_000_001, LAST_S, LAST_S + 1, LAST_MS, LAST_MS + 1,
    2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, -(10**30), 1_700_000_000,
    1_700_000_000_000, 20_240_101, 10**98, 10**99, 10**307, 10**308, 10**309, 10**399, -(10**399),
]  # fmt: skip
integers = st.one_of(
    st.sampled_from(INTERESTING_INTS),
    st.integers(-1000, LAST_S + 10),
    st.integers(99_999_999_990, LAST_MS + 10),
    boundary_seconds,
    boundary_seconds.map(lambda seconds: seconds * 1000 - 1),
    st.integers(-(2**70), 2**70),
)
FLOAT_TEXTS = [
    "1700002799.9996", "1700002799.99960000000000001", "1700002799.9999999999", "1e16", "1.5e-7", "-1.5e-7",
    "1.0e+2", "1E11", "99999999999.9999", "1e400", "-1e400", "1e-400", "-0.0", "0.0", "253402214399.999",
    "253402214400.0", "253402214399999.9", "1.7e9", "17e8", "1700000000e0", "1.7976931348623157e308",
    "1E+400", "-1E+400", "1e0400", "1.7976931348623159e308", "1e308", "1e99", "1e100", "17e-400",
    "1700000000.5", "1" * 400 + ".5", "0." + "1" * 400, "1e+0000000000000000000000000000000000000000000000000000300",
]  # fmt: skip
float_texts = st.one_of(
    st.sampled_from(FLOAT_TEXTS),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(min_value=-1.0, max_value=LAST_MS + 10.0).map(repr),
    decimal_seconds,
    decimal_ms,
)
NUMERIC_LOOKALIKES = [
    "", " ", "17e8", "1.7e9", "1700000000e0", "1700000000E-0", "+1700000000", "-0", "-0.0", "5.", ".5", "0x10",
    "1_700_000_000", "\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660", "\uff11\uff17\uff10\uff10",
    "nan", "NaN", "inf", "Infinity", "-Infinity", "1e", "1e+", "--1", "1.2.3", "1,5", "00001700000000",
    "1700000000\x00", "yesterday", "20240101T120000Z", "2024-01-01", "2024-01-01T12", "2024-13-01T00:00:00",
    "1969-12-31T23:59:59.999Z", "1970-01-01T00:00:00Z", "9999-12-30T23:59:59.999Z", "9999-12-31T00:00:00Z",
    "9999-12-31T23:59:59.999999", "0001-01-01T00:00:00+05:00", "2023-11-14T22:59:59.9996Z",
    "2023-11-14T22:59:59.999999999Z", "2024-03-10T02:30:00", "2024-11-03T01:30:00", "2024-10-06T02:15:00",
    "2024-04-07T01:45:00", "\u00a01700000000\u2003", "1700000000\n",
]  # fmt: skip
BASIC_DATES = ["20240101", "20241340", "19691231", "19700101", "99991230", "99991231", "00000000", "20240230"]
basic_dates = st.one_of(
    st.sampled_from(BASIC_DATES),
    st.text(DIGITS, min_size=8, max_size=8),
    st.dates().map(lambda day: f"{day.year:04d}{day.month:02d}{day.day:02d}"),
)
SUFFIXES = [
    "",
    "",
    "",
    "Z",
    "z",
    "+00:00",
    "+05:30",
    "-05:00",
    "+10:30",
    "+14:00",
    "-12:00",
    "+0530",
    "+05",
    "-00:44:30",
]


@st.composite
def iso_texts(draw: st.DrawFn) -> str:
    near_a_change = draw(st.booleans())
    if near_a_change and TRANSITIONS:  # a naive wall time around a DST change: gaps and folds
        instant, before = draw(st.sampled_from(TRANSITIONS))
        wall = instant.replace(tzinfo=None) + before + timedelta(seconds=draw(st.integers(-5400, 5400)))
    else:
        wall = draw(st.datetimes(min_value=datetime(1969, 12, 31), max_value=datetime(9999, 12, 31, 23, 59, 59)))
    fraction = draw(st.one_of(st.just(""), fraction_digits.map(lambda digits: "." + digits[:12])))
    suffix = draw(st.sampled_from(SUFFIXES))
    shape = draw(st.sampled_from(["extended", "extended", "space", "basic", "minutes", "date"]))
    if shape == "basic":
        return f"{wall:%Y%m%dT%H%M%S}{fraction}{suffix}"
    if shape == "minutes":
        return f"{wall:%Y-%m-%dT%H:%M}{suffix}"
    if shape == "date":
        return f"{wall:%Y-%m-%d}"
    return f"{wall:%Y-%m-%d}{'T' if shape == 'extended' else ' '}{wall:%H:%M:%S}{fraction}{suffix}"


def _padded(text: str, pad: str) -> str:
    return f"{pad}{text}{pad}"


#: a time as text: what a JSON string field or a header holds
time_strings = st.one_of(
    iso_texts(),
    basic_dates,
    integers.map(str),
    float_texts,
    st.sampled_from(NUMERIC_LOOKALIKES),
).flatmap(lambda text: st.sampled_from([text, text, _padded(text, " "), _padded(text, "\t\n")]))

ODD_TIMES = [
    b"NaN", b"Infinity", b"-Infinity", b"true", b"false", b"null", b'{"s":1}', b"[1700000000]", b"1.0", b"[1e400]",
    b'{"s":1e400}', b'"\\u0031700000000"', b'"17000\xed\xa0\x80"', b'"\xc0\x80"',
]  # fmt: skip

#: a time as JSON text: the event-time field's value
time_fragments = st.one_of(
    integers.map(lambda number: str(number).encode()),
    float_texts.map(str.encode),
    time_strings.map(lambda text: json.dumps(text).encode()),
    time_strings.map(lambda text: json.dumps(text, ensure_ascii=False).encode()),
    st.sampled_from(ODD_TIMES),
)

# -- awkward values ------------------------------------------------------------------------------


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


#: what msgspec's skipping reader is laxer about than orjson, or reads differently, in a field it skips
MSGSPEC_TRAPS = [
    b"1e400", b"-1e400", b"1E+400", b"1e0400", b"1E400", b"1.5e+999", b"0e400", b"1e-400", b"1e308", b"1e99",
    b"1.7976931348623157e308", b"1.7976931348623159e308", b"1" * 400, b"-" + b"9" * 400, b"1" * 400 + b".5",
    b"9" * 308, b"9" * 309, b"1" * 309, b"0." + b"1" * 400, b"1" * 99, b"1" * 100, b"18446744073709551616",
    b"[1e400]", b'{"y":1E+400}', b'[1,2,1e400]', b'"\xff"', b'"\xed\xa0\x80"', b'"\xc0\x80"',
    b'"\xf4\x90\x80\x80"', b'"caf\xc3\xa9"', b'"\xef\xbb\xbf"', b'{"\xff":1}', b'{"\xed\xa0\x80":1}',
    b'"3e400"', b'"1e400,"', b'"6dcca6c2fd52d6cd9a10f4d8cf999b71"', b'"\\ud800"', b'"\\udc00\\ud800"',
    deep(1023), deep(1024), deep(1100), b"[" * 600 + b'{"a":' * 500 + b"1" + b"}" * 500 + b"]" * 600,
]  # fmt: skip
#: the event-time field's name as JSON text, escapes included, and names that are not it
TIME_KEYS = [b'"created_at"', b'"created\\u005fat"', b'"\\u0063reated_at"', b'"created_At"', b'"created_at "']


@st.composite
def json_values(draw: st.DrawFn) -> bytes:
    """A value for a json-encoded stream: mostly a valid object with a time, sometimes anything."""
    time = draw(time_fragments)
    pad = b',"pad":"' + b"x" * draw(st.integers(0, 320)) + b'"' if draw(st.booleans()) else b""
    shape = draw(st.integers(0, 18))
    if shape <= 5:
        value = b'{"order_id":"o-1","created_at":' + time + pad + b"}"
    elif shape <= 7:
        value = b'{"meta":{"ts":' + time + b"}" + pad + b"}"
    elif shape == 8:
        value = (
            b'{"created_at":'
            + draw(time_fragments)
            + b',"created_at":'
            + time
            + b',"meta":{"ts":1},"meta":{"ts":'
            + time
            + b"}}"
        )
    elif shape == 9:
        value = draw(st.sampled_from([b"{}", b'{"other":1}', b'{"meta":null}', b'{"meta":[1]}', b'{"meta":{"t":1}}']))
    elif shape == 10:
        value = draw(st.sampled_from([b"[" + time + b"]", time, b"null", b"true", b'"x"', b"[]"]))
    elif shape == 11:  # nesting around orjson's limit of 1024 levels (the object is one)
        levels = draw(st.sampled_from([254, 255, 1022, 1023, 1024, 1100]))
        value = b'{"created_at":' + time + b',"deep":' + deep(levels) + b"}"
    elif shape == 12:  # bytes and escapes that are not JSON text
        junk = draw(
            st.sampled_from(
                [b"\xff", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\\ud800", b"\\udc00\\ud800",
                 b"\\ud800\\u0041", b"\\ud83d\\ude00", b"\xe2\x82\xac", b"\t", b"\x7f", b"\\u0000"]
            )
        )  # fmt: skip
        value = b'{"created_at":' + time + b',"s":"' + junk + b'"}'
    elif shape == 13:
        value = b'{"created_at":' + time + b',"big":' + str(draw(integers)).encode() + b',"f":1.0e+2}'
    elif shape in (14, 15):  # msgspec's traps next to the time
        trap = draw(st.sampled_from(MSGSPEC_TRAPS))
        value = (
            b'{"x":' + trap + b',"created_at":' + time + b"}"
            if draw(st.booleans())
            else b'{"created_at":' + time + b',"x":' + trap + b"}"
        )
    elif shape == 16:  # the time field spelled with escapes, and duplicated
        names = draw(st.lists(st.sampled_from(TIME_KEYS), min_size=1, max_size=3))
        value = b"{" + b",".join(name + b":" + draw(time_fragments) for name in names) + b"}"
    elif shape == 17:  # not an object at the top
        value = draw(st.sampled_from([b"1e400", b'"\xff"', b"[1e400]", b"1" * 400, b"1700000000", b'"1700000000"']))
    else:
        value = b'{"created_at":' + time + b"}"
    damage = draw(st.integers(0, 12))
    if damage == 0:
        value = value[: draw(st.integers(0, max(0, len(value) - 1)))]  # truncated
    elif damage == 1:
        value += draw(st.sampled_from([b"x", b",", b"}", b"{}", b"\x00", b"]"]))  # trailing garbage
    elif damage == 2:
        value = b"\xef\xbb\xbf" + value  # a UTF-8 byte order mark
    elif damage == 3:
        before, after = draw(st.sampled_from([(b" \t\r\n", b"\n"), (b"\x0c", b""), (b"", b"\x0b"), (b"\xc2\xa0", b"")]))
        value = before + value + after
    return value


text_values = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=40).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.sampled_from(
        [b"one line", b"two\nlines", b"cr\r", b"caf\xe9", b"caf\xc3\xa9", b"", b"\xe2\x80\xa8", b"\x0b\x0c"]
    ),
)

kafka_timestamps = st.one_of(
    st.integers(0, LAST_MS),
    st.sampled_from([-1, -2, 0, LAST_MS, LAST_MS + 1, 1_700_000_000_000_000, 2**63 - 1]),
    st.integers(0, LAST_MS).map(lambda ms: ms * 1000),  # a producer's microseconds
)
keys = st.one_of(
    st.none(),
    st.just(b"o-1"),
    st.sampled_from([b"", b"\xff\xfeo-1", b"caf\xc3\xa9", b"\xed\xa0\x80"]),
    st.binary(max_size=6),
)


@st.composite
def headers(draw: st.DrawFn) -> Headers:
    chosen: list[tuple[str, bytes | None]] = []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(["ts", "ts", "ts", "source", "trace", "tenant", "\u00e9t\u00e9", "\u6642"]))
        data: bytes | None
        if draw(st.integers(0, 9)) == 0:
            data = None  # a null header value
        elif name == "ts":
            data = draw(st.one_of(time_strings.map(str.encode), st.sampled_from([b"\xff17", b"17\xed\xa0\x80", b""])))
        else:
            data = draw(st.one_of(st.sampled_from([b"web", b"acme", b"../x", b""]), st.binary(max_size=4)))
        chosen.append((name, data))
    return tuple(chosen)


@st.composite
def batches(draw: st.DrawFn, values: st.SearchStrategy[bytes]) -> list[Record]:
    """1..60 records; some batches uniform (the same shape, as a column-wise fast path prefers)."""
    size = draw(st.integers(1, 60))
    if draw(st.booleans()):  # uniform: valid second- or millisecond-epoch created_at, one key, no headers
        unit = draw(st.sampled_from([1, 1000]))
        base = draw(st.integers(0, LAST_S - 10**6))
        times = draw(st.lists(st.integers(0, 10**6), min_size=size, max_size=size))
        quoted = draw(st.booleans())
        uniform = [
            Record(
                "orders",
                3,
                offset,
                draw(kafka_timestamps),
                b'{"order_id":"o-1","created_at":%s}' % (b'"%d"' if quoted else b"%d") % ((base + time) * unit),
                b"o-1",
                (),
            )
            for offset, time in enumerate(times)
        ]
        for index in draw(st.lists(st.integers(0, size - 1), max_size=3)):  # tombstones among them
            uniform[index] = uniform[index]._replace(value=None)
        return uniform
    return [
        Record(
            "orders",
            3,
            offset,
            draw(kafka_timestamps),
            None if draw(st.integers(0, 7)) == 0 else draw(values),  # a tombstone now and then
            draw(keys),
            draw(headers()),
        )
        for offset in range(size)
    ]


# -- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("zone", ZONES)
@EQUIVALENCE
@given(
    fmt=st.sampled_from(["auto", "auto", "epoch_s", "epoch_ms", "iso8601"]),
    field=st.sampled_from(["created_at", "created_at", "meta.ts"]),
    key_encoding=st.sampled_from(["text", "bytes"]),
    headers_encoding=st.sampled_from(["text", "bytes"]),
    max_bytes=st.sampled_from([None, None, SMALL]),
    records=batches(json_values()),
)
def test_json_field_event_times(
    zone: str,
    fmt: str,
    field: str,
    key_encoding: str,
    headers_encoding: str,
    max_bytes: int | None,
    records: list[Record],
) -> None:
    stream = stream_config(
        zone, "json_field", fmt, field=field, key=key_encoding, headers=headers_encoding, max_bytes=max_bytes
    )
    assert_equivalent(stream, records)


@pytest.mark.parametrize("zone", ZONES)
@EQUIVALENCE
@given(
    fmt=st.sampled_from(["auto", "auto", "epoch_s", "epoch_ms", "iso8601"]),
    headers_encoding=st.sampled_from(["text", "bytes"]),
    value_encoding=st.sampled_from(["json", "bytes"]),
    records=batches(json_values()),
)
def test_header_event_times(
    zone: str, fmt: str, headers_encoding: str, value_encoding: str, records: list[Record]
) -> None:
    stream = stream_config(zone, "header", fmt, headers=headers_encoding, value=value_encoding)
    assert_equivalent(stream, records)


@pytest.mark.parametrize("zone", ZONES)
@EQUIVALENCE
@given(
    source=st.sampled_from(["record_timestamp", "processing_time"]),
    value_encoding=st.sampled_from(["json", "text", "bytes"]),
    format_type=st.sampled_from(["jsonl", "text"]),
    max_bytes=st.sampled_from([None, SMALL]),
    now_ms=st.one_of(st.just(1_795_248_000_000), st.integers(0, LAST_MS)),
    records=batches(st.one_of(json_values(), text_values)),
)
def test_record_timestamp_and_processing_time(
    zone: str,
    source: str,
    value_encoding: str,
    format_type: str,
    max_bytes: int | None,
    now_ms: int,
    records: list[Record],
) -> None:
    stream = stream_config(zone, source, value=value_encoding, format_type=format_type, max_bytes=max_bytes)
    assert_equivalent(stream, records, ManualClock(start_ms=now_ms))


PARTITION_VALUES = [
    b'"US"', b'"../../x"', b'""', b'"__missing__"', b'"..."', b'"a/b c%"', b'"caf\xc3\xa9"', b"null", b"12",
    b"1.5e-7", b"true", b'{"a":[1,"x"]}', b"[]", b'"' + b"\xe2\x82\xac" * 30 + b'"', b'"' + b"y" * 70 + b'"',
    deep(254), deep(255), deep(600),
]  # fmt: skip


@st.composite
def partitioned_values(draw: st.DrawFn) -> bytes:
    country = draw(
        st.one_of(st.sampled_from(PARTITION_VALUES), st.text(max_size=80).map(lambda text: json.dumps(text).encode()))
    )
    if draw(st.integers(0, 5)) == 0:
        return draw(json_values())
    return b'{"order_id":"o-1","country":' + country + b',"created_at":' + draw(time_fragments) + b"}"


@pytest.mark.parametrize("zone", ZONES)
@EQUIVALENCE
@given(
    style=st.sampled_from(["values", "keys_and_values"]),
    missing=st.sampled_from(["folder", "dead_letter"]),
    max_value_length=st.sampled_from([24, 25, 64]),
    records=batches(partitioned_values()),
)
def test_partitioned_streams(zone: str, style: str, missing: str, max_value_length: int, records: list[Record]) -> None:
    assert_equivalent(stream_config(zone, partition_by=(style, missing, max_value_length)), records)


# -- the nastiest cases, pinned ------------------------------------------------------------------

PLAIN = Record("orders", 3, 1, 1_700_000_000_000, b'{"created_at":1700000000}', b"o-1", ())

NASTY = [
    (b'{"created_at":1,"created_at":1700000000}', "raw", 1_700_000_000_000),  # the last duplicate wins
    (b'\xef\xbb\xbf{"created_at":1700000000}', "invalid_value_encoding", -1),  # a byte order mark
    (b'{"created_at":NaN}', "invalid_value_encoding", -1),
    (b'{"created_at":Infinity}', "invalid_value_encoding", -1),
    (b'{"created_at":18446744073709551616}', "invalid_event_time", -1),  # 2**64: a float to orjson
    (b'{"created_at":18446744073709551615}', "invalid_event_time", -1),  # 2**64-1 ms: past 9999
    (b'{"created_at":1700000000,"s":"\\ud800"}', "invalid_value_encoding", -1),  # a lone surrogate
    (b'{"created_at":1700000000,"s":"\xed\xa0\x80"}', "invalid_value_encoding", -1),  # an encoded one
    (b'{"created_at":1700002799.9996}', "raw", 1_700_002_799_999),  # floored, still 22:59:59.999
    (b'{"created_at":"1700002799.9996"}', "raw", 1_700_002_799_999),
    (b'{"created_at":"2023-11-14T22:59:59.9996Z"}', "raw", 1_700_002_799_999),
    (b'{"created_at":1700002799.99999999999}', "raw", 1_700_002_800_000),  # a double: 1700002800.0
    (b'{"created_at":"20240101"}', "raw", 1_704_067_200_000),  # a basic date, not epoch seconds
    (b'{"created_at":"20241340"}', "invalid_event_time", -1),
    (b'{"created_at":"1.7e9"}', "raw", 1_700_000_000_000),  # a numeric string, read like a JSON number
    (b'{"created_at":"17e8"}', "raw", 1_700_000_000_000),  # ... with or without a decimal point
    (b'{"created_at":1.5e-7}', "raw", 0),
    (b'{"created_at":1e16}', "invalid_event_time", -1),  # milliseconds: the year 318857
    (b'{"created_at":true}', "invalid_event_time", -1),
    (b'{"created_at":99999999999}', "raw", 99_999_999_999_000),  # seconds below 1e11 ...
    (b'{"created_at":100000000000}', "raw", 100_000_000_000),  # ... milliseconds from 1e11
    (b'{"x":' + deep(1023) + b',"created_at":1700000000}', "raw", 1_700_000_000_000),  # 1024 levels
    (b'{"x":' + deep(1024) + b',"created_at":1700000000}', "invalid_value_encoding", -1),  # 1025
    # msgspec (the batch path's reader) skips what orjson refuses: numbers that overflow a double ...
    (b'{"x":1e400,"created_at":1700000000}', "invalid_value_encoding", -1),
    (b'{"x":-1e400,"created_at":1700000000}', "invalid_value_encoding", -1),
    (b'{"created_at":1700000000,"x":1E+400}', "invalid_value_encoding", -1),
    (b'{"x":1e0400,"created_at":1700000000}', "invalid_value_encoding", -1),  # leading zeros in the exponent
    (b'{"x":[1,{"y":1e400}],"created_at":1700000000}', "invalid_value_encoding", -1),
    (b'{"x":' + b"1" * 400 + b',"created_at":1700000000}', "invalid_value_encoding", -1),  # infinite too
    (b'{"x":' + b"1" * 400 + b'.5,"created_at":1700000000}', "invalid_value_encoding", -1),
    (b'{"x":1e308,"created_at":1700000000}', "raw", 1_700_000_000_000),
    (b'{"x":' + b"9" * 308 + b',"created_at":1700000000}', "raw", 1_700_000_000_000),  # 1e308 is finite
    (b'{"x":0.' + b"1" * 400 + b',"created_at":1700000000}', "raw", 1_700_000_000_000),
    (b'{"x":"3e400","created_at":1700000000}', "raw", 1_700_000_000_000),  # only looks like one
    # ... text that is not UTF-8 (keys included) ...
    (b'{"x":"\xc0\x80","created_at":1700000000}', "invalid_value_encoding", -1),  # overlong
    (b'{"x":"\xff","created_at":1700000000}', "invalid_value_encoding", -1),
    (b'{"\xed\xa0\x80":1,"created_at":1700000000}', "invalid_value_encoding", -1),
    (b'{"x":"caf\xc3\xa9","created_at":1700000000}', "raw", 1_700_000_000_000),
    # ... and nesting past 1024 levels, in arrays and objects
    (b'{"x":' + deep(1100) + b',"created_at":1700000000}', "invalid_value_encoding", -1),
    (b'{"x":' + b"[" * 600 + b'{"a":' * 500 + b"1" + b"}" * 500 + b"]" * 600 + b',"created_at":1700000000}',
     "invalid_value_encoding", -1),
    # the time field itself, as msgspec would read it differently or not at all
    (b'{"created_at":1e400}', "invalid_value_encoding", -1),
    (b'{"created_at":-1E+400}', "invalid_value_encoding", -1),
    (b'{"created_at":' + b"1" * 400 + b"}", "invalid_value_encoding", -1),
    (b'{"created_at":1700000000,"created_at":1e400}', "invalid_value_encoding", -1),
    (b'{"created_at":1700000000.5}', "raw", 1_700_000_000_500),
    (b'{"created_at":null}', "invalid_event_time", -1),
    (b'{"created_at":false}', "invalid_event_time", -1),
    (b'{"created_at":"1700000000"}', "raw", 1_700_000_000_000),
    (b'{"created_at":"\\u0031700000000"}', "raw", 1_700_000_000_000),
    (b'{"created\\u005fat":1700000000}', "raw", 1_700_000_000_000),  # the key, written with an escape
    (b'{"created_at":1,"created\\u005fat":1700000000}', "raw", 1_700_000_000_000),  # the same key twice
    (b'{"created\\u005fat":1700000000,"created_at":1}', "raw", 1000),
    (b"1e400", "invalid_value_encoding", -1),
    (b"1700000000", "missing_event_time", -1),
    (b'"1700000000"', "missing_event_time", -1),
    (b"[1700000000]", "missing_event_time", -1),
]  # fmt: skip


@pytest.mark.parametrize(("value", "outcome", "event_ms"), NASTY)
def test_the_nastiest_values(value: bytes, outcome: str, event_ms: int) -> None:
    """Pinned against the reference and the router alike (in UTC, where hours are plain), in a
    batch with a plain record, so the router's batch path runs."""
    stream = stream_config("UTC")
    record = Record("orders", 3, 0, 1_700_000_000_000, value, b"o-1", ())
    verdict = ReferenceRouter(stream, ManualClock()).verdict(record)
    assert (verdict.reason or verdict.kind, verdict.event_ms) == (outcome, event_ms)
    assert_equivalent(stream, [record, PLAIN])
    assert_equivalent(stream, [PLAIN, record, PLAIN])


@pytest.mark.parametrize("value", [b"", b"not json", b'\xef\xbb\xbf{"created_at":1}', b"{}x", b"NaN"])
def test_streams_timed_by_the_record_timestamp_still_refuse_values_that_are_not_json(value: bytes) -> None:
    stream = stream_config("UTC", "record_timestamp")
    record = Record("orders", 3, 0, 1_700_000_000_000, value, b"o-1", ())
    assert ReferenceRouter(stream, ManualClock()).verdict(record).reason == "invalid_value_encoding"
    assert_equivalent(stream, [PLAIN, record])


def test_header_names_count_in_utf8_bytes_towards_the_size_limit() -> None:
    """'\u00e9t\u00e9' is 3 characters but 5 bytes: with it this record is 302 bytes, over a limit of
    300 (counted in characters, it would be exactly 300)."""
    value = b'{"created_at":1700000000,"pad":"' + b"x" * 259 + b'"}'
    record = Record("orders", 3, 0, 1_700_000_000_000, value, b"o-1", (("\u00e9t\u00e9", b"x"),))
    assert len(value) + len(b"o-1") + len("\u00e9t\u00e9".encode()) + len(b"x") == SMALL + 2
    stream = stream_config("UTC", max_bytes=SMALL)
    assert ReferenceRouter(stream, ManualClock()).verdict(record).reason == "oversized"
    assert_equivalent(stream, [PLAIN, record])


def test_json_strictness_is_orjson_s() -> None:
    """The reference's stdlib JSON reading agrees with orjson (the router's reader) on each rule."""
    cases = [b"NaN", b"-Infinity", b"1e400", b"18446744073709551615", b"18446744073709551616", b"-9223372036854775809",
             b"\xef\xbb\xbf{}", b'"\xff"', b'"\xed\xa0\x80"', b'"\\ud800"', b'"\\udc00\\ud800"', b'"\\ud83d\\ude00"',
             b'{"a":1,"a":2}', deep(1024), deep(1025), b" {} \n", b"\x0c{}", b"01", b"-0", b'"\t"', b"[1,]", b"{}x",
             b"", b"1" + b"0" * 5000]  # fmt: skip
    for case in cases:
        try:
            expected = tokens(orjson.loads(case))
        except orjson.JSONDecodeError:
            expected = ["error"]
        try:
            got = tokens(parse_json(case))
        except ValueError:
            got = ["error"]
        assert got == expected, case[:40]


def tokens(value: Any) -> list[Any]:
    """A JSON value as a flat list, types included (1 is not 1.0), without recursion: some are
    nested 1024 levels deep."""
    flat: list[Any] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            flat.append(("object", len(item)))
            for name, member in reversed(item.items()):
                pending.extend([member, name])
        elif isinstance(item, list):
            flat.append(("array", len(item)))
            pending.extend(reversed(item))
        else:
            flat.append((type(item).__name__, item))
    return flat


@pytest.mark.parametrize(
    ("zone", "created_at", "hour", "event_ms"),
    [
        # 01:30 happens twice in New York on 2024-11-03: a naive time is the first (EDT) one.
        ("America/New_York", "2024-11-03T01:30:00", "2024-11-03T01", 1_730_611_800_000),
        # 02:30 never happens there on 2024-03-10: read with the offset before the gap (EST).
        ("America/New_York", "2024-03-10T02:30:00", "2024-03-10T03", 1_710_055_800_000),
        # Lord Howe's clocks go back 30 minutes: 01:45 on 2024-04-07 is first at +11:00.
        ("Australia/Lord_Howe", "2024-04-07T01:45:00", "2024-04-07T01", 1_712_414_700_000),
        ("Asia/Kolkata", "2023-11-15T04:29:59.9996", "2023-11-15T04", 1_700_002_799_999),
    ],
)
def test_naive_times_in_gaps_and_folds(zone: str, created_at: str, hour: str, event_ms: int) -> None:
    stream = stream_config(zone)
    record = Record("orders", 3, 0, -1, b'{"created_at":"%s"}' % created_at.encode(), None, ())
    assert ReferenceRouter(stream, ManualClock()).verdict(record) == Verdict("raw", hour, "", "", event_ms)
    assert_equivalent(stream, [record, record._replace(offset=1)])


# Integers around every bound the column path of integer times decides by: seconds or
# milliseconds ("auto" switches at 1e11), the last representable millisecond, 64 bits.
BOUNDARY_INTS = [0, 1, 10**11 - 1, 10**11, LAST_S, LAST_S + 1, LAST_MS, LAST_MS + 1, 2**63 - 1, 2**63, 2**64 + 5]


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata"])
@EQUIVALENCE
@given(
    fmt=st.sampled_from(["auto", "epoch_s", "epoch_ms"]),
    times=st.lists(
        st.one_of(st.sampled_from(BOUNDARY_INTS), st.integers(0, LAST_S), st.integers(0, LAST_MS)),
        min_size=2,
        max_size=40,
    ),
)
def test_batches_of_integer_times_around_every_bound(zone: str, fmt: str, times: list[int]) -> None:
    """Every value holds the field as a non-negative integer: the batch is decided a column at a
    time (seconds, milliseconds or a mix; in range or not), with the reference's verdicts."""
    records = [
        Record("orders", 3, offset, 1_763_712_000_000, b'{"created_at":%d,"n":1}' % time, b"o-1")
        for offset, time in enumerate(times)
    ]
    assert_equivalent(stream_config(zone, "json_field", fmt), records)
