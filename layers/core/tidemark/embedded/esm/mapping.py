"""The local event source mapping: poll a consumer group, invoke, commit only after success.

Behaves like the Lambda event source mapping for MSK / self-managed Kafka:

* batches close at ``batch_size`` records, at the 6 MB payload limit, or when the batching
  window since the batch's first record has passed (``batching.BatchBuilder``);
* one event per batch, records grouped by ``topic-partition``, key and value base64, headers
  as byte arrays (``tidemark.records.esm``);
* offsets are committed to the consumer group only after the function returned;
* a failed invocation is retried with the whole batch, unchanged, until it succeeds (or
  ``max_attempts`` is exhausted, which stops the mapping with ``DeliveryError``: a local safety,
  AWS would keep retrying) -- unless the retries are bounded: ``retry_attempts``, or AWS's 10
  when an on-failure destination is set and they are not ("When you configure both infinite
  retries and an on-failure destination, Lambda automatically applies a maximum of 10 retry
  attempts", https://docs.aws.amazon.com/lambda/latest/dg/kafka-on-failure-destination.html).
  Then, retries exhausted, the batch goes to the destination (``OnFailureDestination``) -- or is
  dropped without one -- its offsets are committed and the mapping moves on, as AWS does;
* invocations are sequential, so no partition ever has two invocations in flight;
* with a schema registry integration (``MappingConfig.registry``, ``registry.py``), each batch is
  validated and decoded first: records the integration rejects are not delivered, but their
  offsets are committed with the batch's (AWS moves past them), and a batch left empty is
  committed without an invocation. They go to the on-failure destination with their reason, or
  are dropped without one (Using schema registries with Kafka event sources in Lambda). The
  batch limits apply to the records as fetched, before decoding (a decoded JSON value is larger
  than its Avro bytes).

A "rebalance" (``rebalance()``) closes the consumer and joins the group again, so delivery
restarts from the committed offsets -- what happens to a real ESM when brokers or pollers move.
An expiry (``expire_offsets()``) deletes the group's committed offsets, as Kafka does after the
group has been empty for ``offsets.retention.minutes``: delivery restarts at the starting position.
Whenever partitions are (re)assigned, each one resumes at its committed offset or, before its
first commit, at the first offset this mapping ever saw there -- never at ``auto.offset.reset``
again, which for ``LATEST`` would skip what was delivered but not yet committed. Records below a
partition's next expected offset (left over from before a rebalance) are dropped, so each
partition's records are delivered in offset order.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tidemark.clock import Clock, MonotonicClock
from tidemark.embedded.esm.batching import BatchBuilder, BatchLimits, gather
from tidemark.embedded.esm.invokers import Invocation, Invoker
from tidemark.embedded.kafka_clients import client_settings
from tidemark.exceptions import TidemarkError
from tidemark.records.esm import EventSource, build_event
from tidemark.records.model import Record
from tidemark.sources import PartitionId

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message, TopicPartition

    from tidemark.embedded.esm.registry import RegistryDecoder

logger = logging.getLogger(__name__)

STARTING_POSITIONS = {"TRIM_HORIZON": "earliest", "LATEST": "latest"}


class MappingError(TidemarkError):
    """The local event source mapping cannot go on."""


class DeliveryError(MappingError):
    """A batch failed ``max_attempts`` times in a row (the function keeps erroring)."""


#: the retries AWS applies to a Kafka mapping with an on-failure destination and unbounded retries
AWS_RETRIES_WITH_DESTINATION = 10


class OnFailureDestination(Protocol):
    """Where a mapping sends what it gives up on (AWS: an S3 bucket, SNS topic, SQS queue or Kafka
    topic): a batch whose retries are exhausted, or records its registry integration rejected."""

    def send(self, records: list[Record], reason: str, detail: str) -> None: ...


@dataclass(frozen=True, slots=True)
class MappingConfig:
    bootstrap_servers: str
    topic: str
    group_id: str
    limits: BatchLimits = field(default_factory=BatchLimits)
    starting_position: str = "TRIM_HORIZON"
    max_attempts: int = 25
    event_source: EventSource | None = None  # defaults to a self-managed Kafka source
    registry: RegistryDecoder | None = None  # the schema registry integration (source.schema_registry)
    #: MaximumRetryAttempts (``None``: unbounded, AWS's -1) and the on-failure destination
    retry_attempts: int | None = None
    on_failure: OnFailureDestination | None = None

    @property
    def retry_limit(self) -> int | None:
        """The retries after which a failing batch is given up on (``None``: never), by AWS's rule."""
        if self.retry_attempts is None and self.on_failure is not None:
            return AWS_RETRIES_WITH_DESTINATION
        return self.retry_attempts

    def __post_init__(self) -> None:
        if self.starting_position not in STARTING_POSITIONS:
            raise MappingError(f"starting_position must be one of {sorted(STARTING_POSITIONS)}")
        if self.max_attempts < 1:
            raise MappingError("max_attempts must be at least 1")

    def source(self) -> EventSource:
        return self.event_source or EventSource(self.bootstrap_servers, event_source="SelfManagedKafka")

    def consumer_settings(self) -> dict[str, Any]:
        settings = {
            "group.id": self.group_id,
            "client.id": "tidemark-local-esm",
            "enable.auto.commit": False,
            "auto.offset.reset": STARTING_POSITIONS[self.starting_position],
            # A short session keeps the group join (and every rebalance) to a few seconds.
            "session.timeout.ms": 6000,
            # One invocation may take as long as Lambda allows (15 min) without losing the group.
            "max.poll.interval.ms": 900_000,
            "enable.partition.eof": False,
        }
        return client_settings(self.bootstrap_servers, **settings)


