"""The local Kinesis event source mapping against moto's Kinesis (resharding as Kinesis does it)
and the real archiver handler in process: Lambda's delivery contract for Kinesis -- one shard per
event, batch limits, checkpoint only after success, whole-batch retry, parents before children
-- and, read back from S3, every record archived exactly once."""

from __future__ import annotations

import io
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import REPO, Archive
from tests.support.harness import example_config_data
from tidemark.config import TidemarkConfig, parse_config
from tidemark.config.loader import ENV_JSON
from tidemark.embedded.esm.batching import BatchLimits
from tidemark.embedded.esm.invokers import InProcessInvoker, Invocation
from tidemark.embedded.esm.kinesis_mapping import KinesisEventSourceMapping, KinesisMappingConfig
from tidemark.embedded.esm.mapping import DeliveryError
from tidemark.embedded.kinesis_stream import (
    StreamRef,
    create_stream,
    kinesis_client,
    list_shards,
    put_orders,
    split_shard,
    wait_active,
)
from tidemark.embedded.lambda_runtime import HandlerRef
from tidemark.embedded.workload import WorkloadSpec, generate
from tidemark.records.kinesis import parse_kinesis_event
from tidemark.records.model import Record
from tidemark.verify import ExpectedRecord, verify_archive

NOW_MS = int(time.time() * 1000)


class ScriptedArchiver:
    """The real archiver handler, in process (one warm container), behind a script: records every
    event with the mapping's checkpoints at that moment, and fails the invocations whose numbers
    are in ``fail`` (1-based) before the handler sees them."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.handler = InProcessInvoker(HandlerRef.for_function(REPO, "archiver"), io.StringIO())
        self.events: list[dict[str, Any]] = []
        self.checkpoints_seen: list[dict[str, int]] = []
        self.fail = fail or set()
        self.mapping: KinesisEventSourceMapping | None = None

    def invoke(self, event: dict[str, Any]) -> Invocation:
        self.events.append(event)
        self.checkpoints_seen.append(dict(self.mapping.checkpoints) if self.mapping else {})
        if len(self.events) in self.fail:
            return Invocation(ok=False, error="RuntimeError: scripted failure")
        return self.handler.invoke(event)


@pytest.fixture
def stream(moto_endpoint: str) -> Iterator[StreamRef]:
    ref = StreamRef.of_arn(f"arn:aws:kinesis:us-east-1:123456789012:stream/esm-{uuid.uuid4().hex[:10]}")
    client = kinesis_client(moto_endpoint, ref.region)
    create_stream(client, ref, 2)
    yield ref
    client.delete_stream(StreamName=ref.name)


@pytest.fixture
def client(moto_endpoint: str) -> Any:
    return kinesis_client(moto_endpoint, "us-east-1")


@pytest.fixture
def config(stream: StreamRef, archive: Archive, monkeypatch: pytest.MonkeyPatch) -> TidemarkConfig:
    """The example stream reading the test's Kinesis stream, with small flushes; the handler's
    environment points at the test's bucket, table and staging directory."""
    data = example_config_data()
    data.pop("dev_cluster", None)
    data["streams"][0]["source"] = {"kind": "kinesis", "stream_arn": stream.arn}
    data["streams"][0]["flush"] = {"max_records": 40, "max_bytes": "1MiB", "max_age": "15m"}
    for name, value in {**archive.env(), ENV_JSON: json.dumps(data)}.items():
        monkeypatch.setenv(name, value)
    return parse_config(data)


def put(client: Any, stream: StreamRef, count: int, seed: int) -> list[ExpectedRecord]:
    orders = generate(WorkloadSpec(records=count, hours=2, seed=seed, malformed_share=0.05), NOW_MS)
    return put_orders(client, stream, orders)


def mapping_for(
    client: Any, stream: StreamRef, invoker: ScriptedArchiver, limits: BatchLimits | None = None, **kwargs: Any
) -> KinesisEventSourceMapping:
    config = KinesisMappingConfig(
        stream.arn, limits=limits or BatchLimits(batch_size=25, window_ms=100), **kwargs.pop("config", {})
    )
    mapping = KinesisEventSourceMapping(config, client, invoker, **kwargs)
    invoker.mapping = mapping
    return mapping


def ends(expected: list[ExpectedRecord]) -> dict[str, int]:
    last: dict[str, int] = {}
    for item in expected:
        last[str(item.partition)] = max(last.get(str(item.partition), -1), item.offset)
    return last


def run_to_end(mapping: KinesisEventSourceMapping, expected: list[ExpectedRecord]) -> None:
    with mapping:
        mapping.run(lambda: mapping.caught_up(ends(expected)), idle_timeout_s=20)


def delivered(events: list[dict[str, Any]]) -> list[Record]:
    return [record for event in events for batch in parse_kinesis_event(event) for record in batch.records]


