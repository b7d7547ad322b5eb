"""tidemark.ledger.dynamodb: the pure item mappings (no AWS is called here)."""

from __future__ import annotations

import zlib
from decimal import Decimal
from typing import Any

import orjson
import pytest
from boto3.dynamodb.types import Binary

from tidemark.buffers import BufferKey
from tidemark.ledger.dynamodb import (
    _deserialize,
    _serialize,
    hour_pk,
    ledger_table_schema,
    object_from_item,
    object_to_item,
    state_from_item,
    state_pk,
    state_to_item,
)
from tidemark.ledger.model import CommittedObject, OpenBuffer, PartitionState
from tidemark.staging.store import SegmentRef

T0 = 1_763_712_000_000
RAW_08 = BufferKey("raw", "2025-11-21T08")
ERR_07 = BufferKey("errors", "2025-11-21T07")
SEG_A = SegmentRef("raw_a.seg", 5, 500, 100, 104)
SEG_B = SegmentRef("raw_b.seg", 3, 300, 105, 107)
SEG_C = SegmentRef("errors_c.seg", 1, 50, 108, 108)
SEG_D = SegmentRef("raw_d.seg", 2, 20, 109, 110)


def object_key(buffer: OpenBuffer) -> str:
    return f"{buffer.key.kind}/orders/{buffer.key.hour}/{buffer.first}-{buffer.last}"


def busy_state() -> PartitionState:
    """A state with open buffers and sealed flushes, as the writer builds it."""
    state = PartitionState("orders", 7).accept([(RAW_08, SEG_A), (RAW_08, SEG_B), (ERR_07, SEG_C)], 108, T0)
    state = state.seal({"errors/2025-11-21T07": "max_age"}, object_key, T0 + 1)
    return state.accept([(RAW_08, SEG_D)], 110, T0 + 2, event_ms=T0 - 5)


COMMITTED = CommittedObject(
    stream="orders",
    partition=7,
    kind="raw",
    hour="2025-11-21T08",
    key="raw/orders/2025/11/21/08/orders+7+00000000000000000100-00000000000000000110.jsonl.gz",
    first=100,
    last=110,
    records=10,
    size=4321,
    sha256="ab" * 32,
    committed_ms=T0 + 9,
)


def test_keys() -> None:
    assert state_pk("orders", 7) == "PART#orders#7"
    assert hour_pk("orders", "2025-11-21T08") == "HOUR#orders#2025-11-21T08"


def test_state_to_item_shape() -> None:
    item = state_to_item(busy_state())
    body = orjson.loads(zlib.decompress(item.pop("body")))
    assert item == {
        "pk": "PART#orders#7",
        "sk": "STATE",
        "stream": "orders",
        "partition": 7,
        "version": 3,
        "staged_offset": 110,
        "updated_ms": T0 + 2,
        "watermark_ms": T0 - 5,
        "epoch": 0,
        "source": "",
        "open_buffers": 1,
        "sealed_flushes": 1,
        "quarantined_flushes": 0,
    }
    assert body == {
        "next_seq": 3,
        "fingerprints": [],
        "buffers": {
            "raw/2025-11-21T08": {
                "key": "raw/2025-11-21T08",
                "seq": 1,
                "opened": T0,
                "appended": T0 + 2,
                "segs": [
                    ["raw_a.seg", 5, 500, 100, 104],
                    ["raw_b.seg", 3, 300, 105, 107],
                    ["raw_d.seg", 2, 20, 109, 110],
                ],
                "spec": "",
            }
        },
        "sealed": {
            "errors/2025-11-21T07#2": {
                "buffer": {
                    "key": "errors/2025-11-21T07",
                    "seq": 2,
                    "opened": T0,
                    "appended": T0,
                    "segs": [["errors_c.seg", 1, 50, 108, 108]],
                    "spec": "",
                },
                "object_key": "errors/orders/2025-11-21T07/108-108",
                "reason": "max_age",
                "sealed": T0 + 1,
            }
        },
        "quarantined": {},
    }


