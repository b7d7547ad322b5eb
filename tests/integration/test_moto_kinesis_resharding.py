"""Kinesis resharding on the moto server that ``tidemark.embedded.moto_server`` launches, read
back through boto3 as a consumer would: after SplitShard or MergeShards the closed parents keep
their records and end (ChildShards, no NextShardIterator), new records go only to the children
(by hash key), children's sequence numbers follow their parents', and every record is read once.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from tidemark.embedded.kinesis_stream import wait_active

MAX_HASH_KEY = 2**128 - 1


@dataclass(frozen=True)
class Put:
    partition_key: str
    data: bytes
    hash_key: int  # where Kinesis routes it: ExplicitHashKey, or the MD5 of the partition key
    shard_id: str  # as PutRecord(s) reported it
    sequence_number: int


@dataclass
class ShardRead:
    records: list[dict[str, Any]]
    pages: list[dict[str, Any]]  # every GetRecords response, in order

    @property
    def items(self) -> Counter[tuple[str, bytes]]:
        return Counter((record["PartitionKey"], record["Data"]) for record in self.records)

    @property
    def sequence_numbers(self) -> list[int]:
        return [int(record["SequenceNumber"]) for record in self.records]


def md5_hash_key(partition_key: str) -> int:
    return int(hashlib.md5(partition_key.encode("utf-8")).hexdigest(), 16)


@pytest.fixture
def kinesis(moto_endpoint: str) -> Any:
    return boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")


@pytest.fixture
def stream(kinesis: Any) -> Iterator[str]:
    name = f"resharding-{uuid.uuid4().hex[:12]}"
    kinesis.create_stream(StreamName=name, ShardCount=2)
    wait_active(kinesis, name)
    yield name
    kinesis.delete_stream(StreamName=name)


def put(kinesis: Any, stream: str, tag: str, count: int, explicit_hash_keys: tuple[int, ...] = ()) -> list[Put]:
    """``count`` records keyed ``tag-i`` (half through PutRecords, half through PutRecord), then one
    record per explicit hash key. Every record's data is unique."""
    specs: list[tuple[str, bytes, int | None]] = [(f"{tag}-{i}", f"{tag}/{i}".encode(), None) for i in range(count)]
    specs += [(f"{tag}-explicit-{i}", f"{tag}/explicit/{i}".encode(), key) for i, key in enumerate(explicit_hash_keys)]
    batch, singles = specs[: count // 2], specs[count // 2 :]
    puts: list[Put] = []
    if batch:
        reply = kinesis.put_records(StreamName=stream, Records=[{"PartitionKey": k, "Data": d} for k, d, _ in batch])
        assert reply.get("FailedRecordCount", 0) == 0
        for (key, data, _), entry in zip(batch, reply["Records"], strict=True):
            puts.append(Put(key, data, md5_hash_key(key), entry["ShardId"], int(entry["SequenceNumber"])))
    for key, data, explicit in singles:
        extra: dict[str, str] = {} if explicit is None else {"ExplicitHashKey": str(explicit)}
        entry = kinesis.put_record(StreamName=stream, PartitionKey=key, Data=data, **extra)
        hash_key = md5_hash_key(key) if explicit is None else explicit
        puts.append(Put(key, data, hash_key, entry["ShardId"], int(entry["SequenceNumber"])))
    return puts


def read_shard(kinesis: Any, stream: str, shard_id: str, limit: int = 3) -> ShardRead:
    """From TRIM_HORIZON, following NextShardIterator, ``limit`` records a call: to the shard's end
    (no NextShardIterator) or, on an open shard, until a call returns nothing."""
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    read = ShardRead([], [])
    for _ in range(1000):
        page = kinesis.get_records(ShardIterator=iterator, Limit=limit)
        read.pages.append(page)
        read.records += page["Records"]
        iterator = page.get("NextShardIterator")
        if iterator is None or not page["Records"]:
            return read
    raise AssertionError(f"{shard_id} never ended")


def list_shards(kinesis: Any, stream: str) -> dict[str, dict[str, Any]]:
    listed = {shard["ShardId"]: shard for shard in kinesis.list_shards(StreamName=stream)["Shards"]}
    described = {s["ShardId"]: s for s in kinesis.describe_stream(StreamName=stream)["StreamDescription"]["Shards"]}
    assert described == listed
    return listed


def hash_range(shard: dict[str, Any]) -> range:
    keys = shard["HashKeyRange"]
    return range(int(keys["StartingHashKey"]), int(keys["EndingHashKey"]) + 1)


def items(puts: list[Put]) -> Counter[tuple[str, bytes]]:
    return Counter((p.partition_key, p.data) for p in puts)


def assert_ends_with_children(read: ShardRead, parent: str, children: list[dict[str, Any]]) -> None:
    """The last call (and only it) ends the shard: ChildShards naming exactly ``children``."""
    *before_end, end = read.pages
    assert "NextShardIterator" not in end
    assert all("ChildShards" not in page and page.get("NextShardIterator") for page in before_end)
    expected = [
        {
            "ShardId": child["ShardId"],
            "ParentShards": [p for p in (child.get("ParentShardId"), child.get("AdjacentParentShardId")) if p],
            "HashKeyRange": child["HashKeyRange"],
        }
        for child in children
    ]
    key = lambda child: child["ShardId"]  # noqa: E731
    assert sorted(end["ChildShards"], key=key) == sorted(expected, key=key)
    assert all(parent in child["ParentShards"] for child in end["ChildShards"])


def assert_read_exactly_once(reads: dict[str, ShardRead], puts: list[Put]) -> None:
    everything: Counter[tuple[str, bytes]] = Counter()
    for read in reads.values():
        everything += read.items
    assert everything == items(puts)


def test_split_shard_closes_the_parent_and_routes_new_records_to_the_children(kinesis: Any, stream: str) -> None:
    shards = list_shards(kinesis, stream)
    assert len(shards) == 2
    parent_id, sibling_id = sorted(shards)
    parent_range = hash_range(shards[parent_id])
    before = put(kinesis, stream, "before-split", 40)
    assert {p.shard_id for p in before} == {parent_id, sibling_id}  # both shards have records to keep

    midpoint = (parent_range.start + parent_range.stop) // 2
    kinesis.split_shard(StreamName=stream, ShardToSplit=parent_id, NewStartingHashKey=str(midpoint))
    wait_active(kinesis, stream)
    # Both bounds of both children (EndingHashKey is inclusive), and the last key of the keyspace.
    edges = (parent_range.start, midpoint - 1, midpoint, parent_range.stop - 1, MAX_HASH_KEY)
    after = put(kinesis, stream, "after-split", 60, explicit_hash_keys=edges)

    shards = list_shards(kinesis, stream)
    children = [shard for shard in shards.values() if shard.get("ParentShardId") == parent_id]
    low, high = sorted(children, key=lambda child: int(child["HashKeyRange"]["StartingHashKey"]))
    assert (hash_range(low), hash_range(high)) == (
        range(parent_range.start, midpoint),
        range(midpoint, parent_range.stop),
    )
    assert all("AdjacentParentShardId" not in child for child in children)
    assert sorted(shards) == sorted([parent_id, sibling_id, low["ShardId"], high["ShardId"]])

    # New records go by hash key to the open shard holding it: never to the closed parent.
    def owner(hash_key: int) -> str:
        return str(next(s for s in (low, high, shards[sibling_id]) if hash_key in hash_range(s))["ShardId"])

    assert all(p.shard_id == owner(p.hash_key) for p in after)
    assert {p.shard_id for p in after} == {low["ShardId"], high["ShardId"], sibling_id}

    reads = {shard_id: read_shard(kinesis, stream, shard_id) for shard_id in shards}
    parent = reads[parent_id]
    before_in_parent = [p for p in before if p.hash_key in parent_range]
    assert parent.items == items(before_in_parent)
    assert parent.sequence_numbers == sorted(p.sequence_number for p in before_in_parent)  # not renumbered
    assert len(parent.pages) > 1  # several calls before the end, so "only the last call ends it" is tested
    assert_ends_with_children(parent, parent_id, [low, high])
    for child in (low, high):
        assert reads[child["ShardId"]].items == items([p for p in after if p.shard_id == child["ShardId"]])
        assert min(reads[child["ShardId"]].sequence_numbers) > max(parent.sequence_numbers)
        assert "ChildShards" not in reads[child["ShardId"]].pages[-1]
    sibling = reads[sibling_id]
    assert sibling.items == items([p for p in before + after if p.shard_id == sibling_id])
    assert sibling.pages[-1].get("NextShardIterator") and "ChildShards" not in sibling.pages[-1]
    assert_read_exactly_once(reads, before + after)

    ending = shards[parent_id]["SequenceNumberRange"]["EndingSequenceNumber"]
    assert int(ending) == max(parent.sequence_numbers)
    for shard_id in (low["ShardId"], high["ShardId"], sibling_id):
        assert "EndingSequenceNumber" not in shards[shard_id]["SequenceNumberRange"]
    for child in (low, high):
        assert int(child["SequenceNumberRange"]["StartingSequenceNumber"]) > int(ending)

    # A reader that starts at the closed parent's tip is at its end straight away.
    latest = kinesis.get_shard_iterator(StreamName=stream, ShardId=parent_id, ShardIteratorType="LATEST")
    at_end = kinesis.get_records(ShardIterator=latest["ShardIterator"])
    assert at_end["Records"] == [] and "NextShardIterator" not in at_end
    assert {child["ShardId"] for child in at_end["ChildShards"]} == {low["ShardId"], high["ShardId"]}


def test_merge_shards_closes_both_parents_and_routes_new_records_to_the_child(kinesis: Any, stream: str) -> None:
    first_id, second_id = sorted(list_shards(kinesis, stream))
    before = put(kinesis, stream, "before-merge", 40)
    assert {p.shard_id for p in before} == {first_id, second_id}

    kinesis.merge_shards(StreamName=stream, ShardToMerge=first_id, AdjacentShardToMerge=second_id)
    wait_active(kinesis, stream)
    after = put(kinesis, stream, "after-merge", 30, explicit_hash_keys=(0, MAX_HASH_KEY))

    shards = list_shards(kinesis, stream)
    assert len(shards) == 3
    (child,) = [shard for shard_id, shard in shards.items() if shard_id not in (first_id, second_id)]
    assert child["ParentShardId"] == first_id and child["AdjacentParentShardId"] == second_id
    assert hash_range(child) == range(0, MAX_HASH_KEY + 1)
    assert "EndingSequenceNumber" not in child["SequenceNumberRange"]
    assert {p.shard_id for p in after} == {child["ShardId"]}

    reads = {shard_id: read_shard(kinesis, stream, shard_id) for shard_id in shards}
    child_read = reads[child["ShardId"]]
    assert child_read.items == items(after)
    for parent_id in (first_id, second_id):
        parent = reads[parent_id]
        kept = [p for p in before if p.shard_id == parent_id]
        assert parent.items == items(kept)
        assert parent.sequence_numbers == [p.sequence_number for p in kept]
        assert_ends_with_children(parent, parent_id, [child])
        ending = int(shards[parent_id]["SequenceNumberRange"]["EndingSequenceNumber"])
        assert ending == max(parent.sequence_numbers)
        assert min(child_read.sequence_numbers) > ending
        assert int(child["SequenceNumberRange"]["StartingSequenceNumber"]) > ending
    assert_read_exactly_once(reads, before + after)

    # The parents are closed for good: neither a second merge nor a split takes them.
    with pytest.raises(kinesis.exceptions.InvalidArgumentException):
        kinesis.merge_shards(StreamName=stream, ShardToMerge=first_id, AdjacentShardToMerge=second_id)
    with pytest.raises(kinesis.exceptions.InvalidArgumentException):
        kinesis.split_shard(StreamName=stream, ShardToSplit=first_id, NewStartingHashKey=str(2**126))
    assert len(list_shards(kinesis, stream)) == 3


def test_sequence_numbers_grow_along_the_lineage_through_an_empty_child(kinesis: Any, stream: str) -> None:
    """Split, then merge the two children back while one of them never received a record."""
    root_id = sorted(list_shards(kinesis, stream))[0]
    root_range = hash_range(list_shards(kinesis, stream)[root_id])
    midpoint = (root_range.start + root_range.stop) // 2
    puts = put(kinesis, stream, "root", 20)
    kinesis.split_shard(StreamName=stream, ShardToSplit=root_id, NewStartingHashKey=str(midpoint))
    wait_active(kinesis, stream)
    low, high = sorted(
        (s for s in list_shards(kinesis, stream).values() if s.get("ParentShardId") == root_id),
        key=lambda child: int(child["HashKeyRange"]["StartingHashKey"]),
    )
    puts += put(kinesis, stream, "low-only", 0, explicit_hash_keys=(root_range.start, midpoint - 1))
    kinesis.merge_shards(StreamName=stream, ShardToMerge=low["ShardId"], AdjacentShardToMerge=high["ShardId"])
    wait_active(kinesis, stream)
    puts += put(kinesis, stream, "merged", 20)

    shards = list_shards(kinesis, stream)
    (merged,) = [s for s in shards.values() if s.get("AdjacentParentShardId") == high["ShardId"]]
    reads = {shard_id: read_shard(kinesis, stream, shard_id) for shard_id in shards}
    assert reads[high["ShardId"]].records == []
    assert len(reads[low["ShardId"]].records) == 2
    assert_read_exactly_once(reads, puts)

    for shard_id, shard in shards.items():
        numbers = shard["SequenceNumberRange"]
        if "EndingSequenceNumber" in numbers:  # closed: ends once read, whether or not it has records
            assert int(numbers["StartingSequenceNumber"]) <= int(numbers["EndingSequenceNumber"])
            assert_ends_with_children(
                reads[shard_id],
                shard_id,
                [s for s in shards.values() if shard_id in (s.get("ParentShardId"), s.get("AdjacentParentShardId"))],
            )
        for parent_id in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")):
            if parent_id is None:
                continue
            parent_end = int(shards[parent_id]["SequenceNumberRange"]["EndingSequenceNumber"])
            assert int(numbers["StartingSequenceNumber"]) > parent_end
            assert all(number > parent_end for number in reads[shard_id].sequence_numbers)
            assert all(number <= parent_end for number in reads[parent_id].sequence_numbers)
    assert sorted(s["ShardId"] for s in shards.values() if "EndingSequenceNumber" not in s["SequenceNumberRange"]) == (
        sorted([merged["ShardId"], sorted(shards)[1]])
    )
