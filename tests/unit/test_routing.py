"""tidemark.routing: each record goes to its event hour's raw buffer or to a dead-letter buffer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidemark.buffers import BufferKey
from tidemark.clock import ManualClock
from tidemark.config import StreamConfig, load_config
from tidemark.config.model import DeadLetterConfig, EncodingConfig, EventTimeConfig
from tidemark.records.model import Record
from tidemark.routing import INVALID_HEADER, INVALID_KEY, INVALID_VALUE, OVERSIZED, Routed, Router
from tidemark.staging.frames import DEAD_LETTER, NO_EVENT_TIME, RAW, Frame
from tidemark.staging.segment import decode_segment
from tidemark.writer.segments import SegmentEncoder

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "tidemark.yaml"
NOW = 1_763_712_000_000  # 2025-11-21T08:00:00Z, ManualClock's default
KAFKA_TS = 1_763_709_153_000  # 2025-11-21T07:12:33Z
HEADERS = (("source", b"web"), ("trace", b"\x01\x02"))


@pytest.fixture(scope="module")
def stream() -> StreamConfig:
    return load_config(EXAMPLE).streams[0]


def router(stream: StreamConfig, clock: ManualClock | None = None, **update: Any) -> Router:
    return Router(stream.model_copy(update=update) if update else stream, clock or ManualClock())


def order(
    value: bytes, *, key: bytes | None = b"o-1", timestamp: int = KAFKA_TS, headers: tuple[tuple[str, bytes], ...] = ()
) -> Record:
    return Record("orders", 3, 42, timestamp, value, key, headers)


def single_frame(record: Record, routed: Routed) -> Frame:
    """The record as the archiver stages it under this route, read back from its segment."""
    (segment,) = SegmentEncoder().encode([record], [routed])
    assert segment.buffer == routed.buffer
    frames = decode_segment(segment.encoded)
    assert len(frames) == 1
    return frames[0]


def test_valid_order_goes_to_the_raw_buffer_of_its_created_at_hour(stream: StreamConfig) -> None:
    value = b'{"order_id":"o-1001","price":12.5,"created_at":"2026-11-21T07:12:33Z"}'
    record = order(value, headers=HEADERS)
    routed = router(stream).route(record)
    assert (routed.buffer, routed.reason) == (BufferKey("raw", "2026-11-21T07"), "")
    assert [single_frame(record, routed)] == [Frame(RAW, 42, KAFKA_TS, 1_795_245_153_000, b"o-1", value, HEADERS, "")]


@pytest.mark.parametrize(
    ("created_at", "hour", "event_ms"),
    [
        (b"1763709300", "2025-11-21T07", 1_763_709_300_000),
        (b"1763709700000", "2025-11-21T07", 1_763_709_700_000),
        (b'"2026-11-21T03:59:59.500Z"', "2026-11-21T03", 1_795_233_599_500),
        (b'"2026-11-21T08:00:00+00:00"', "2026-11-21T08", 1_795_248_000_000),
        (b'"2020-01-01T00:00:00Z"', "2020-01-01T00", 1_577_836_800_000),  # very late, still its own hour
    ],
)
def test_event_hour_comes_from_created_at(stream: StreamConfig, created_at: bytes, hour: str, event_ms: int) -> None:
    record = order(b'{"created_at":' + created_at + b"}")
    routed = router(stream).route(record)
    assert routed.buffer == BufferKey("raw", hour)
    assert single_frame(record, routed).event_time_ms == event_ms


def test_null_key_is_archived_as_null(stream: StreamConfig) -> None:
    record = order(b'{"created_at":1763709300}', key=None)
    routed = router(stream).route(record)
    assert single_frame(record, routed).key is None
    assert routed.reason == ""


def _assert_dead_letter(routed: Routed, record: Record, reason: str, hour: str) -> Frame:
    assert routed.buffer == BufferKey("errors", hour)
    assert routed.reason == reason
    frame = single_frame(record, routed)
    assert (frame.kind, frame.offset, frame.timestamp_ms, frame.event_time_ms) == (
        DEAD_LETTER,
        record.offset,
        record.timestamp_ms,
        NO_EVENT_TIME,
    )
    assert (frame.key, frame.value, frame.headers) == (record.key, record.value, record.headers)
    assert frame.reason.startswith(f"{reason}: ")
    return frame


def test_not_json_is_dead_lettered(stream: StreamConfig) -> None:
    record = order(b"not json at all", headers=HEADERS)
    frame = _assert_dead_letter(router(stream).route(record), record, INVALID_VALUE, "2025-11-21T07")
    assert frame.reason.startswith("invalid_value_encoding: value is not JSON (")


@pytest.mark.parametrize("value", [b"", b"{", b'{"created_at":1}garbage', b"\xff\xfe{}", b"NaN"])
def test_invalid_json_values_are_dead_lettered(stream: StreamConfig, value: bytes) -> None:
    record = order(value)
    _assert_dead_letter(router(stream).route(record), record, INVALID_VALUE, "2025-11-21T07")


@pytest.mark.parametrize(
    "value", [b'{"order_id":"o-1003","price":5.25}', b'{"created":1}', b"[1,2]", b'"text"', b"null", b"{}"]
)
def test_missing_created_at_is_dead_lettered(stream: StreamConfig, value: bytes) -> None:
    record = order(value)
    frame = _assert_dead_letter(router(stream).route(record), record, "missing_event_time", "2025-11-21T07")
    assert frame.reason == "missing_event_time: field 'created_at' is absent"


@pytest.mark.parametrize("created_at", [b"null", b"true", b'"yesterday"', b"-5", b'{"s":1}', b"1e30"])
def test_unusable_created_at_is_dead_lettered(stream: StreamConfig, created_at: bytes) -> None:
    record = order(b'{"created_at":' + created_at + b"}")
    _assert_dead_letter(router(stream).route(record), record, "invalid_event_time", "2025-11-21T07")


def test_oversized_value_is_dead_lettered(stream: StreamConfig) -> None:
    small = router(stream, dead_letter=DeadLetterConfig(max_record_bytes=32))  # type: ignore[arg-type]
    value = b'{"created_at":1763709300,"p":"' + b"x" * 40 + b'"}'
    record = order(value)
    frame = _assert_dead_letter(small.route(record), record, OVERSIZED, "2025-11-21T07")
    size = len(value) + len(b"o-1")
    assert frame.reason == f"oversized: record is {size} bytes (key, value and headers), limit 32"


def test_record_exactly_at_the_limit_is_archived(stream: StreamConfig) -> None:
    value = b'{"created_at":1763709300}'
    size = len(value) + len(b"o-1") + len("source") + len(b"web")
    record = order(value, headers=(("source", b"web"),))
    exact = router(stream, dead_letter=DeadLetterConfig(max_record_bytes=size))  # type: ignore[arg-type]
    assert exact.route(record).buffer == BufferKey("raw", "2025-11-21T07")
    one_less = router(stream, dead_letter=DeadLetterConfig(max_record_bytes=size - 1))  # type: ignore[arg-type]
    assert one_less.route(record).reason == OVERSIZED


def test_a_huge_key_alone_makes_a_record_oversized(stream: StreamConfig) -> None:
    small = router(stream, dead_letter=DeadLetterConfig(max_record_bytes=1024))  # type: ignore[arg-type]
    record = order(b'{"created_at":1763709300}', key=b"k" * 5000)
    assert small.route(record).reason == OVERSIZED


def test_non_utf8_key_is_dead_lettered(stream: StreamConfig) -> None:
    record = order(b'{"created_at":1763709300}', key=b"\xff\xfeo-1")
    frame = _assert_dead_letter(router(stream).route(record), record, INVALID_KEY, "2025-11-21T07")
    assert frame.reason == "invalid_key_encoding: key is not UTF-8"


def test_non_utf8_key_is_fine_for_a_bytes_key_encoding(stream: StreamConfig) -> None:
    binary_keys = router(stream, encoding=EncodingConfig(key="bytes"))
    record = order(b'{"created_at":1763709300}', key=b"\xff\xfe")
    routed = binary_keys.route(record)
    assert (routed.buffer, routed.reason, single_frame(record, routed).key) == (
        BufferKey("raw", "2025-11-21T07"),
        "",
        b"\xff\xfe",
    )


def test_non_utf8_header_is_dead_lettered(stream: StreamConfig) -> None:
    record = order(b'{"created_at":1763709300}', headers=(("ok", b"web"), ("bin", b"\xff")))
    frame = _assert_dead_letter(router(stream).route(record), record, INVALID_HEADER, "2025-11-21T07")
    assert frame.reason == "invalid_header_encoding: header 'bin' is not UTF-8"


def test_dead_letter_hour_is_the_kafka_timestamp_hour_not_the_clock(stream: StreamConfig) -> None:
    clock = ManualClock(start_ms=NOW + 5 * 3_600_000)
    record = order(b"not json", timestamp=1_700_000_000_000)  # 2023-11-14T22:13:20Z
    assert router(stream, clock).route(record).buffer == BufferKey("errors", "2023-11-14T22")


def test_dead_letter_without_kafka_timestamp_is_filed_under_the_clock_hour(stream: StreamConfig) -> None:
    clock = ManualClock(start_ms=NOW + 90 * 60_000)  # 2025-11-21T09:30Z
    record = order(b"not json", timestamp=-1)
    frame = _assert_dead_letter(router(stream, clock).route(record), record, INVALID_VALUE, "2025-11-21T09")
    assert frame.timestamp_ms == -1


def test_dead_letter_hour_uses_the_stream_time_zone(stream: StreamConfig) -> None:
    kolkata = router(
        stream, event_time=EventTimeConfig(source="json_field", field="created_at", timezone="Asia/Kolkata")
    )
    record = order(b"not json", timestamp=1_763_710_200_000)  # 2025-11-21T07:30Z = 13:00 IST
    assert kolkata.route(record).buffer == BufferKey("errors", "2025-11-21T13")
    record = order(b'{"created_at":"2026-11-21T12:42:33"}')
    routed = kolkata.route(record)  # naive, read as IST
    assert routed.buffer == BufferKey("raw", "2026-11-21T12")
    assert single_frame(record, routed).event_time_ms == 1_795_245_153_000


def test_long_reasons_are_truncated_to_1000_characters(stream: StreamConfig) -> None:
    record = order(b"x")
    routed = router(stream).dead_letter(record, "custom", "d" * 5000)
    frame = single_frame(record, routed)
    assert frame.reason == ("custom: " + "d" * 5000)[:1000]
    assert routed.reason == "custom"


def test_record_timestamp_streams_accept_anything_decodable(stream: StreamConfig) -> None:
    by_timestamp = router(
        stream, event_time=EventTimeConfig(source="record_timestamp"), encoding=EncodingConfig(value="bytes")
    )
    record = order(b"\x00\xffnot json", timestamp=KAFKA_TS)
    routed = by_timestamp.route(record)
    assert routed.buffer == BufferKey("raw", "2025-11-21T07")
    assert single_frame(record, routed) == Frame(RAW, 42, KAFKA_TS, KAFKA_TS, b"o-1", b"\x00\xffnot json")


def test_record_timestamp_minus_one_is_dead_lettered_not_rejected(stream: StreamConfig) -> None:
    by_timestamp = router(stream, event_time=EventTimeConfig(source="record_timestamp"))
    record = order(b"{}", timestamp=-1)
    _assert_dead_letter(by_timestamp.route(record), record, "invalid_event_time", "2026-11-21T08")


def test_text_values_must_be_utf8(stream: StreamConfig) -> None:
    text = router(stream, event_time=EventTimeConfig(), encoding=EncodingConfig(value="text"))
    assert text.route(order("caf\u00e9 not json".encode())).reason == ""
    record = order(b"caf\xe9")
    frame = _assert_dead_letter(text.route(record), record, INVALID_VALUE, "2025-11-21T07")
    assert frame.reason == "invalid_value_encoding: value is not UTF-8"


def test_processing_time_streams_file_by_the_clock(stream: StreamConfig) -> None:
    clock = ManualClock(start_ms=NOW)
    by_clock = router(stream, clock, event_time=EventTimeConfig(source="processing_time"))
    assert by_clock.route(order(b'{"created_at":1}')).buffer == BufferKey("raw", "2025-11-21T08")
    clock.advance(minutes=60)
    record = order(b'{"created_at":1}')
    routed = by_clock.route(record)
    assert (routed.buffer, single_frame(record, routed).event_time_ms) == (
        BufferKey("raw", "2025-11-21T09"),
        NOW + 3_600_000,
    )


def test_json_with_big_integers_is_archived_unchanged(stream: StreamConfig) -> None:
    value = b'{"created_at":1763709300,"big":123456789012345678901234567890,"f":1.0e+2}'
    record = order(value)
    routed = router(stream).route(record)
    assert (routed.buffer, routed.reason) == (BufferKey("raw", "2025-11-21T07"), "")
    assert single_frame(record, routed).value == value


# -- partition_by, value schema, text format ------------------------------------------------------


def configured(stream: StreamConfig, **sections: Any) -> StreamConfig:
    return StreamConfig.model_validate({**stream.model_dump(), **sections})


def test_partition_by_puts_records_under_their_folders(stream: StreamConfig) -> None:
    partitioned = configured(
        stream, partition_by={"fields": ["_value.country", "_header.tenant"], "style": "keys_and_values"}
    )
    value = b'{"order_id":"o-1","country":"../../x","created_at":"2026-11-21T07:12:33Z"}'
    record = order(value, headers=(("tenant", b"acme"),))
    routed = router(partitioned).route(record)
    assert routed.buffer == BufferKey("raw", "2026-11-21T07", "country=..%2F..%2Fx/tenant=acme")
    assert str(routed.buffer) == "raw/2026-11-21T07/country=..%2F..%2Fx/tenant=acme"
    assert BufferKey.parse(str(routed.buffer)) == routed.buffer


def test_a_missing_partition_field_is_a_folder_or_a_dead_letter(stream: StreamConfig) -> None:
    value = b'{"order_id":"o-1","created_at":"2026-11-21T07:12:33Z"}'
    folder = router(configured(stream, partition_by={"fields": ["_value.country"]})).route(order(value))
    assert folder.buffer == BufferKey("raw", "2026-11-21T07", "__missing__")
    strict = configured(stream, partition_by={"fields": ["_value.country"], "missing": "dead_letter"})
    record = order(value)
    dead = router(strict).route(record)
    assert (dead.buffer.kind, dead.reason) == ("errors", "missing_partition_value")
    assert single_frame(record, dead).reason == "missing_partition_value: partition_by field _value.country is missing"
    assert single_frame(record, dead).value == value  # every original byte kept


def test_a_value_breaking_the_declared_schema_is_dead_lettered(stream: StreamConfig) -> None:
    typed = configured(
        stream,
        format={
            "type": "parquet",
            "value_schema": {
                "fields": [
                    {"name": "order_id", "type": "string"},
                    {"name": "price", "type": "double"},
                    {"name": "created_at", "type": "string"},
                ]
            },
        },
    )
    good = b'{"order_id":"o-1","price":12,"created_at":"2026-11-21T07:12:33Z"}'
    bad = b'{"order_id":"o-1","price":"12","created_at":"2026-11-21T07:12:33Z"}'
    assert router(typed).route(order(good)).reason == ""
    record = order(bad)
    routed = router(typed).route(record)
    assert (routed.buffer.kind, routed.reason) == ("errors", "schema_mismatch")
    assert "'price' is str" in single_frame(record, routed).reason
    assert single_frame(record, routed).value == bad


def test_the_text_format_dead_letters_multi_line_text_values(stream: StreamConfig) -> None:
    text = configured(
        stream,
        encoding={"value": "text"},
        event_time={"source": "record_timestamp"},
        aggregations=[],
        format={"type": "text"},
    )
    assert router(text).route(order(b"one line")).reason == ""
    record = order(b"two\nlines")
    routed = router(text).route(record)
    assert (routed.buffer.kind, routed.reason) == ("errors", "multiline_text_value")


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def test_values_too_deep_to_render_are_dead_lettered_not_raised(stream: StreamConfig) -> None:
    """orjson reads 1,023 levels of nesting but writes only 254: a field that a partition level,
    a csv column or a schema message would serialise again is refused at routing, never left
    to fail a render (which would hold its flush for ever) or the batch (a poison pill)."""
    value = b'{"order_id":"o-1","created_at":"2026-11-21T07:12:33Z","c":' + deep(300) + b"}"
    partitioned = configured(stream, partition_by={"fields": ["_value.c"]})
    assert router(partitioned).route(order(value)).reason == "unrenderable_value"
    csv = configured(stream, format={"type": "csv", "columns": ["partition", "offset", "value.c"]})
    assert router(csv).route(order(value)).reason == "unrenderable_value"
    typed = configured(
        stream,
        format={
            "type": "parquet",
            "value_schema": {"fields": [{"name": "c", "type": "string"}, {"name": "created_at", "type": "string"}]},
        },
    )
    value = b'{"created_at":"2026-11-21T07:12:33Z","c":' + deep(1000) + b"}"
    record = order(value)
    routed = router(typed).route(record)
    assert routed.reason == "schema_mismatch" and "a JSON array" in single_frame(record, routed).reason