@pytest.mark.parametrize("state", [PartitionState("orders", 0), busy_state()], ids=["empty", "busy"])
def test_state_round_trips(state: PartitionState) -> None:
    assert state_from_item(state_to_item(state)) == state


def test_state_round_trips_through_the_dynamodb_type_serialiser() -> None:
    state = busy_state()
    wire = _serialize(state_to_item(state))
    assert wire["version"] == {"N": "3"}
    assert wire["pk"] == {"S": "PART#orders#7"}
    restored = state_from_item(_deserialize(wire))
    assert restored == state
    assert restored.buffers["raw/2025-11-21T08"].segments == (SEG_A, SEG_B, SEG_D)
    assert restored.sealed["errors/2025-11-21T07#2"].buffer.key == ERR_07


def test_state_from_item_reads_decimals_as_ints() -> None:
    body = {
        "next_seq": 2,
        "buffers": {
            "raw/2025-11-21T08": {
                "key": "raw/2025-11-21T08",
                "seq": 1,
                "opened": T0,
                "appended": T0,
                "segs": [["s.seg", 2, 20, 40, 41]],
                "spec": "jsonl|gzip|6|orders|text|json|text",
            }
        },
        "sealed": {},
    }
    item: dict[str, Any] = {
        "stream": "orders",
        "partition": Decimal(2),
        "version": Decimal(5),
        "staged_offset": Decimal(41),
        "updated_ms": Decimal(T0),
        "body": Binary(zlib.compress(orjson.dumps(body))),
    }
    assert state_from_item(_deserialize(_serialize(item))) == PartitionState(
        "orders",
        2,
        version=5,
        staged_offset=41,
        next_seq=2,
        updated_ms=T0,
        buffers={
            "raw/2025-11-21T08": OpenBuffer(
                RAW_08, 1, T0, T0, (SegmentRef("s.seg", 2, 20, 40, 41),), "jsonl|gzip|6|orders|text|json|text"
            )
        },
        sealed={},
    )


def test_busy_state_item_stays_small() -> None:
    """Every accepted batch rewrites the state item: its size is what DynamoDB bills."""
    segments = tuple(
        SegmentRef(
            f"raw_2025-11-21T08_{i * 1000:020d}-{i * 1000 + 999:020d}_1795248000000_0123456789ab.seg",
            1000,
            250_000,
            i * 1000,
            i * 1000 + 999,
        )
        for i in range(200)
    )
    buffers = {"raw/2025-11-21T08": OpenBuffer(RAW_08, 1, T0, T0, segments)}
    state = PartitionState("orders", 7, version=9, staged_offset=199_999, buffers=buffers)
    assert len(state_to_item(state)["body"]) < 8 * 1024
    assert state_from_item(state_to_item(state)) == state


def test_object_to_item_shape_and_sortable_sort_key() -> None:
    assert object_to_item(COMMITTED) == {
        "pk": "HOUR#orders#2025-11-21T08",
        "sk": "OBJ#raw#00007#00000000000000000100",
        "epoch": 0,
        "content_sha256": "",
        "stream": "orders",
        "partition": 7,
        "kind": "raw",
        "hour": "2025-11-21T08",
        "object_key": COMMITTED.key,
        "first_offset": 100,
        "last_offset": 110,
        "records": 10,
        "size": 4321,
        "sha256": "ab" * 32,
        "committed_ms": T0 + 9,
    }


def test_object_round_trips() -> None:
    assert object_from_item(object_to_item(COMMITTED)) == COMMITTED
    assert object_from_item(_deserialize(_serialize(object_to_item(COMMITTED)))) == COMMITTED


def test_ledger_table_schema() -> None:
    assert ledger_table_schema("ledger") == {
        "TableName": "ledger",
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        "BillingMode": "PAY_PER_REQUEST",
    }


def test_quarantined_flushes_round_trip() -> None:
    state = busy_state()
    (flush_id,) = state.sealed
    held = state.quarantine(flush_id, "checksum mismatch", T0 + 5)
    item = state_to_item(held)
    assert (item["sealed_flushes"], item["quarantined_flushes"]) == (0, 1)
    assert state_from_item(_deserialize(_serialize(item))) == held