@dataclass
class MappingStats:
    batches: int = 0  # distinct batches delivered successfully
    records: int = 0  # records in those batches (redeliveries count again)
    invocations: int = 0
    failed_invocations: int = 0
    crashed_invocations: int = 0
    rebalances: int = 0
    lost_commits: int = 0  # commits that failed or were dropped; the batch is delivered again
    max_batch: int = 0
    errors: list[str] = field(default_factory=list)  # distinct function errors seen
    registry_rejected: int = 0  # records the registry integration did not deliver (redeliveries count again)
    registry_reasons: dict[str, int] = field(default_factory=dict)  # those records by AWS's reason
    #: the records the registry integration did not deliver, each once however often it came again, by reason
    registry_rejected_records: dict[str, int] = field(default_factory=dict)
    abandoned_batches: int = 0  # batches given up on after their retries (AWS's rule)
    abandoned_records: int = 0
    offset_expiries: int = 0  # the group's committed offsets expired (``expire_offsets``)

    def plus(self, other: MappingStats) -> MappingStats:
        """Both mappings' deliveries (the demo runs a second one after recreating its topic)."""
        return MappingStats(
            batches=self.batches + other.batches,
            records=self.records + other.records,
            invocations=self.invocations + other.invocations,
            failed_invocations=self.failed_invocations + other.failed_invocations,
            crashed_invocations=self.crashed_invocations + other.crashed_invocations,
            rebalances=self.rebalances + other.rebalances,
            lost_commits=self.lost_commits + other.lost_commits,
            max_batch=max(self.max_batch, other.max_batch),
            errors=[*self.errors, *(error for error in other.errors if error not in self.errors)],
            registry_rejected=self.registry_rejected + other.registry_rejected,
            registry_reasons={
                reason: self.registry_reasons.get(reason, 0) + other.registry_reasons.get(reason, 0)
                for reason in sorted({*self.registry_reasons, *other.registry_reasons})
            },
            registry_rejected_records={
                reason: self.registry_rejected_records.get(reason, 0) + other.registry_rejected_records.get(reason, 0)
                for reason in sorted({*self.registry_rejected_records, *other.registry_rejected_records})
            },
            abandoned_batches=self.abandoned_batches + other.abandoned_batches,
            abandoned_records=self.abandoned_records + other.abandoned_records,
            offset_expiries=self.offset_expiries + other.offset_expiries,
        )


def invoke_whole(
    invoker: Invoker,
    event: dict[str, Any],
    records: int,
    stats: MappingStats,
    max_attempts: int,
    what: str,
    *,
    retry_limit: int | None = None,
) -> Invocation:
    """Invoke until the batch succeeds -- the same event, whole, every time, as the Lambda mapping
    retries -- counting attempts, failures and the delivered batch in ``stats``. After
    ``max_attempts`` failures the mapping stops: ``DeliveryError`` naming ``what``. With a
    ``retry_limit``, after the first attempt and that many retries the failed invocation is
    returned instead (the caller gives the batch up, as AWS does)."""
    attempts = max_attempts if retry_limit is None else min(max_attempts, retry_limit + 1)
    for attempt in range(1, attempts + 1):
        stats.invocations += 1
        result = invoker.invoke(event)
        if result.ok:
            break
        stats.failed_invocations += 1
        stats.crashed_invocations += result.crashed
        if result.error and not result.crashed and result.error not in stats.errors:
            stats.errors.append(result.error)
        logger.info("invocation failed; retrying the batch", extra={"attempt": attempt, "error": result.error})
    else:
        if retry_limit is not None and attempts == retry_limit + 1:
            stats.abandoned_batches += 1
            stats.abandoned_records += records
            logger.warning("retries exhausted; the mapping gives the batch up", extra={"batch": what})
            return result
        raise DeliveryError(f"{what} failed {max_attempts} times; last error: {result.error}")
    stats.batches += 1
    stats.records += records
    stats.max_batch = max(stats.max_batch, records)
    return result


