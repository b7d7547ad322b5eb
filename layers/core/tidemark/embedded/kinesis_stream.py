"""The demo's Kinesis data stream on moto: create it, produce the workload, split a shard.

The Kinesis counterpart of ``workload.ensure_topic`` / ``workload.produce``: the stream lives on
the moto server the demo already runs (``tidemark.embedded.moto_server`` makes its resharding
behave like Kinesis). What the archive must hold is tied to what Kinesis *assigned* -- the shard
id and sequence number PutRecords reports for each record -- never to where the producer
thought a key would land, so the verification checks the real routing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3

from tidemark.embedded.aws import FAKE_CREDENTIALS
from tidemark.embedded.workload import Order
from tidemark.exceptions import TidemarkError
from tidemark.records.kinesis import STREAM_ARN
from tidemark.verify import ExpectedRecord, RecordMeta

#: boto3's Kinesis client (no type stubs are installed for it)
KinesisClient = Any

#: PutRecords takes at most 500 records and 5 MiB (data and partition keys) per call
PUT_RECORDS_MAX = 500
PUT_RECORDS_MAX_BYTES = 5 * 1024 * 1024
PUT_ATTEMPTS = 10
ACTIVE_TIMEOUT_S = 30.0


class KinesisStreamError(TidemarkError):
    """The stream could not be created, written or resharded."""


@dataclass(frozen=True, slots=True)
class StreamRef:
    """A stream as the demo addresses it: its name, region and (moto's) ARN."""

    name: str
    region: str
    arn: str

    @classmethod
    def of_arn(cls, arn: str) -> StreamRef:
        match = STREAM_ARN.fullmatch(arn)
        if match is None:
            raise KinesisStreamError(f"{arn!r} is not a Kinesis stream ARN")
        return cls(arn.rsplit("/", 1)[1], arn.split(":")[3], arn)


def kinesis_client(endpoint: str, region: str) -> KinesisClient:
    """A Kinesis client on the local endpoint, with the fake credentials every local client uses."""
    return boto3.client(
        "kinesis",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=FAKE_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=FAKE_CREDENTIALS["aws_secret_access_key"],
        aws_session_token=FAKE_CREDENTIALS["aws_session_token"],
    )


def wait_active(client: KinesisClient, name: str, timeout_s: float = ACTIVE_TIMEOUT_S) -> None:
    """Poll until the stream is ACTIVE (after CreateStream, SplitShard, MergeShards)."""
    deadline = time.monotonic() + timeout_s
    while True:
        summary = client.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        if summary["StreamStatus"] == "ACTIVE":
            return
        if time.monotonic() > deadline:
            raise KinesisStreamError(f"stream {name!r} is still {summary['StreamStatus']} after {timeout_s:.0f}s")
        time.sleep(0.05)


def list_shards(client: KinesisClient, name: str) -> list[dict[str, Any]]:
    """Every shard of the stream, closed ones included (ListShards, all pages), by shard id."""
    shards: list[dict[str, Any]] = []
    reply = client.list_shards(StreamName=name)
    shards += reply["Shards"]
    while reply.get("NextToken"):
        reply = client.list_shards(NextToken=reply["NextToken"])
        shards += reply["Shards"]
    return sorted(shards, key=lambda shard: str(shard["ShardId"]))


def is_open(shard: dict[str, Any]) -> bool:
    return "EndingSequenceNumber" not in shard["SequenceNumberRange"]


def _holds_records(client: KinesisClient, name: str, shard_id: str) -> bool:
    iterator = client.get_shard_iterator(StreamName=name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
    return bool(client.get_records(ShardIterator=iterator["ShardIterator"], Limit=1)["Records"])


def create_stream(client: KinesisClient, stream: StreamRef, shards: int) -> list[str]:
    """Create the stream with ``shards`` shards and wait until it is ACTIVE; return the shard ids.

    An existing stream is used only if it holds no records: the report compares the archive with
    what this run produced, and records of an earlier run would be "unexpected"."""
    existing = client.list_streams()["StreamNames"]
    if stream.name in existing:
        ids = [shard["ShardId"] for shard in list_shards(client, stream.name)]
        if any(_holds_records(client, stream.name, shard_id) for shard_id in ids):
            raise KinesisStreamError(
                f"Kinesis stream {stream.name!r} already holds records; the demo needs an empty stream: "
                "pass --topic with a new name"
            )
    else:
        client.create_stream(StreamName=stream.name, ShardCount=shards)
    wait_active(client, stream.name)
    arn = client.describe_stream_summary(StreamName=stream.name)["StreamDescriptionSummary"]["StreamARN"]
    if arn != stream.arn:
        raise KinesisStreamError(
            f"the endpoint created {arn}, but the config's source.stream_arn is {stream.arn}: the records' "
            "eventSourceARN would name another stream (moto's account is 123456789012; use that account "
            "and the region of the endpoint in the ARN)"
        )
    return [shard["ShardId"] for shard in list_shards(client, stream.name)]


def _chunks(orders: Iterable[Order]) -> Iterator[list[Order]]:
    """PutRecords calls: at most 500 records and 5 MiB each."""
    chunk: list[Order] = []
    size = 0
    for order in orders:
        bytes_of = len(order.payload) + len(order.key)
        if chunk and (len(chunk) == PUT_RECORDS_MAX or size + bytes_of > PUT_RECORDS_MAX_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(order)
        size += bytes_of
    if chunk:
        yield chunk


def put_orders(
    client: KinesisClient,
    stream: StreamRef,
    orders: Iterable[Order],
    *,
    on_progress: Callable[[int], None] | None = None,
) -> list[ExpectedRecord]:
    """Put every order (partition key: the order's key, its customer id); return what the archive
    must hold, keyed by the shard id and sequence number Kinesis assigned to each record.

    Entries PutRecords reports as failed (throttling) are put again, a bounded number of times;
    Kinesis records have no headers, so the expectation carries none."""
    expected: list[ExpectedRecord] = []
    sent = 0
    for chunk in _chunks(orders):
        pending = chunk
        for _attempt in range(PUT_ATTEMPTS):
            entries = [{"Data": order.payload, "PartitionKey": order.key.decode("utf-8")} for order in pending]
            reply = client.put_records(StreamName=stream.name, Records=entries)
            failed: list[Order] = []
            for order, entry in zip(pending, reply["Records"], strict=True):
                if "ErrorCode" in entry:
                    failed.append(order)
                    continue
                meta = RecordMeta(stream.name, order.key, ())
                position = int(entry["SequenceNumber"])
                expected.append(ExpectedRecord(entry["ShardId"], position, order.value, order.hour, meta))
            pending = failed
            if not pending:
                break
            time.sleep(0.1)  # throttled: back off before putting the rest again
        if pending:
            raise KinesisStreamError(
                f"{len(pending)} records were not accepted by {stream.name!r} after {PUT_ATTEMPTS} attempts"
            )
        sent += len(chunk)
        if on_progress is not None:
            on_progress(sent)
    return expected


def split_shard(client: KinesisClient, stream: StreamRef, shard_id: str) -> list[str]:
    """Split ``shard_id`` at the midpoint of its hash key range; return its two children.

    The parent is closed (it keeps its records and ends), new records go to the children by
    hash key, and a reader must finish the parent before it reads a child."""
    shards = {shard["ShardId"]: shard for shard in list_shards(client, stream.name)}
    shard = shards.get(shard_id)
    if shard is None or not is_open(shard):
        raise KinesisStreamError(f"cannot split {shard_id!r} of {stream.name!r}: not an open shard")
    start, end = int(shard["HashKeyRange"]["StartingHashKey"]), int(shard["HashKeyRange"]["EndingHashKey"])
    client.split_shard(StreamName=stream.name, ShardToSplit=shard_id, NewStartingHashKey=str((start + end + 1) // 2))
    wait_active(client, stream.name)
    children = [
        child["ShardId"]
        for child in list_shards(client, stream.name)
        if shard_id in (child.get("ParentShardId"), child.get("AdjacentParentShardId"))
    ]
    if len(children) != 2:
        raise KinesisStreamError(f"splitting {shard_id!r} gave children {children}, expected two")
    return children
