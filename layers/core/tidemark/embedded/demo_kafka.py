"""The demo's Kafka source: the broker (Tansu, or ``--bootstrap-servers``), the producer and the
local event source mapping (a consumer group), and ``--recreate-topic``'s second log. A few
tombstones (null values deleting earlier orders' keys) go among the orders. A stream
with ``source.schema_registry`` (``--avro``) gets the mapping's registry integration
(``esm/registry.py``), signed in with the secret the config names, read from the local AWS. The
mapping's own log lines (a record its integration rejected, a lost commit) go to ``mapping.log``
in the working directory, not through the demo's progress display."""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import boto3

from tidemark.config.model import StreamConfig
from tidemark.embedded.aws import LocalAws
from tidemark.embedded.broker import BrokerError, kafka_broker
from tidemark.embedded.demo_common import DemoError, DemoOptions, DemoUI, Feed, FeedContext
from tidemark.embedded.esm.batching import BatchLimits
from tidemark.embedded.esm.invokers import Invoker
from tidemark.embedded.esm.mapping import EventSourceMapping, MappingConfig
from tidemark.embedded.esm.mapping import logger as mapping_logger
from tidemark.embedded.esm.registry import RegistryDecoder
from tidemark.embedded.kafka_clients import client_settings, kafka_client_log
from tidemark.embedded.operator import EpochOperator
from tidemark.embedded.ports import claim_port
from tidemark.embedded.workload import Order, WorkloadSpec, ensure_topic, produce, recreate_topic, with_tombstones
from tidemark.records.esm import EventSource
from tidemark.sources import KAFKA, PartitionId
from tidemark.verify import ExpectedRecord


def check_reachable(bootstrap: str, timeout_s: float = 10.0) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient(client_settings(bootstrap)).list_topics(timeout=timeout_s)
    except KafkaException:
        raise DemoError(
            f"cannot reach Kafka at {bootstrap} within {timeout_s:.0f}s: check --bootstrap-servers "
            "(or leave it out to use the embedded broker)"
        ) from None


#: the attributes every log record has; the others are its ``extra`` fields
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class _WithFields(logging.Formatter):
    """A line per record: time, level, message, and its ``extra`` fields as JSON."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {name: value for name, value in vars(record).items() if name not in _RECORD_ATTRIBUTES}
        line = super().format(record)
        return f"{line} {json.dumps(fields, default=str)}" if fields else line


@contextlib.contextmanager
def mapping_log(path: Path) -> Iterator[None]:
    """While inside, the local mapping's log lines (info and up) go to ``path`` and nowhere else:
    before the archiver's first invocation configures logging, a warning would otherwise reach
    the console."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(_WithFields("%(asctime)s %(levelname)s %(message)s"))
    level, propagate = mapping_logger.level, mapping_logger.propagate
    mapping_logger.addHandler(handler)
    mapping_logger.setLevel(logging.INFO)
    mapping_logger.propagate = False
    try:
        yield
    finally:
        mapping_logger.removeHandler(handler)
        mapping_logger.setLevel(level)
        mapping_logger.propagate = propagate
        handler.close()