def record_of(message: Message) -> Record:
    """A consumed message as the common record (what the ESM would base64-encode): a tombstone's
    null value and a null header value stay ``None``, never ``b""``."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    assert topic is not None and partition is not None and offset is not None
    raw_headers = message.headers() or ()
    pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
    headers = tuple((name, data.encode() if isinstance(data, str) else data) for name, data in pairs)
    return Record(topic, partition, offset, message.timestamp()[1], message.value(), message.key(), headers)


class EventSourceMapping:
    def __init__(
        self,
        config: MappingConfig,
        invoker: Invoker,
        *,
        clock: Clock | None = None,
        lose_commit: Callable[[], bool] = lambda: False,
        on_delivered: Callable[[list[Record], Invocation], None] | None = None,
    ) -> None:
        self.config = config
        self.invoker = invoker
        self.clock = clock or MonotonicClock()
        self.stats = MappingStats()
        self.committed: dict[PartitionId, int] = {}  # partition -> next offset, as committed to the group
        self._start: dict[int, int] = {}  # partition -> first offset this mapping saw (before any commit)
        self._next: dict[int, int] = {}  # partition -> next offset expected from the consumer
        self._rejected: set[tuple[PartitionId, int]] = set()  # records the registry integration rejected
        self._lose_commit = lose_commit
        self._on_delivered = on_delivered
        self._fetched: deque[Record] = deque()
        self._builder = BatchBuilder(config.limits)
        self._source = config.source()
        self._consumer: Consumer | None = None

    # -- consumer lifecycle ---------------------------------------------------------------

    def start(self) -> EventSourceMapping:
        from confluent_kafka import Consumer

        self._consumer = Consumer(self.config.consumer_settings())
        self._consumer.subscribe(
            [self.config.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
        )
        return self

    def _resume_at(self, partition: int) -> int | None:
        return self.committed.get(partition, self._start.get(partition))

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for assigned in partitions:
            resume = self._resume_at(assigned.partition)
            if resume is not None:
                assigned.offset = resume
                self._next[assigned.partition] = resume
        consumer.assign(partitions)

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions taken away: forget what was fetched for them but not delivered."""
        gone = {revoked.partition for revoked in partitions}
        for partition in gone:
            self._next.pop(partition, None)
        self._fetched = deque(record for record in self._fetched if record.partition not in gone)
        kept = [record for record in self._builder.take() if record.partition not in gone]
        now = self.clock.now_ms()
        for record in kept:
            self._builder.offer(record, now)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def __enter__(self) -> EventSourceMapping:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def join(self, timeout_s: float = 30.0) -> None:
        """Wait until the group has assigned partitions (for ``LATEST``: records produced after
        this are delivered). Anything fetched meanwhile is kept for the first batch."""
        assert self._consumer is not None, "start() the mapping first"
        deadline = self.clock.now_ms() + int(timeout_s * 1000)
        while not self._consumer.assignment():
            if self.clock.now_ms() > deadline:
                raise MappingError(f"no partitions of {self.config.topic!r} assigned within {timeout_s:.0f}s")
            self._consume(0.2)

    def expire_offsets(self) -> None:
        """The group's committed offsets expire, as Kafka expires them once a group has been
        empty for ``offsets.retention.minutes`` (7 days by default): the mapping leaves the group,
        its offsets are deleted on the broker, and it joins again with none, so each partition
        starts at ``starting_position`` -- what AWS's mapping does with a group that has no
        committed offsets (Customizable consumer group ID in Lambda:
        https://docs.aws.amazon.com/lambda/latest/dg/kafka-consumer-group-id.html). From
        ``TRIM_HORIZON`` the retained log comes again; the ledger drops it as redelivered."""
        from confluent_kafka.admin import AdminClient

        self.stats.offset_expiries += 1
        self._fetched.clear()
        self._builder.take()
        self._next.clear()
        self.close()
        admin = AdminClient(client_settings(self.config.bootstrap_servers))
        for future in admin.delete_consumer_groups([self.config.group_id], request_timeout=30).values():
            future.result()
        self.committed.clear()
        self._start.clear()  # no "first offset this mapping saw" either: it starts afresh
        self.start()

    def rebalance(self) -> None:
        """Leave and rejoin the group: everything not committed is delivered again."""
        self.stats.rebalances += 1
        self._fetched.clear()
        self._builder.take()
        self._next.clear()
        self.close()
        self.start()

    # -- polling ------------------------------------------------------------------------------

    def _consume(self, timeout_s: float) -> None:
        assert self._consumer is not None, "start() the mapping first"
        for message in self._consumer.consume(num_messages=self.config.limits.batch_size, timeout=timeout_s):
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise MappingError(f"Kafka consumer failed: {error.str()}")
                logger.warning("consumer error", extra={"error": error.str()})
                continue
            record = record_of(message)
            assert isinstance(record.partition, int)  # a Kafka partition
            expected = self._next.get(record.partition)
            if expected is not None and record.offset < expected:
                continue  # fetched before a rebalance moved the partition back or forward
            self._start.setdefault(record.partition, record.offset)
            self._next[record.partition] = record.offset + 1
            self._fetched.append(record)

    def next_batch(self) -> list[Record]:
        """Gather the next batch; an empty list means nothing arrived for a poll interval."""
        builder = self._builder
        return gather(
            builder,
            self._fetched,
            offer=builder.offer,
            take=builder.take,
            receive=self._consume,
            now_ms=self.clock.now_ms,
        )

    # -- delivery -----------------------------------------------------------------------------

    def deliver(self, records: list[Record]) -> Invocation | None:
        """Invoke until the batch succeeds, then commit its offsets (unless chaos loses them).
        With a registry integration, only the records it delivers are in the event; ``None``
        when it rejected them all (the batch is committed without an invocation)."""
        delivered = self._decoded(records)
        result = None
        if delivered:
            first = delivered[0]
            what = f"batch of {len(delivered)} records starting at {first.topic}-{first.partition}@{first.offset}"
            result = invoke_whole(
                self.invoker,
                build_event(delivered, self._source),
                len(delivered),
                self.stats,
                self.config.max_attempts,
                what,
                retry_limit=self.config.retry_limit,
            )
            if not result.ok:  # retries exhausted: to the destination (or dropped), and move on
                if self.config.on_failure is not None:
                    self.config.on_failure.send(delivered, "RetryAttemptsExhausted", result.error or "")
            elif self._on_delivered is not None:
                self._on_delivered(delivered, result)
        if self._lose_commit() or not self._commit(records):
            self.stats.lost_commits += 1
            self.rebalance()  # the commit never reached the group: the batch comes again
        return result

    def _decoded(self, records: list[Record]) -> list[Record]:
        """The batch as the registry integration delivers it (all of it without one)."""
        registry = self.config.registry
        if registry is None:
            return records
        batch = registry.decode(records)
        destination = self.config.on_failure
        for rejection in batch.rejected:
            if destination is not None:
                destination.send([rejection.record], rejection.reason, rejection.detail)
            self.stats.registry_rejected += 1
            self.stats.registry_reasons[rejection.reason] = self.stats.registry_reasons.get(rejection.reason, 0) + 1
            at = (rejection.record.partition, rejection.record.offset)
            if at not in self._rejected:  # its first rejection (a redelivered batch brings it again)
                self._rejected.add(at)
                distinct = self.stats.registry_rejected_records
                distinct[rejection.reason] = distinct.get(rejection.reason, 0) + 1
            logger.warning(
                "schema registry integration rejected a record; it is not delivered",
                extra={
                    "record": f"{rejection.record.topic}-{rejection.record.partition}@{rejection.record.offset}",
                    "reason": rejection.reason,
                    "detail": rejection.detail,
                },
            )
        return batch.delivered

    def _commit(self, records: list[Record]) -> bool:
        """Commit the batch's offsets; ``False`` if the group refused them (e.g. mid-rebalance)."""
        from confluent_kafka import KafkaException, TopicPartition

        assert self._consumer is not None
        ends: dict[int, int] = {}
        for record in records:
            assert isinstance(record.partition, int)  # a Kafka partition
            ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
        offsets = [TopicPartition(self.config.topic, partition, end) for partition, end in sorted(ends.items())]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            logger.warning("offset commit failed; the batch will be delivered again", extra={"error": str(exc)})
            return False
        for partition, end in ends.items():
            self.committed[partition] = max(self.committed.get(partition, 0), end)
        return True

    def run(self, until: Callable[[], bool], *, idle_timeout_s: float = 60.0) -> None:
        """Deliver batches until ``until()`` holds; fail if nothing arrives for ``idle_timeout_s``."""
        idle_since: int | None = None
        while not until():
            batch = self.next_batch()
            if batch:
                idle_since = None
                self.deliver(batch)
                continue
            now = self.clock.now_ms()
            idle_since = now if idle_since is None else idle_since
            if now - idle_since > idle_timeout_s * 1000:
                raise MappingError(
                    f"no records from {self.config.topic!r} for {idle_timeout_s:.0f}s while records are still "
                    "outstanding; is the broker up and the topic right?"
                )