def archived_exactly_once(archive: Archive, config: TidemarkConfig, expected: list[ExpectedRecord]) -> None:
    """Drain every shard's open buffers, then read the archive back from S3."""
    runtime, stream = archive.runtime(config), config.streams[0]
    for shard in {item.partition for item in expected}:
        runtime.writer(stream, shard).drain()
    report = verify_archive(archive.s3, archive.bucket, stream.name, expected, config=stream)
    assert report.ok, report.summary()
    assert report.archived + report.dead_lettered == len(expected) and report.dead_lettered > 0


def test_one_shard_per_event_batches_within_the_size_and_every_record_archived_once(client, stream, config, archive):
    expected = put(client, stream, 130, seed=1)
    invoker = ScriptedArchiver()
    mapping = mapping_for(client, stream, invoker)

    run_to_end(mapping, expected)

    assert {item.partition for item in expected} == {"shardId-000000000000", "shardId-000000000001"}
    for event in invoker.events:
        records = event["Records"]
        assert 1 <= len(records) <= 25
        assert {r["eventID"].split(":")[0] for r in records} == {records[0]["eventID"].split(":")[0]}  # one shard
        assert {r["eventSourceARN"] for r in records} == {stream.arn}
        sequences = [int(r["kinesis"]["sequenceNumber"]) for r in records]
        assert sequences == sorted(sequences)
    got = delivered(invoker.events)
    for shard in ends(expected):  # each shard in sequence order, across batches too, each record once
        assert [r.offset for r in got if r.partition == shard] == sorted(
            item.offset for item in expected if item.partition == shard
        )
    assert mapping.stats.batches == len(invoker.events) and mapping.stats.records == 130
    assert mapping.checkpoints == ends(expected)
    archived_exactly_once(archive, config, expected)


def test_a_failed_invocation_is_retried_whole_and_checkpointed_only_after_success(client, stream, config, archive):
    expected = put(client, stream, 60, seed=2)
    invoker = ScriptedArchiver(fail={1, 2, 5})
    mapping = mapping_for(client, stream, invoker)

    run_to_end(mapping, expected)

    assert invoker.events[0] == invoker.events[1] == invoker.events[2]  # the same batch, unchanged
    assert invoker.events[4] == invoker.events[5] != invoker.events[3]  # the fifth failed, the sixth retried it
    assert invoker.checkpoints_seen[:3] == [{}, {}, {}]  # nothing checkpointed while it failed
    for event, seen in zip(invoker.events, invoker.checkpoints_seen, strict=True):
        shard, first = event["Records"][0]["eventID"].split(":")
        assert seen.get(shard, -1) < int(first)  # never checkpointed past what is being delivered
    assert mapping.stats.failed_invocations == 3 and mapping.stats.errors == ["RuntimeError: scripted failure"]
    assert Counter((r.partition, r.offset) for r in delivered(invoker.events)).most_common(1)[0][1] == 3
    archived_exactly_once(archive, config, expected)


def test_a_lost_checkpoint_redelivers_from_the_last_checkpoint_and_still_archives_once(client, stream, config, archive):
    expected = put(client, stream, 80, seed=3)
    losses = iter([False, True, False, True])
    invoker = ScriptedArchiver()
    mapping = mapping_for(client, stream, invoker, lose_checkpoint=lambda: next(losses, False))

    run_to_end(mapping, expected)

    counts = Counter((r.partition, r.offset) for r in delivered(invoker.events))
    lost = [delivered([invoker.events[1]]), delivered([invoker.events[3]])]
    assert all(counts[(r.partition, r.offset)] >= 2 for batch in lost for r in batch)
    assert sum(counts.values()) > len(expected) and set(counts) == {(i.partition, i.offset) for i in expected}
    assert (mapping.stats.lost_commits, mapping.stats.rebalances) == (2, 2)
    archived_exactly_once(archive, config, expected)


def test_after_a_split_mid_stream_the_parent_is_delivered_to_its_end_before_any_child(client, stream, config, archive):
    parent = "shardId-000000000000"
    first = put(client, stream, 80, seed=4)
    parent_records = sorted(item.offset for item in first if item.partition == parent)
    last_batch: list[Record] = []
    lost: list[int] = []

    def lose_the_parents_last_checkpoint_once() -> bool:
        """The checkpoint of the parent's last batch is lost: its children must wait for the redelivery."""
        if last_batch[-1].offset == parent_records[-1] and not lost:
            lost.append(len(invoker.events))
            return True
        return False

    invoker = ScriptedArchiver(fail={4})
    mapping = mapping_for(
        client,
        stream,
        invoker,
        BatchLimits(batch_size=10, window_ms=50),
        lose_checkpoint=lose_the_parents_last_checkpoint_once,
        on_delivered=lambda records, _result: last_batch.extend(records),
    )

    with mapping:
        mapping.run(lambda: mapping.checkpoints.get(parent, -1) >= parent_records[1], idle_timeout_s=20)
        assert mapping.checkpoints[parent] < parent_records[-1]  # the parent is mid-way
        children = split_shard(client, stream, parent)
        rest = put(client, stream, 80, seed=5)
        expected = first + rest
        mapping.run(lambda: mapping.caught_up(ends(expected)), idle_timeout_s=20)

    listed = {shard["ShardId"]: shard for shard in list_shards(client, stream.name)}
    assert "EndingSequenceNumber" in listed[parent]["SequenceNumberRange"]
    assert {listed[child]["ParentShardId"] for child in children} == {parent}
    assert not any(item.partition == parent for item in rest)  # closed: nothing more lands in the parent
    assert all(sum(item.partition == child for item in rest) > 0 for child in children)
    shards = [shard for shard, _first, _last in mapping.deliveries]
    last_parent = max(i for i, shard in enumerate(shards) if shard == parent)
    first_child = min(i for i, shard in enumerate(shards) if shard in children)
    assert last_parent < first_child
    assert len(lost) == 1 and mapping.deliveries[last_parent][2] == parent_records[-1]
    assert [d for d in mapping.deliveries if d[2] == parent_records[-1]] == [mapping.deliveries[last_parent]] * 2
    got = delivered(invoker.events)
    assert {(r.partition, r.offset) for r in got} == {(i.partition, i.offset) for i in expected}  # at least once
    assert min(r.offset for r in got if r.partition in children) > parent_records[-1]
    archived_exactly_once(archive, config, expected)


