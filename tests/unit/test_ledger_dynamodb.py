"""tidemark.ledger.dynamodb: the pure item mappings (no AWS is called here)."""

from __future__ import annotations

import zlib
from dataclasses import replace
from decimal import Decimal
from typing import Any

import orjson
import pytest
from boto3.dynamodb.types import Binary

from tidemark.buffers import BufferKey
from tidemark.ledger.dynamodb import (
    _deserialize,
    _serialize,
    epoch_from_item,
    epoch_sk,
    epoch_to_item,
    hour_pk,
    ledger_table_schema,
    object_from_item,
    object_sk,
    object_to_item,
    state_from_item,
    state_pk,
    state_to_item,
)
from tidemark.ledger.model import CommittedObject, EpochStart, OpenBuffer, PartitionState
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
        "first_accepted": 100,
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
        first_accepted=None,  # an item from before it was kept: not known (never taken for "none yet")
    )


def test_a_first_accepted_offset_not_known_stays_not_known() -> None:
    state = replace(busy_state(), first_accepted=None)
    item = state_to_item(state)
    assert "first_accepted" not in item
    assert state_from_item(_deserialize(_serialize(item))) == state


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


# -- Kinesis: shard ids and positions wider than int64 / DynamoDB numbers -------------------------

SHARD = "shardId-000000000006"
ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
SEQ = 49590338271490256608559692538361571095921575989136588898  # 56 digits
WIDE = 10**128 + 7  # 129 digits
WSEG_A = SegmentRef("raw_wa.seg", 2, 200, SEQ, SEQ + 1)
WSEG_B = SegmentRef("errors_wb.seg", 1, 90, SEQ + 2, SEQ + 2)
WSEG_C = SegmentRef("raw_wc.seg", 3, 300, WIDE, WIDE + 2)


def kinesis_state() -> PartitionState:
    """A shard's state with open, sealed and quarantined buffers, all at wide positions."""
    state = PartitionState(
        "orders", SHARD, staged_offset=SEQ - 1, watermark_ms=T0 - 9, epoch=1, source=ARN, fingerprints=((SEQ - 1, 7),)
    )
    state = state.accept(
        [(RAW_08, WSEG_A), (ERR_07, WSEG_B)],
        SEQ + 2,
        T0,
        spec="jsonl|gzip|6|orders",
        fingerprints=[(SEQ, 11), (SEQ + 1, 12), (SEQ + 2, 13)],
    )
    state = state.seal({"errors/2025-11-21T07": "max_age"}, object_key, T0 + 1)
    state = state.quarantine("errors/2025-11-21T07#2", "checksum mismatch", T0 + 2)
    state = state.seal({"raw/2025-11-21T08": "max_records"}, object_key, T0 + 3)
    return state.accept([(RAW_08, WSEG_C)], WIDE + 2, T0 + 4, fingerprints=[(WIDE + 2, 2**32 - 1)])


def test_kinesis_state_item_stores_wide_positions_as_text() -> None:
    state = kinesis_state()
    item = state_to_item(state)
    body = orjson.loads(zlib.decompress(item.pop("body")))
    assert item == {
        "pk": f"PART#orders#{SHARD}",
        "sk": "STATE",
        "stream": "orders",
        "partition": SHARD,
        "version": 5,
        "staged_offset": str(WIDE + 2),  # 129 digits: beyond DynamoDB's 38
        "updated_ms": T0 + 4,
        "watermark_ms": T0 - 9,
        "epoch": 1,
        "source": ARN,
        "open_buffers": 1,
        "sealed_flushes": 1,
        "quarantined_flushes": 1,
        "first_accepted": -1,  # the state began in epoch 1: epoch 0 accepted nothing
    }
    assert body["fingerprints"] == [
        [str(SEQ - 1), 7],
        [str(SEQ), 11],
        [str(SEQ + 1), 12],
        [str(SEQ + 2), 13],
        [str(WIDE + 2), 2**32 - 1],
    ]
    assert body["buffers"]["raw/2025-11-21T08"]["segs"] == [["raw_wc.seg", 3, 300, str(WIDE), str(WIDE + 2)]]
    assert body["sealed"]["raw/2025-11-21T08#1"]["buffer"]["segs"] == [["raw_wa.seg", 2, 200, str(SEQ), str(SEQ + 1)]]
    assert body["quarantined"]["errors/2025-11-21T07#2"]["buffer"]["segs"] == [
        ["errors_wb.seg", 1, 90, str(SEQ + 2), str(SEQ + 2)]
    ]


