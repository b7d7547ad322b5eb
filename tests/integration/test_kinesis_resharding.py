"""Resharding: a split and a merge in the middle of a Kinesis stream, archived exactly once; and
hour completeness that neither waits for a closed shard read to its end nor forgets one that
is not.

The mapping reads a parent shard to its end before any child (Lambda's rule, which the local
mapping keeps: tests/integration/test_local_kinesis_esm.py). Every shard has its own ledger
state, so here the shards are delivered in that order, with crashes, and the archive is
checked from S3 record by record.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

import boto3
import orjson

from tests.support.harness import EsmModel, assert_exactly_once, small_config
from tests.support.workload import make_orders
from tidemark.config import StreamConfig, parse_config
from tidemark.eventtime import hour_end_ms
from tidemark.faults import AFTER_SEAL, AFTER_UPLOAD, BEFORE_UPLOAD, CrashAt
from tidemark.records.model import Record
from tidemark.runtime import Runtime
from tidemark.sources import KINESIS
from tidemark.sweeper.completeness import CompletenessTracker

BATCH = 35


def test_split_then_merge_mid_stream_is_exactly_once(archive):
    """Shard 0 splits into 1 and 2, which merge into 3: positions grow along the lineage, each
    shard is delivered only after its parents, and crashes hit every generation."""
    config = small_config(max_records=30, kind=KINESIS)
    workload = make_orders(partitions=4, per_partition=120, hours=3, seed=13, kind=KINESIS)
    parent, left, right, merged = workload.records
    assert max(r.offset for r in workload.records[parent]) < min(r.offset for r in workload.records[left])
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    faults = [CrashAt(AFTER_SEAL), CrashAt(AFTER_UPLOAD), CrashAt(BEFORE_UPLOAD)]

    def deliver(shards: list[str]) -> None:  # round-robin over shards of one generation
        while any(esm.pending(shard) for shard in shards):
            for shard in shards:
                if esm.pending(shard):
                    esm.deliver(esm.batch(shard, BATCH), faults.pop() if faults and esm.deliveries % 3 == 2 else None)

    deliver([parent])
    deliver([left, right])
    deliver([merged])
    assert esm.crashes == 3
    archive.clock.advance(minutes=31)
    runtime = archive.runtime(config)
    for shard in workload.records:
        runtime.writer(config.streams[0], shard).maintain()
    assert_exactly_once(archive, config, esm)


HOUR = "2026-11-21T08"


class Split(NamedTuple):
    """A real (moto) stream whose one shard was split, a runtime archiving it, and the parent's
    records: one event hour, the clock 10 minutes past its end."""

    runtime: Runtime
    stream: StreamConfig
    parent: str
    children: list[str]
    records: list[Record]

    def child_accepts(self) -> None:
        """A child accepts (and flushes) a record: the mapping has read the parent to its end."""
        value = orjson.dumps({"order_id": "o-next", "created_at": "2026-11-21T09:05:00Z"})
        later = self.records[-1]._replace(partition=self.children[0], offset=self.records[-1].offset + 10**40)
        self.runtime.writer(self.stream, self.children[0]).write([later._replace(value=value)])
        self.runtime.writer(self.stream, self.children[0]).drain()


def split_stream(archive, moto_endpoint) -> Split:
    kinesis = boto3.client("kinesis", endpoint_url=moto_endpoint, region_name="us-east-1")
    name = f"orders-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=name, ShardCount=1)
    arn = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    (shard,) = kinesis.list_shards(StreamARN=arn)["Shards"]
    middle = (int(shard["HashKeyRange"]["StartingHashKey"]) + int(shard["HashKeyRange"]["EndingHashKey"])) // 2
    kinesis.split_shard(StreamName=name, ShardToSplit=shard["ShardId"], NewStartingHashKey=str(middle))
    parent = shard["ShardId"]
    children = [s["ShardId"] for s in kinesis.list_shards(StreamARN=arn)["Shards"] if s["ShardId"] != parent]
    data = small_config(kind=KINESIS, max_records=1000).model_dump(mode="json")
    data["streams"][0]["source"] = {"kind": KINESIS, "stream_arn": arn}
    config = parse_config(data)
    # The parent's records, all in one hour (a workload of one shard, renamed to the real one).
    workload = make_orders(partitions=1, per_partition=40, hours=1, bad_share=0, late_share=0, seed=3, kind=KINESIS)
    records = [r._replace(partition=parent) for r in next(iter(workload.records.values()))]
    runtime = archive.runtime(config)
    runtime.kinesis_client = kinesis
    archive.clock.advance(ms=hour_end_ms(HOUR, "UTC") + 10 * 60_000 - archive.clock.now_ms())  # 10 min past
    return Split(runtime, config.streams[0], parent, children, records)


def test_hour_completeness_skips_a_closed_shard_read_to_its_end_and_waits_for_one_that_is_not(archive, moto_endpoint):
    split = split_stream(archive, moto_endpoint)
    runtime, stream, parent, children = split.runtime, split.stream, split.parent, split.children
    runtime.writer(stream, parent).write(split.records)
    runtime.writer(stream, parent).drain()  # everything of the parent committed: it is idle
    tracker = CompletenessTracker(runtime)
    hour = f"{stream.name}/{HOUR}"

    # No child has accepted anything yet: the mapping may still owe records of the parent.
    report = tracker.run(archive.clock.now_ms())
    assert f"partition {parent} watermark" in report.waiting[hour]
    # The children were registered from ListShards although they never staged anything.
    assert runtime.ledger.partitions(stream.name) >= {parent, *children}

    split.child_accepts()
    report = tracker.run(archive.clock.now_ms())
    # The other child is open and quiet: it still holds the hour until allowed_lateness passes.
    assert f"partition {children[1]} watermark" in report.waiting[hour]
    assert parent not in report.waiting[hour]
    archive.clock.advance(minutes=61)
    report = tracker.run(archive.clock.now_ms())
    assert hour in report.completed, report.waiting


def test_a_finished_shard_with_a_quarantined_flush_still_holds_its_hour(archive, moto_endpoint):
    """Finished and idle is not enough: records of the hour set aside (quarantined) on the closed
    shard are not in the archive, so the hour must not be declared complete over them."""
    split = split_stream(archive, moto_endpoint)
    runtime, stream, parent = split.runtime, split.stream, split.parent
    runtime.writer(stream, parent).write(split.records[:20])
    runtime.writer(stream, parent).drain()
    runtime.writer(stream, parent).write(split.records[20:])
    for segment in runtime.staging.partition_dir(stream.name, parent).glob("*.seg"):  # storage damage
        data = bytearray(segment.read_bytes())
        data[20] ^= 0xFF
        segment.write_bytes(bytes(data))
    runtime.writer(stream, parent).drain()
    state = runtime.ledger.load(stream.name, parent)
    assert state.quarantined and state.idle and state.holds_hour(HOUR)
    split.child_accepts()  # the parent is finished now
    archive.clock.advance(minutes=61)
    report = CompletenessTracker(runtime).run(archive.clock.now_ms())
    assert f"{stream.name}/{HOUR}" not in report.completed
    assert report.waiting[f"{stream.name}/{HOUR}"] == f"partition {parent} still stages the hour"