def test_latest_starts_at_the_tip_and_delivers_what_is_put_after_the_start(client, stream, config):
    before = put(client, stream, 20, seed=6)
    invoker = ScriptedArchiver()
    mapping = mapping_for(client, stream, invoker, config={"starting_position": "LATEST"})

    with mapping:
        after = put(client, stream, 30, seed=7)
        mapping.run(lambda: mapping.caught_up(ends(after)), idle_timeout_s=20)

    got = {(r.partition, r.offset) for r in delivered(invoker.events)}
    assert got == {(i.partition, i.offset) for i in after}
    assert not got & {(i.partition, i.offset) for i in before}


def test_at_timestamp_starts_at_the_first_record_put_at_or_after_it(client, stream, config):
    before = put(client, stream, 20, seed=10)
    start = datetime.now(UTC)
    after = put(client, stream, 30, seed=11)
    invoker = ScriptedArchiver()
    mapping = mapping_for(
        client, stream, invoker, config={"starting_position": "AT_TIMESTAMP", "starting_timestamp": start}
    )

    run_to_end(mapping, after)

    got = {(r.partition, r.offset) for r in delivered(invoker.events)}
    assert got == {(i.partition, i.offset) for i in after}
    assert not got & {(i.partition, i.offset) for i in before}


def test_batches_respect_the_payload_limit(client, stream, config):
    expected = put(client, stream, 40, seed=8)
    invoker = ScriptedArchiver()
    limit = 8_000
    mapping = mapping_for(client, stream, invoker, BatchLimits(batch_size=1000, window_ms=50, max_payload_bytes=limit))

    run_to_end(mapping, expected)

    assert all(len(json.dumps(event)) <= limit for event in invoker.events)
    assert len(invoker.events) > 2 and len(delivered(invoker.events)) == 40


def test_a_batch_that_keeps_failing_stops_the_mapping_with_nothing_checkpointed(client, stream, config):
    expected = put(client, stream, 10, seed=9)
    invoker = ScriptedArchiver(fail=set(range(1, 100)))
    mapping = mapping_for(client, stream, invoker, config={"max_attempts": 3})

    with pytest.raises(DeliveryError, match=r"batch of \d+ records of shardId-00000000000\d starting at sequence"):
        run_to_end(mapping, expected)

    assert len(invoker.events) == 3 and mapping.checkpoints == {}


def test_after_a_merge_mid_stream_both_parents_are_delivered_to_their_end_before_the_child(
    client, stream, config, archive
):
    parents = ["shardId-000000000000", "shardId-000000000001"]
    first = put(client, stream, 80, seed=6)
    invoker = ScriptedArchiver(fail={3})
    mapping = mapping_for(client, stream, invoker, BatchLimits(batch_size=10, window_ms=50))
    with mapping:
        mapping.run(lambda: len(mapping.deliveries) >= 3, idle_timeout_s=20)
        assert any(mapping.checkpoints.get(p, -1) < max(i.offset for i in first if i.partition == p) for p in parents)
        client.merge_shards(StreamName=stream.name, ShardToMerge=parents[0], AdjacentShardToMerge=parents[1])
        wait_active(client, stream.name)
        (child,) = [s["ShardId"] for s in list_shards(client, stream.name) if s["ShardId"] not in parents]
        rest = put(client, stream, 60, seed=7)
        expected = first + rest
        mapping.run(lambda: mapping.caught_up(ends(expected)), idle_timeout_s=20)

    assert {item.partition for item in rest} == {child}  # both parents closed: all new records in the child
    shards = [shard for shard, _first, _last in mapping.deliveries]
    assert max(i for i, shard in enumerate(shards) if shard in parents) < shards.index(child)
    got = delivered(invoker.events)
    assert {(r.partition, r.offset) for r in got} == {(i.partition, i.offset) for i in expected}  # at least once
    archived_exactly_once(archive, config, expected)