def test_kinesis_state_round_trips() -> None:
    state = kinesis_state()
    assert state_from_item(state_to_item(state)) == state
    wire = _serialize(state_to_item(state))
    assert wire["partition"] == {"S": SHARD}
    assert wire["staged_offset"] == {"S": str(WIDE + 2)}
    restored = state_from_item(_deserialize(wire))
    assert restored == state
    assert restored.partition == SHARD
    assert restored.staged_offset == WIDE + 2
    assert restored.fingerprints == state.fingerprints
    assert restored.buffers["raw/2025-11-21T08"].segments == (WSEG_C,)
    assert restored.sealed["raw/2025-11-21T08#1"].buffer.segments == (WSEG_A,)
    assert restored.quarantined["errors/2025-11-21T07#2"].flush.buffer.segments == (WSEG_B,)


@pytest.mark.parametrize(
    ("staged", "wire"),
    [
        (-1, {"N": "-1"}),
        (2**63 - 1, {"N": "9223372036854775807"}),
        (2**63, {"N": "9223372036854775808"}),  # past orjson's int64, still a DynamoDB number
        (10**38 - 1, {"N": "9" * 38}),  # DynamoDB's widest number
        (10**38, {"S": "1" + "0" * 38}),
        (SEQ, {"S": str(SEQ)}),
        (10**129 - 1, {"S": "9" * 129}),
    ],
)
def test_staged_offset_is_a_number_while_dynamodb_can_hold_it(staged: int, wire: dict[str, str]) -> None:
    state = PartitionState("orders", SHARD, version=2, staged_offset=staged, fingerprints=((max(staged, 0), 1),))
    item = _serialize(state_to_item(state))
    assert item["staged_offset"] == wire
    assert state_from_item(_deserialize(item)) == state


def test_kafka_state_items_keep_numbers() -> None:
    state = busy_state()
    item = state_to_item(state)
    assert (item["partition"], item["staged_offset"]) == (7, 110)
    assert type(item["staged_offset"]) is int
    wire = _serialize(item)
    assert (wire["partition"], wire["staged_offset"]) == ({"N": "7"}, {"N": "110"})
    assert orjson.loads(zlib.decompress(item["body"]))["buffers"]["raw/2025-11-21T08"]["segs"][0] == [
        "raw_a.seg",
        5,
        500,
        100,
        104,
    ]


KINESIS_COMMITTED = CommittedObject(
    stream="orders",
    partition=SHARD,
    kind="raw",
    hour="2025-11-21T08",
    key=f"raw/orders/2025/11/21/08/orders+{SHARD}+e1+{SEQ:0129d}-{WIDE:0129d}.jsonl.gz",
    first=SEQ,
    last=WIDE,
    records=4,
    size=999,
    sha256="cd" * 32,
    committed_ms=T0 + 9,
    epoch=1,
    content_sha256="ef" * 32,
)


def test_kinesis_object_item() -> None:
    assert object_to_item(KINESIS_COMMITTED) == {
        "pk": "HOUR#orders#2025-11-21T08",
        "sk": f"OBJ#raw#{SHARD}#e0001#{SEQ:0129d}",
        "epoch": 1,
        "content_sha256": "ef" * 32,
        "stream": "orders",
        "partition": SHARD,
        "kind": "raw",
        "hour": "2025-11-21T08",
        "object_key": KINESIS_COMMITTED.key,
        "first_offset": str(SEQ),
        "last_offset": str(WIDE),
        "records": 4,
        "size": 999,
        "sha256": "cd" * 32,
        "committed_ms": T0 + 9,
    }
    assert object_from_item(object_to_item(KINESIS_COMMITTED)) == KINESIS_COMMITTED
    assert object_from_item(_deserialize(_serialize(object_to_item(KINESIS_COMMITTED)))) == KINESIS_COMMITTED