def before_recreation(orders: list[Order], spec: WorkloadSpec) -> int:
    """How many of ``orders`` (tombstones not yet among them) ``--recreate-topic`` produces to the
    topic before it is recreated: the first half of them once the tombstones are in (``feed``)."""
    mixed = with_tombstones(orders, spec, 0)  # where the tombstones go depends on the count alone
    return sum(not order.tombstone for order in mixed[: len(mixed) // 2])


def batch_limits(options: DemoOptions, stream: StreamConfig) -> BatchLimits:
    """The mapping's limits: the stream's source settings unless the demo overrides them."""
    source = stream.source
    return BatchLimits(
        batch_size=options.batch_size or source.batch_size,
        window_ms=(
            options.batching_window_ms
            if options.batching_window_ms is not None
            else int(source.batching_window.total_seconds() * 1000)
        ),
    )


class KafkaRunner:
    kind = KAFKA

    def __init__(self, options: DemoOptions, ui: DemoUI) -> None:
        self.options = options
        self.ui = ui
        self.bootstrap = options.bootstrap_servers or ""
        self._aws: LocalAws | None = None
        self._registry: RegistryDecoder | None = None

    def start(self, stack: contextlib.ExitStack, workdir: Path) -> str:
        options = self.options
        stack.enter_context(kafka_client_log(workdir / "kafka-clients.log"))
        stack.enter_context(mapping_log(workdir / "mapping.log"))
        bootstrap = options.bootstrap_servers
        if bootstrap is None:
            self.ui.step("starting the Kafka-protocol broker (Tansu) on loopback")
            port = claim_port(options.broker_port, option="--broker-port")
            try:
                bootstrap = stack.enter_context(kafka_broker(port=port))
            except BrokerError as exc:
                raise DemoError(str(exc)) from None
        check_reachable(bootstrap)
        self.bootstrap = bootstrap
        return f"Kafka at {bootstrap}; starting moto (S3 + DynamoDB)"

    def connect(self, aws: LocalAws) -> None:
        self._aws = aws  # where the registry integration reads its credentials

    def feed(self, context: FeedContext) -> Feed:
        options, stream = context.options, context.stream
        # A Kafka topic also holds tombstones (a compacted topic's or a CDC connector's deletes).
        orders = with_tombstones(context.orders, options.workload, int(time.time() * 1000), stream.event_time.timezone)
        topic = stream.source.topic
        deletes = sum(order.tombstone for order in orders)
        self.ui.step(
            f"producing {options.workload.records} orders and {deletes} tombstones to {topic!r} "
            f"({options.partitions} partitions)"
        )
        ensure_topic(self.bootstrap, topic, options.partitions)
        # With --recreate-topic, half the orders go to the topic before it is recreated.
        first = orders[: len(orders) // 2] if options.recreate_topic else orders
        expected = produce(
            self.bootstrap,
            topic,
            iter(first),
            on_progress=lambda n: self.ui.progress("produce", n, len(orders)),
        )
        context.lap("produce")
        self._registry = self._registry_integration(stream)
        self.ui.step(
            "archiving through the local event source mapping"
            + (" and its schema registry integration" if self._registry is not None else "")
            + (" with chaos" if options.chaos else "")
        )
        delivery = self._archive(context, expected, context.invoker).stats
        epochs = None
        if options.recreate_topic:
            recreated, again, operator = self._recreate(context, orders[len(first) :])
            expected += recreated
            delivery = delivery.plus(again.stats)
            epochs = {"refused_invocations": operator.refused, "started": operator.epochs}
        context.lap("archive")
        return Feed(self.bootstrap, expected, delivery, epochs=epochs)

    def _registry_integration(self, stream: StreamConfig) -> RegistryDecoder | None:
        """The mapping's schema registry integration, as ``source.schema_registry`` configures it."""
        settings = stream.source.schema_registry
        if settings is None:
            return None
        assert self._aws is not None, "connect() the runner first"
        return RegistryDecoder.from_config(settings, boto3.client("secretsmanager", **self._aws.settings()))

    def _archive(self, context: FeedContext, expected: list[ExpectedRecord], invoker: Invoker) -> EventSourceMapping:
        options, source = context.options, context.stream.source
        ends: dict[PartitionId, int] = {}
        for item in expected:
            ends[item.partition] = max(ends.get(item.partition, 0), item.offset + 1)
        config = MappingConfig(
            bootstrap_servers=self.bootstrap,
            topic=source.topic,
            group_id=f"tidemark-demo-{uuid.uuid4().hex[:8]}",
            limits=batch_limits(options, context.stream),
            # The workload is produced before the mapping starts, so it reads from the beginning
            # whatever the stream's starting_position (LATEST would see nothing).
            starting_position="TRIM_HORIZON",
            event_source=EventSource(self.bootstrap, event_source_arn=source.cluster_arn)
            if source.kind == "msk"
            else EventSource(self.bootstrap, event_source="SelfManagedKafka"),
            registry=self._registry,
        )
        total = len(expected)
        mapping = EventSourceMapping(
            config,
            invoker,
            lose_commit=context.chaos.lose_commit if options.chaos else (lambda: False),
            on_delivered=lambda _records, _result: self.ui.progress("archive", _done(mapping.committed, ends), total),
        )

        def caught_up() -> bool:
            return all(mapping.committed.get(p, 0) >= end for p, end in ends.items())

        with mapping:
            mapping.run(caught_up)
        self.ui.progress("archive", total, total)
        return mapping

    def _recreate(
        self, context: FeedContext, orders: list[Order]
    ) -> tuple[list[ExpectedRecord], EventSourceMapping, EpochOperator]:
        """Delete and create the topic (its offsets restart at 0), produce the rest of the orders,
        and archive them with a fresh mapping. The archiver refuses the new log's first batch (a
        position reset); the operator starts epoch 1 at offset 0 and the retry goes through."""
        stream = context.stream
        topic, partitions = stream.source.topic, self.options.partitions
        self.ui.step(f"recreating {topic!r} mid-run: offsets restart at 0; an operator starts a new epoch")
        recreate_topic(self.bootstrap, topic, partitions)
        produced = produce(self.bootstrap, topic, iter(orders))
        operator = EpochOperator(
            context.invoker, stream, list(range(partitions)), reason="demo: topic recreated mid-run"
        )
        mapping = self._archive(context, produced, operator)
        return [replace(item, epoch=1) for item in produced], mapping, operator


def _done(committed: Mapping[PartitionId, int], ends: Mapping[PartitionId, int]) -> int:
    """Records committed so far (offsets start at 0 on a fresh topic)."""
    return sum(min(committed.get(p, 0), end) for p, end in ends.items())
