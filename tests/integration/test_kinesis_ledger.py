"""The DynamoDB ledger with Kinesis shards and sequence numbers, through real DynamoDB HTTP (moto server)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import boto3
import pytest

from tidemark.buffers import BufferKey
from tidemark.exceptions import LedgerConflictError
from tidemark.ledger.dynamodb import DynamoDBLedger, ledger_table_schema, object_sk, state_pk
from tidemark.ledger.model import CommittedObject, OpenBuffer, PartitionState
from tidemark.staging.store import SegmentRef

SHARD = "shardId-000000000006"
ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
SEQ = 49590338271490256608559692538361571095921575989136588898  # 56 digits
WIDE = 10**128 + 7  # 129 digits
HOUR = "2026-11-21T07"
RAW_07 = BufferKey("raw", HOUR)
ERR_07 = BufferKey("errors", HOUR)
T0 = 1_795_245_153_000


@pytest.fixture
def client(moto_endpoint: str) -> Any:
    return boto3.client("dynamodb", endpoint_url=moto_endpoint)


@pytest.fixture
def ledger(client: Any) -> DynamoDBLedger:
    table = f"tidemark-ledger-{uuid.uuid4().hex[:10]}"
    client.create_table(**ledger_table_schema(table))
    return DynamoDBLedger(table, client=client)


def object_key(buffer: OpenBuffer) -> str:
    return f"raw/orders/2026/11/21/07/orders+{SHARD}+{buffer.first:0129d}-{buffer.last:0129d}.jsonl.gz"


def test_a_shard_state_with_wide_positions_is_saved_and_loaded(ledger: DynamoDBLedger, client: Any) -> None:
    empty = ledger.load("orders", SHARD)
    assert empty == PartitionState("orders", SHARD)
    segments = [
        (RAW_07, SegmentRef("raw_a.seg", 2, 200, SEQ, SEQ + 1)),
        (ERR_07, SegmentRef("e.seg", 1, 9, WIDE, WIDE)),
    ]
    first = empty.accept(segments, WIDE, T0, spec="jsonl|gzip", source=ARN, fingerprints=[(SEQ, 1), (WIDE, 2**32 - 1)])
    assert ledger.save(first, empty) == first
    assert ledger.load("orders", SHARD) == first

    second = first.seal({str(RAW_07): "max_records"}, object_key, T0 + 1)
    ledger.save(second, first)
    loaded = ledger.load("orders", SHARD)
    assert loaded == second
    assert (loaded.partition, loaded.staged_offset, loaded.source) == (SHARD, WIDE, ARN)
    assert loaded.fingerprints == ((SEQ, 1), (WIDE, 2**32 - 1))

    stored = client.get_item(
        TableName=ledger.table_name, Key={"pk": {"S": state_pk("orders", SHARD)}, "sk": {"S": "STATE"}}
    )
    assert stored["Item"]["partition"] == {"S": SHARD}
    assert stored["Item"]["staged_offset"] == {"S": str(WIDE)}
    assert stored["Item"]["version"] == {"N": "2"}

    # the version fence works the same for shards: a stale writer loses and gets the winner
    with pytest.raises(LedgerConflictError) as caught:
        ledger.save(first.seal({str(ERR_07): "max_age"}, object_key, T0 + 2), first)
    assert caught.value.current == second


def test_a_staged_offset_of_38_digits_stays_a_number(ledger: DynamoDBLedger, client: Any) -> None:
    empty = ledger.load("orders", SHARD)
    state = empty.accept([(RAW_07, SegmentRef("r.seg", 1, 9, 10**38 - 1, 10**38 - 1))], 10**38 - 1, T0)
    ledger.save(state, empty)
    stored = client.get_item(
        TableName=ledger.table_name, Key={"pk": {"S": state_pk("orders", SHARD)}, "sk": {"S": "STATE"}}
    )
    assert stored["Item"]["staged_offset"] == {"N": "9" * 38}
    assert ledger.load("orders", SHARD) == state


def test_kafka_and_kinesis_partitions_of_one_stream_are_kept_apart(ledger: DynamoDBLedger) -> None:
    kafka = PartitionState("orders", 6)
    kafka_next = kafka.accept([(RAW_07, SegmentRef("k.seg", 1, 9, 5, 5))], 5, T0)
    ledger.save(kafka_next, kafka)
    assert ledger.load("orders", SHARD) == PartitionState("orders", SHARD)
    assert ledger.load("orders", 6) == kafka_next


def test_the_registry_holds_partition_numbers_and_shard_ids(ledger: DynamoDBLedger, client: Any) -> None:
    assert ledger.partitions("orders") == set()
    ledger.register_partitions("orders", [3, SHARD, 0])
    ledger.register_partitions("orders", {"shardId-000000000007"})
    ledger.register_partitions("orders", [3, SHARD])  # idempotent
    ledger.register_partitions("orders", [])
    ledger.register_partitions("clicks", [1])
    assert ledger.partitions("orders") == {0, 3, SHARD, "shardId-000000000007"}
    assert ledger.partitions("clicks") == {1}
    assert ledger.partitions("payments") == set()
    stored = client.get_item(TableName=ledger.table_name, Key={"pk": {"S": "STREAM#orders"}, "sk": {"S": "PARTITIONS"}})
    assert sorted(stored["Item"]["partitions"]["NS"]) == ["0", "3"]
    assert sorted(stored["Item"]["shards"]["SS"]) == [SHARD, "shardId-000000000007"]


def test_a_registry_of_shards_only(ledger: DynamoDBLedger) -> None:
    ledger.register_partitions("orders", [SHARD])
    assert ledger.partitions("orders") == {SHARD}
    ledger.register_partitions("orders", [2])
    assert ledger.partitions("orders") == {2, SHARD}


def test_an_object_at_wide_positions_is_committed_and_read_back(ledger: DynamoDBLedger, client: Any) -> None:
    empty = ledger.load("orders", SHARD)
    accepted = empty.accept([(RAW_07, SegmentRef("raw_a.seg", 3, 300, SEQ, WIDE))], WIDE, T0, source=ARN)
    ledger.save(accepted, empty)
    sealed = accepted.seal({str(RAW_07): "max_records"}, object_key, T0 + 1)
    ledger.save(sealed, accepted)
    ((flush_id, flush),) = sealed.sealed.items()
    committed = CommittedObject(
        stream="orders",
        partition=SHARD,
        kind="raw",
        hour=HOUR,
        key=flush.object_key,
        first=SEQ,
        last=WIDE,
        records=3,
        size=4321,
        sha256="ab" * 32,
        committed_ms=T0 + 2,
        content_sha256="cd" * 32,
    )
    done = sealed.commit(flush_id, T0 + 2)
    ledger.commit(done, sealed, committed)

    assert ledger.load("orders", SHARD) == done
    assert ledger.committed_objects("orders", HOUR) == [committed]
    assert ledger.committed_object("orders", HOUR, "raw", SHARD, SEQ) == committed
    assert ledger.committed_object("orders", HOUR, "raw", SHARD, SEQ + 1) is None
    assert ledger.committed_object("orders", HOUR, "raw", "shardId-000000000007", SEQ) is None
    assert ledger.committed_object("orders", HOUR, "errors", SHARD, SEQ) is None
    (mark,) = ledger.hour_marks("orders")
    assert (mark.hour, mark.commits, mark.last_commit_ms) == (HOUR, 1, T0 + 2)

    stored = client.get_item(
        TableName=ledger.table_name,
        Key={"pk": {"S": f"HOUR#orders#{HOUR}"}, "sk": {"S": object_sk("raw", SHARD, SEQ)}},
    )
    assert stored["Item"]["sk"] == {"S": f"OBJ#raw#{SHARD}#{SEQ:0129d}"}
    assert (stored["Item"]["first_offset"], stored["Item"]["last_offset"]) == ({"S": str(SEQ)}, {"S": str(WIDE)})
    assert stored["Item"]["partition"] == {"S": SHARD}


def test_objects_of_a_later_epoch_and_of_kafka_partitions_share_an_hour(ledger: DynamoDBLedger) -> None:
    def commit(partition: int | str, first: int, last: int, epoch: int) -> CommittedObject:
        previous = ledger.load("orders", partition)
        committed = CommittedObject(
            "orders", partition, "raw", HOUR, f"k-{partition}-{epoch}-{first}", first, last, 1, 1, "", T0, epoch
        )
        ledger.commit(replace(previous, version=previous.version + 1, updated_ms=T0), previous, committed)
        return committed

    kinesis_0 = commit(SHARD, SEQ, SEQ, 0)
    kinesis_1 = commit(SHARD, SEQ, SEQ, 1)  # the same position in a later epoch is another object
    kafka = commit(6, 100, 199, 0)
    found = ledger.committed_objects("orders", HOUR)
    assert sorted(found, key=lambda c: c.key) == sorted([kinesis_0, kinesis_1, kafka], key=lambda c: c.key)
    assert ledger.committed_object("orders", HOUR, "raw", SHARD, SEQ, epoch=1) == kinesis_1
    assert ledger.committed_object("orders", HOUR, "raw", SHARD, SEQ) == kinesis_0
    assert ledger.committed_object("orders", HOUR, "raw", 6, 100) == kafka
