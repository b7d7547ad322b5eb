"""The local Kinesis mapping reads a child only after every parent -- also a parent it learns of
only from a child's ``ChildShards`` (created since its last ListShards). No I/O: a scripted
Kinesis client stands in."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tidemark.embedded.esm.batching import BatchLimits
from tidemark.embedded.esm.invokers import Invocation
from tidemark.embedded.esm.kinesis_mapping import KinesisEventSourceMapping, KinesisMappingConfig

ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
ARRIVAL = datetime(2026, 11, 21, 8, tzinfo=UTC)


def record(sequence: int) -> dict[str, Any]:
    return {"SequenceNumber": str(sequence), "ApproximateArrivalTimestamp": ARRIVAL, "Data": b"{}", "PartitionKey": "k"}


class FixedClock:
    def now_ms(self) -> int:
        return 1_000  # the periodic listing (every 5 s) never comes due: only _ready can list again


class ScriptedKinesis:
    """A and X at the start; meanwhile X split into B1/B2 and A merged with B1 into C. The mapping's
    first listing shows only A and X; any later one shows B1 (closed, one record) as well."""

    def __init__(self) -> None:
        self.listings = 0

    def list_shards(self, **_: Any) -> dict[str, Any]:
        self.listings += 1
        names = ["shardId-A", "shardId-X"] + (["shardId-B1"] if self.listings > 1 else [])
        return {"Shards": [{"ShardId": n, "SequenceNumberRange": {"StartingSequenceNumber": "1"}} for n in names]}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        return {"ShardIterator": kwargs["ShardId"]}

    def get_records(self, ShardIterator: str, Limit: int) -> dict[str, Any]:
        child = [{"ShardId": "shardId-C", "ParentShards": ["shardId-A", "shardId-B1"]}]
        if ShardIterator == "shardId-A":
            return {"Records": [record(10)], "ChildShards": child}
        if ShardIterator == "shardId-B1":
            return {"Records": [record(20)], "ChildShards": child}
        if ShardIterator == "shardId-C":
            return {"Records": [record(1000)], "NextShardIterator": "shardId-C-end"}
        return {"Records": [], "NextShardIterator": ShardIterator}


class Accepting:
    def invoke(self, event: dict[str, Any]) -> Invocation:
        return Invocation(ok=True, response=None)


def delivered_shards(client: ScriptedKinesis, rounds: int = 8) -> list[str]:
    """The shard of each event a mapping over ``client`` delivers in ``rounds`` polls, in order."""
    mapping = KinesisEventSourceMapping(
        KinesisMappingConfig(ARN, limits=BatchLimits(window_ms=0)),
        client,
        Accepting(),
        clock=FixedClock(),
        sleep=lambda _s: None,
    )
    mapping.start()
    for _ in range(rounds):
        mapping.poll()
    return [shard for shard, _first, _last in mapping.deliveries]


def test_a_child_waits_for_a_parent_it_learned_of_only_from_child_shards() -> None:
    client = ScriptedKinesis()
    shards = delivered_shards(client)
    assert set(shards) == {"shardId-A", "shardId-B1", "shardId-C"}
    assert shards.index("shardId-C") > max(shards.index("shardId-A"), shards.index("shardId-B1"))
    assert client.listings >= 2  # the unknown parent was looked for


def test_a_parent_no_longer_listed_has_nothing_left_to_read() -> None:
    class Expired(ScriptedKinesis):
        def list_shards(self, **_: Any) -> dict[str, Any]:  # B1 is past retention: never listed
            self.listings += 1
            return {"Shards": [{"ShardId": "shardId-A", "SequenceNumberRange": {"StartingSequenceNumber": "1"}}]}

    client = Expired()
    assert delivered_shards(client) == ["shardId-A", "shardId-C"]
    assert client.listings == 2  # looked for once, then known to be gone
