"""Routing a tombstone (a null value): a record like any other, never an error for lacking the
value it cannot have (the router equivalence suite also generates tombstones against the
reference router; these are the cases it does not model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidemark.buffers import BufferKey
from tidemark.clock import ManualClock
from tidemark.config import StreamConfig, load_config
from tidemark.config.model import (
    EncodingConfig,
    EventTimeConfig,
    FormatConfig,
    PartitionByConfig,
    PartitionField,
    ValueField,
    ValueSchemaConfig,
)
from tidemark.records.model import Record
from tidemark.routing import Router
from tidemark.staging.frames import RAW, Frame
from tidemark.staging.segment import NULLS_MAGIC, decode_segment
from tidemark.writer.segments import SegmentEncoder

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "tidemark.yaml"
KAFKA_TS = 1_763_709_153_000  # 2025-11-21T07:12:33Z
ORDER = b'{"order_id":"o-1","country":"US","created_at":"2026-11-21T09:00:00Z"}'


@pytest.fixture(scope="module")
def stream() -> StreamConfig:
    return load_config(EXAMPLE).streams[0]  # json values, event time from created_at


def router(stream: StreamConfig, **update: Any) -> Router:
    return Router(stream.model_copy(update=update) if update else stream, ManualClock())


def tombstone(*, key: bytes | None = b"o-1", timestamp: int = KAFKA_TS, headers: Any = ()) -> Record:
    return Record("orders", 3, 42, timestamp, None, key, headers)


def test_a_tombstone_of_a_json_field_stream_goes_to_its_record_timestamps_hour(stream: StreamConfig) -> None:
    routed = router(stream).route(tombstone(headers=(("op", b"d"),)))
    assert (routed.buffer, routed.reason, routed.event_ms) == (BufferKey("raw", "2025-11-21T07"), "", KAFKA_TS)
    (segment,) = SegmentEncoder().encode([tombstone(headers=(("op", b"d"),))], [routed])
    assert bytes(segment.parts[0][:4]) == NULLS_MAGIC
    assert decode_segment(segment.encoded) == [Frame(RAW, 42, KAFKA_TS, KAFKA_TS, b"o-1", None, (("op", b"d"),))]


def test_a_tombstone_without_a_usable_record_timestamp_is_dead_lettered_as_any_record(stream: StreamConfig) -> None:
    routed = router(stream).route(tombstone(timestamp=-1))
    assert routed.reason == "invalid_event_time"


def test_a_value_schema_does_not_judge_a_tombstone(stream: StreamConfig) -> None:
    schema = ValueSchemaConfig(fields=[ValueField(name="order_id", type="string")])
    update = {"format": FormatConfig(type="parquet", value_schema=schema)}
    assert router(stream, **update).route(tombstone()).reason == ""
    assert router(stream, **update).route(Record("orders", 3, 1, KAFKA_TS, b"null", b"o-1")).reason == (
        "schema_mismatch"  # the JSON text null is a value, and not an object
    )


@pytest.mark.parametrize("value", ["text", "bytes"])
def test_a_tombstone_of_a_text_or_bytes_stream_is_archived(stream: StreamConfig, value: str) -> None:
    update = {
        "encoding": EncodingConfig(value=value),  # type: ignore[arg-type]
        "format": FormatConfig(type="text"),
        "event_time": EventTimeConfig(source="record_timestamp"),
    }
    assert router(stream, **update).route(tombstone()).buffer == BufferKey("raw", "2025-11-21T07")


def test_a_header_event_time_is_read_from_a_tombstone_that_has_it(stream: StreamConfig) -> None:
    update = {"event_time": EventTimeConfig(source="header", header="ts")}
    with_header = router(stream, **update).route(tombstone(headers=(("ts", b"2026-11-21T10:30:00Z"),)))
    assert with_header.buffer.hour == "2026-11-21T10"
    assert router(stream, **update).route(tombstone(headers=(("ts", None),))).event_ms == KAFKA_TS
    assert router(stream, **update).route(tombstone(headers=(("ts", b"soon"),))).reason == "invalid_event_time"
    order = Record("orders", 3, 1, KAFKA_TS, ORDER, b"o-1", (("ts", None),))
    assert router(stream, **update).route(order).reason == "missing_event_time"  # a null header holds no time


def partitioned(stream: StreamConfig, *fields: str, missing: str = "dead_letter") -> Router:
    by = PartitionByConfig(fields=[PartitionField(field=field) for field in fields], missing=missing)  # type: ignore[arg-type]
    return router(stream, partition_by=by)


def test_a_tombstone_under_value_partitioning_goes_to_the_missing_folder_never_the_dead_letters(
    stream: StreamConfig,
) -> None:
    route = partitioned(stream, "_value.country").route
    # the tombstone first: the folder it caches must not let a record lacking the field through
    assert route(tombstone()).buffer == BufferKey("raw", "2025-11-21T07", "__missing__")
    lacking = Record("orders", 3, 43, KAFKA_TS, b'{"created_at":"2026-11-21T09:00:00Z"}', b"o-2")
    assert route(lacking).reason == "missing_partition_value"
    assert route(Record("orders", 3, 44, KAFKA_TS, ORDER, b"o-3")).buffer.folders == "US"


def test_a_tombstone_lacking_a_key_level_follows_missing_as_any_record(stream: StreamConfig) -> None:
    route = partitioned(stream, "_key", "_value.country").route
    assert route(tombstone(key=None)).reason == "missing_partition_value"
    assert route(tombstone()).buffer.folders == "o-1/__missing__"
    lenient = partitioned(stream, "_key", missing="folder")
    assert lenient.route(tombstone(key=None)).buffer.folders == "__missing__"


def test_route_batch_routes_tombstones_among_orders_as_route_does(stream: StreamConfig) -> None:
    records = [Record("orders", 3, offset, KAFKA_TS + offset, ORDER, b"o-%d" % offset) for offset in range(20)] + [
        tombstone()._replace(offset=20 + index) for index in range(3)
    ]
    records[5] = records[5]._replace(value=None)
    batch = router(stream).route_batch(records)
    assert batch == [router(stream).route(record) for record in records]
    assert batch[5].event_ms == KAFKA_TS + 5 and batch[0].buffer.hour == "2026-11-21T09"
