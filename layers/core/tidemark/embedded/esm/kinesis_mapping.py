"""The local Kinesis event source mapping: poll shards, invoke, checkpoint only after success.

Behaves like the Lambda event source mapping for Kinesis Data Streams (shared throughput,
``ParallelizationFactor`` 1, which is the only factor Tidemark accepts):

* each shard is read with GetShardIterator / GetRecords, starting at the mapping's starting
  position (``TRIM_HORIZON``, ``LATEST``, ``AT_TIMESTAMP``) for the shards it finds at start
  and at ``TRIM_HORIZON`` for shards created later (the children of a split or merge);
* one event holds records of ONE shard, in sequence-number order, built with
  ``records.kinesis_esm.build_kinesis_event`` (AWS's documented event shape);
* batches close at ``batch_size`` records, at the 6 MB payload limit (``kinesis_payload_size``)
  or when the batching window since the batch's first record has passed (``BatchBuilder``);
* a shard's checkpoint -- kept by the mapping itself, as the real ESM keeps its own (it is not
  a consumer group) -- moves past a batch only after the function returned; a failed
  invocation is retried with the whole batch, unchanged, until it succeeds (or ``max_attempts``
  is exhausted: ``DeliveryError``);
* parents before children: a shard is not read until each of its parents has been read to its
  end (GetRecords answered with ``ChildShards`` and no ``NextShardIterator``) and every record
  of it is checkpointed. Shards are found with ListShards and by following ``ChildShards``;
* invocations are sequential and the shards are polled round-robin, so no shard ever has two
  invocations in flight and no shard starves another.

A lost checkpoint (``lose_checkpoint``, chaos) is what happens when a shard's lease moves to
another poller before the checkpoint was written: the mapping forgets the batch it just
delivered and reads the shard again from its last checkpoint, so the batch comes again. Before
a shard's first checkpoint it resumes where this mapping first read it -- never at the starting
position again, which for ``LATEST`` would skip what was delivered but never checkpointed.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from tidemark.clock import Clock, MonotonicClock
from tidemark.embedded.esm.batching import BatchBuilder, BatchLimits
from tidemark.embedded.esm.invokers import Invocation, Invoker
from tidemark.embedded.esm.mapping import MappingError, MappingStats, invoke_whole
from tidemark.records.kinesis import STREAM_ARN
from tidemark.records.kinesis_esm import KinesisSource, build_kinesis_event, kinesis_payload_size
from tidemark.records.model import Record

logger = logging.getLogger(__name__)

STARTING_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
#: GetRecords returns at most this many records a call (the Kinesis API's maximum)
GET_RECORDS_MAX = 10_000
#: how long a round that found nothing waits before polling the shards again
POLL_INTERVAL_S = 0.2
#: how often ListShards is asked for shards the mapping has not seen (children also come with
#: ChildShards when a parent ends; the listing finds the rest, e.g. a merge's other parent)
DISCOVER_INTERVAL_MS = 5_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class KinesisMappingConfig:
    stream_arn: str
    limits: BatchLimits = field(default_factory=BatchLimits)
    starting_position: str = "TRIM_HORIZON"
    starting_timestamp: datetime | None = None  # with AT_TIMESTAMP
    max_attempts: int = 25
    invoke_identity_arn: str | None = None  # the records' invokeIdentityArn; None: KinesisSource's default

    def __post_init__(self) -> None:
        if STREAM_ARN.fullmatch(self.stream_arn) is None:
            raise MappingError(f"{self.stream_arn!r} is not a Kinesis stream ARN")
        if self.starting_position not in STARTING_POSITIONS:
            raise MappingError(f"starting_position must be one of {list(STARTING_POSITIONS)}")
        if (self.starting_position == "AT_TIMESTAMP") != (self.starting_timestamp is not None):
            raise MappingError("starting_timestamp goes with starting_position AT_TIMESTAMP, and only with it")
        if self.max_attempts < 1:
            raise MappingError("max_attempts must be at least 1")

    @property
    def stream_name(self) -> str:
        return self.stream_arn.rsplit("/", 1)[1]

    def source(self) -> KinesisSource:
        if self.invoke_identity_arn is None:
            return KinesisSource(self.stream_arn)
        return KinesisSource(self.stream_arn, self.invoke_identity_arn)


@dataclass
class ShardState:
    """What the mapping knows of one shard: where it reads, what it holds, what it checkpointed."""

    shard_id: str
    parents: tuple[str, ...]
    builder: BatchBuilder
    initial: bool  # listed when the mapping started: read from the starting position
    fetched: deque[Record] = field(default_factory=deque)  # read, not yet in a batch
    iterator: str | None = None  # the next GetRecords iterator (None: get one)
    checkpoint: int | None = None  # sequence number of the last record delivered successfully
    first_seen: int | None = None  # the first sequence number this mapping read here
    last_read: int | None = None  # the last sequence number read (fetched, batched or delivered)
    ended: bool = False  # read to its end: GetRecords gave no NextShardIterator (a closed shard)
    finished: bool = False  # ended, and every record of it checkpointed
    children: tuple[str, ...] = ()

    @property
    def holding(self) -> bool:
        """Records read from the shard but not yet checkpointed."""
        return bool(self.fetched or self.builder.records)


def record_of(raw: Mapping[str, Any], stream: str, shard_id: str) -> Record:
    """A GetRecords record as the common record (what the ESM would base64-encode)."""
    arrival = raw["ApproximateArrivalTimestamp"]
    if arrival.tzinfo is None:
        arrival = arrival.replace(tzinfo=UTC)
    return Record(
        stream,
        shard_id,
        int(raw["SequenceNumber"]),
        (arrival - _EPOCH) // _MS,  # whole milliseconds, exactly (no float product)
        bytes(raw["Data"]),
        str(raw["PartitionKey"]).encode("utf-8"),
    )


class KinesisEventSourceMapping:
    def __init__(
        self,
        config: KinesisMappingConfig,
        client: Any,  # boto3's Kinesis client
        invoker: Invoker,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        lose_checkpoint: Callable[[], bool] = lambda: False,
        on_delivered: Callable[[list[Record], Invocation], None] | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self.invoker = invoker
        self.clock = clock or MonotonicClock()
        self.stats = MappingStats()
        self.shards: dict[str, ShardState] = {}
        #: shard id -> sequence number of the last record checkpointed (what ``run`` waits on)
        self.checkpoints: dict[str, int] = {}
        #: every event in the order it was invoked, as (shard id, first, last sequence number)
        self.deliveries: list[tuple[str, int, int]] = []
        self._sleep = sleep
        self._lose_checkpoint = lose_checkpoint
        self._on_delivered = on_delivered
        self._source = config.source()
        self._started = False
        self._discovered_ms: int | None = None
        self._turn = 0  # where the next round-robin round starts
        self._gone: set[str] = set()  # parents ListShards no longer lists: nothing left to read

    # -- shards -----------------------------------------------------------------------------------

    def start(self) -> KinesisEventSourceMapping:
        """List the shards; those listed now are read from the starting position. With ``LATEST``
        their iterators are taken right away, so records put after ``start`` are delivered."""
        if not self._started:
            self._started = True
            self.discover(initial=True)
            for shard in self.shards.values():
                if not shard.finished and self._ready(shard):
                    shard.iterator = self._iterator(shard)
        return self

    def __enter__(self) -> KinesisEventSourceMapping:
        return self.start()

    def __exit__(self, *_: object) -> None:
        return None

    def discover(self, *, initial: bool = False) -> None:
        """Add the shards ListShards shows that the mapping does not know yet."""
        listed: list[dict[str, Any]] = []
        reply = self.client.list_shards(StreamName=self.config.stream_name)
        listed += reply["Shards"]
        while reply.get("NextToken"):
            reply = self.client.list_shards(NextToken=reply["NextToken"])
            listed += reply["Shards"]
        for shard in sorted(listed, key=lambda item: str(item["ShardId"])):
            parents = tuple(p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p)
            state = self._add(shard["ShardId"], parents, initial=initial)
            closed = "EndingSequenceNumber" in shard["SequenceNumberRange"]
            if initial and closed and self.config.starting_position == "LATEST":
                state.finished = True  # LATEST starts at the tip: what closed shards hold is behind it
        self._discovered_ms = self.clock.now_ms()

    def _add(self, shard_id: str, parents: Iterable[str], *, initial: bool) -> ShardState:
        state = self.shards.get(shard_id)
        if state is None:
            builder = BatchBuilder(self.config.limits, measure=kinesis_payload_size)
            state = self.shards[shard_id] = ShardState(shard_id, tuple(parents), builder, initial)
        return state

    def _ready(self, shard: ShardState) -> bool:
        """Every parent finished. A parent the mapping has not seen yet (a child learned from
        ``ChildShards`` may name one created since the last listing) is looked for with ListShards
        first; only one ListShards no longer lists (past the stream's retention) has nothing left."""
        unknown = [parent for parent in shard.parents if parent not in self.shards and parent not in self._gone]
        if unknown:
            self.discover()
            self._gone.update(parent for parent in unknown if parent not in self.shards)
        return all(parent not in self.shards or self.shards[parent].finished for parent in shard.parents)

    def _iterator(self, shard: ShardState) -> str:
        """Where to read the shard: after its checkpoint; before its first checkpoint, where this
        mapping first read it; before any read, at the starting position (children: TRIM_HORIZON)."""
        args: dict[str, Any] = {"StreamName": self.config.stream_name, "ShardId": shard.shard_id}
        if shard.last_read is not None:  # an expired iterator: carry on after what is held
            args.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=str(shard.last_read))
        elif shard.checkpoint is not None:
            args.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=str(shard.checkpoint))
        elif shard.first_seen is not None:
            args.update(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=str(shard.first_seen))
        elif not shard.initial or self.config.starting_position == "TRIM_HORIZON":
            args.update(ShardIteratorType="TRIM_HORIZON")
        elif self.config.starting_position == "LATEST":
            args.update(ShardIteratorType="LATEST")
        else:
            args.update(ShardIteratorType="AT_TIMESTAMP", Timestamp=self.config.starting_timestamp)
        iterator: str = self.client.get_shard_iterator(**args)["ShardIterator"]
        return iterator

    def _read(self, shard: ShardState) -> int:
        """One GetRecords call on the shard; the number of new records it gave."""
        if shard.iterator is None:
            shard.iterator = self._iterator(shard)
        limit = min(GET_RECORDS_MAX, self.config.limits.batch_size)
        try:
            reply = self.client.get_records(ShardIterator=shard.iterator, Limit=limit)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExpiredIteratorException":
                raise
            shard.iterator = self._iterator(shard)  # iterators expire after 5 minutes
            return 0
        new = 0
        for raw in reply["Records"]:
            record = record_of(raw, self.config.stream_name, shard.shard_id)
            if shard.last_read is not None and record.offset <= shard.last_read:
                continue  # already held or delivered
            if shard.first_seen is None:
                shard.first_seen = record.offset
            shard.last_read = record.offset
            shard.fetched.append(record)
            new += 1
        shard.iterator = reply.get("NextShardIterator")
        if shard.iterator is None:  # a closed shard, read to its end
            shard.ended = True
            children = reply.get("ChildShards") or []
            shard.children = tuple(child["ShardId"] for child in children)
            for child in children:
                self._add(child["ShardId"], child.get("ParentShards") or (shard.shard_id,), initial=False)
        return new

    def _restart(self, shard: ShardState) -> None:
        """The shard's lease moved before its checkpoint was written: forget what was read and
        read again from the last checkpoint (or where this mapping first read the shard)."""
        self.stats.rebalances += 1
        shard.fetched.clear()
        shard.builder.take()
        shard.iterator = None
        shard.last_read = None
        shard.ended = False
        shard.children = ()

    # -- polling -------------------------------------------------------------------------------

    def _due(self, shard: ShardState, now_ms: int) -> bool:
        """Send the shard's batch: it is full (a fetched record did not fit) or its window has
        passed, or the shard has ended and nothing more will come."""
        builder = shard.builder
        return bool(builder.records) and (builder.ready(now_ms) or bool(shard.fetched) or shard.ended)

    def poll(self) -> bool:
        """One round over the readable shards, each read at most once and delivered at most once;
        ``True`` if anything was read or delivered (or a shard finished)."""
        now = self.clock.now_ms()
        if self._discovered_ms is None or now - self._discovered_ms >= DISCOVER_INTERVAL_MS:
            self.discover()
        ids = sorted(self.shards)
        if not ids:
            return False
        self._turn = (self._turn + 1) % len(ids)
        progressed = False
        for shard_id in ids[self._turn :] + ids[: self._turn]:
            shard = self.shards[shard_id]
            if shard.finished or not self._ready(shard):
                continue
            if not shard.fetched and not shard.ended and not shard.builder.full:
                progressed |= self._read(shard) > 0
            builder = shard.builder
            while shard.fetched and builder.offer(shard.fetched[0], self.clock.now_ms()):
                shard.fetched.popleft()
            if self._due(shard, self.clock.now_ms()):
                self.deliver(shard, builder.take())
                progressed = True
            if shard.ended and not shard.holding:
                shard.finished = True
                progressed = True
                logger.info("shard read to its end and checkpointed", extra={"shard": shard.shard_id})
        return progressed

    def _wait_s(self) -> float:
        """Until the earliest open batching window closes, at most the poll interval."""
        now = self.clock.now_ms()
        windows = [s.builder.remaining_ms(now) for s in self.shards.values() if s.builder.records]
        return max(min([POLL_INTERVAL_S * 1000, *windows]), 1) / 1000

    # -- delivery ------------------------------------------------------------------------------

    def deliver(self, shard: ShardState, records: list[Record]) -> Invocation:
        """Invoke until the batch succeeds, then checkpoint it (unless chaos loses the checkpoint)."""
        first, last = records[0].offset, records[-1].offset
        result = invoke_whole(
            self.invoker,
            build_kinesis_event(records, self._source),
            len(records),
            self.stats,
            self.config.max_attempts,
            f"batch of {len(records)} records of {shard.shard_id} starting at sequence number {first}",
        )
        self.deliveries.append((shard.shard_id, first, last))
        if self._on_delivered is not None:
            self._on_delivered(records, result)
        if self._lose_checkpoint():
            self.stats.lost_commits += 1
            self._restart(shard)  # the batch comes again
        else:
            shard.checkpoint = last
            self.checkpoints[shard.shard_id] = last
        return result

    def caught_up(self, ends: Mapping[str, int]) -> bool:
        """Every shard checkpointed at least to its sequence number in ``ends``."""
        return all(self.checkpoints.get(shard, -1) >= end for shard, end in ends.items())

    def run(self, until: Callable[[], bool], *, idle_timeout_s: float = 60.0) -> None:
        """Deliver batches until ``until()`` holds; fail if nothing arrives for ``idle_timeout_s``."""
        self.start()
        idle_since: int | None = None
        while not until():
            if self.poll():
                idle_since = None
                continue
            now = self.clock.now_ms()
            if any(shard.holding for shard in self.shards.values()):
                idle_since = None  # a batch is waiting for its window
            else:
                idle_since = now if idle_since is None else idle_since
                if now - idle_since > idle_timeout_s * 1000:
                    raise MappingError(
                        f"no records from Kinesis stream {self.config.stream_name!r} for {idle_timeout_s:.0f}s "
                        "while records are still outstanding; is the endpoint up and the stream right?"
                    )
            self._sleep(self._wait_s())