def test_object_offsets_within_38_digits_stay_numbers() -> None:
    committed = CommittedObject("orders", SHARD, "errors", "2025-11-21T08", "k", 5, 10**38 - 1, 1, 1, "", T0)
    item = object_to_item(committed)
    assert (item["first_offset"], item["last_offset"]) == (5, 10**38 - 1)
    assert item["sk"] == f"OBJ#errors#{SHARD}#00000000000000000005"
    assert object_from_item(_deserialize(_serialize(item))) == committed


@pytest.mark.parametrize(
    ("kind", "partition", "first", "epoch", "expected"),
    [
        ("raw", 7, 100, 0, "OBJ#raw#00007#00000000000000000100"),
        ("raw", 7, 100, 3, "OBJ#raw#00007#e0003#00000000000000000100"),
        ("errors", 123456, 2**63 - 1, 0, "OBJ#errors#123456#09223372036854775807"),
        ("raw", SHARD, 100, 0, f"OBJ#raw#{SHARD}#00000000000000000100"),
        ("raw", SHARD, 10**20 - 1, 0, f"OBJ#raw#{SHARD}#{'9' * 20}"),
        ("raw", SHARD, 10**20, 0, f"OBJ#raw#{SHARD}#{'0' * 108}1{'0' * 20}"),
        ("raw", SHARD, SEQ, 0, f"OBJ#raw#{SHARD}#{'0' * 73}{SEQ}"),
        ("errors", SHARD, SEQ, 12, f"OBJ#errors#{SHARD}#e0012#{'0' * 73}{SEQ}"),
        ("raw", SHARD, 10**129 - 1, 0, f"OBJ#raw#{SHARD}#{'9' * 129}"),
    ],
)
def test_object_sort_keys(kind: str, partition: int | str, first: int, epoch: int, expected: str) -> None:
    assert object_sk(kind, partition, first, epoch) == expected


def test_object_sort_keys_of_sequence_numbers_sort_by_position() -> None:
    positions = [10**20, 2**70, SEQ, SEQ + 1, WIDE, 10**129 - 1]
    keys = [object_sk("raw", SHARD, p) for p in positions]
    assert sorted(keys) == keys


def test_epoch_item_with_wide_positions_round_trips() -> None:
    record = EpochStart(
        epoch=2,
        first_offset=WIDE,
        previous_staged_offset=SEQ + 2,
        previous_source=ARN,
        source="",
        reason="stream recreated",
        started_ms=T0 + 5,
    )
    item = epoch_to_item("orders", SHARD, record)
    assert item == {
        "pk": f"PART#orders#{SHARD}",
        "sk": "EPOCH#000002",
        "stream": "orders",
        "partition": SHARD,
        "epoch": 2,
        "first_offset": str(WIDE),
        "previous_staged_offset": str(SEQ + 2),
        "previous_source": ARN,
        "source": "",
        "reason": "stream recreated",
        "started_ms": T0 + 5,
    }
    assert epoch_sk(2) == item["sk"]
    assert epoch_from_item(item) == record
    assert epoch_from_item(_deserialize(_serialize(item))) == record


def test_kafka_epoch_item_keeps_numbers() -> None:
    record = EpochStart(1, 0, -1, "", "c/orders", "reset", T0)
    item = epoch_to_item("orders", 3, record)
    assert item == {
        "pk": "PART#orders#3",
        "sk": "EPOCH#000001",
        "stream": "orders",
        "partition": 3,
        "epoch": 1,
        "first_offset": 0,
        "previous_staged_offset": -1,
        "previous_source": "",
        "source": "c/orders",
        "reason": "reset",
        "started_ms": T0,
    }
    wire = _serialize(item)
    assert (wire["first_offset"], wire["previous_staged_offset"]) == ({"N": "0"}, {"N": "-1"})
    assert epoch_from_item(_deserialize(wire)) == record


def test_state_started_at_a_wide_epoch_round_trips() -> None:
    state = kinesis_state()
    started, record = state.start_epoch(WIDE + 100, ARN, "reset", object_key, T0 + 20)
    assert record.previous_staged_offset == WIDE + 2
    assert state_from_item(_deserialize(_serialize(state_to_item(started)))) == started
    assert epoch_from_item(_deserialize(_serialize(epoch_to_item("orders", SHARD, record)))) == record
