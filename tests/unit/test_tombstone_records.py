"""A Kafka tombstone (a null value) and a null header value as the ESM decoders read them: both
the column path and the per-record path give ``None``, never ``b""``."""

from __future__ import annotations

import base64
from typing import Any
from unittest.mock import patch

import pytest

from tests.support.events import load_event, source_of
from tidemark.records import kafka
from tidemark.records.esm import build_event
from tidemark.records.kafka import parse_kafka_event
from tidemark.records.model import Record


def _raw(offset: int, **fields: Any) -> dict[str, Any]:
    return {
        "topic": "orders",
        "partition": 0,
        "offset": offset,
        "timestamp": 1_000 + offset,
        "timestampType": "CREATE_TIME",
        "key": base64.b64encode(b"k%d" % offset).decode(),
        "value": base64.b64encode(b"{}").decode(),
        "headers": [],
        **fields,
    }


def _event(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {**load_event("msk-orders"), "records": {"orders-0": records}}


def _tombstones() -> list[dict[str, Any]]:
    omitted = _raw(1)
    del omitted["value"]
    return [_raw(0), omitted, _raw(2, value=None), _raw(3, value="")]


def _values(event: dict[str, Any]) -> list[bytes | None]:
    (batch,) = parse_kafka_event(event)
    return [record.value for record in batch.records]


@pytest.mark.parametrize("path", ["columns", "per-record"])
def test_an_omitted_or_null_value_is_a_tombstone_and_an_empty_one_is_not(path: str) -> None:
    event = _event(_tombstones())
    if path == "per-record":
        with patch.object(kafka, "_columns", lambda chunk, topics: None):
            values = _values(event)
    else:
        values = _values(event)
    assert values == [b"{}", None, None, b""]


@pytest.mark.parametrize("path", ["columns", "per-record"])
def test_a_null_header_value_is_kept_null_and_distinct_from_an_empty_one(path: str) -> None:
    event = _event([_raw(0, headers=[{"gone": None}, {"empty": []}, {"set": list(b"x")}])])
    if path == "per-record":
        with patch.object(kafka, "_columns", lambda chunk, topics: None):
            (batch,) = parse_kafka_event(event)
    else:
        (batch,) = parse_kafka_event(event)
    assert batch.records[0].headers == (("gone", None), ("empty", b""), ("set", b"x"))


def test_the_encoder_writes_a_tombstone_as_a_null_value_and_reads_it_back() -> None:
    records = [
        Record("orders", 0, 5, 1_005, None, b"k", (("h", None),)),
        Record("orders", 0, 6, 1_006, b"", None),
    ]
    event = build_event(records, source_of(load_event("msk-orders")))
    raw = event["records"]["orders-0"]
    assert raw[0]["value"] is None and raw[1]["value"] == ""
    (batch,) = parse_kafka_event(event)
    assert batch.records == records


@pytest.mark.parametrize("path", ["columns", "per-record"])
def test_the_tombstone_sample_event(path: str) -> None:
    """``events/msk-tombstones.json`` (also for ``tidemark invoke -e``): an order, a tombstone
    with ``"value": null`` and a null header value, one without ``value`` and with a ``{}`` header
    (a null header as AWS has been seen to send it: no name, nothing to keep)."""
    event = load_event("msk-tombstones")
    if path == "per-record":
        with patch.object(kafka, "_columns", lambda chunk, topics: None):
            (batch,) = parse_kafka_event(event)
    else:
        (batch,) = parse_kafka_event(event)
    order, deleted, also_deleted = batch.records
    assert order.value is not None and order.value.startswith(b'{"order_id":"o-1003"')
    assert (deleted.key, deleted.value, deleted.headers) == (b"o-1001", None, (("op", b"d"), ("trace", None)))
    assert (also_deleted.key, also_deleted.value, also_deleted.headers) == (b"o-1002", None, (("op", b"d"),))
