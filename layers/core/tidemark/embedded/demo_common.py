"""What the demo's script (``embedded/demo.py``) and its per-source runners share.

The demo's steps are the same for every source kind -- start services, produce and archive,
drain, sweep, verify -- except the one that touches the source: a Kafka broker and consumer
group, a Kinesis stream and its shards, or a RabbitMQ broker and queue. That step is a
``SourceRunner`` (``demo_kafka``, ``demo_kinesis``, ``demo_rabbitmq``); it gets the options, the
stream and the invoker, and hands back what the later steps need (``Feed``): what the archive
must hold and how delivery went. A log's records are expected at their source positions
(``ExpectedRecord``); a queue's messages, which the ledger numbers, by their ids
(``ExpectedMessage``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tidemark.config.model import StreamConfig
from tidemark.embedded.aws import LocalAws
from tidemark.embedded.chaos import Chaos
from tidemark.embedded.esm.invokers import Invoker
from tidemark.embedded.esm.mapping import MappingStats
from tidemark.embedded.workload import Order, WorkloadSpec
from tidemark.exceptions import TidemarkError
from tidemark.sources import KAFKA, KINESIS, RABBITMQ, PartitionId, partition_sort_key
from tidemark.verify import ExpectedMessage, ExpectedRecord

SOURCE_KINDS = (KAFKA, KINESIS, RABBITMQ)
#: the example config of each source kind, under the project directory
DEFAULT_CONFIGS = {
    KAFKA: Path("config/tidemark.yaml"),
    KINESIS: Path("config/kinesis.yaml"),
    RABBITMQ: Path("config/rabbitmq.yaml"),
}
#: the partition of a queue (a source whose positions the ledger assigns has one: 0)
QUEUE_PARTITION = 0
#: what the archive must hold: a log's records at their positions, or a queue's messages by id
Expected = Sequence[ExpectedRecord | ExpectedMessage]


class DemoUI(Protocol):
    """Where the demo reports what it is doing (the CLI draws progress bars)."""

    def step(self, text: str) -> None: ...

    def progress(self, task: str, done: int, total: int) -> None: ...


class QuietUI:
    def step(self, text: str) -> None:
        return None

    def progress(self, task: str, done: int, total: int) -> None:
        return None


class DemoError(TidemarkError):
    """The demo could not run (bad options, unreachable services)."""


@dataclass(frozen=True)
class DemoOptions:
    project_dir: Path
    config_path: Path | None = None  # default: the example config of ``source`` (DEFAULT_CONFIGS)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    workdir: Path | None = None  # default: a new temporary directory (kept, it holds the logs)
    stream: str | None = None  # default: the config's first stream
    topic: str | None = None  # default: the stream's topic (Kinesis: the stream's name in its ARN)
    partitions: int = 4  # Kafka: partitions of the topic
    bootstrap_servers: str | None = None  # Kafka: default: start the embedded broker
    endpoint_url: str | None = None  # default: start moto
    broker_port: int = 0  # Kafka's embedded broker, or RabbitMQ's AMQP port
    moto_port: int = 0
    bucket: str = "tidemark-demo-archive"
    table: str = "tidemark-demo-ledger"
    batch_size: int | None = None  # default: the stream's source.batch_size
    batching_window_ms: int | None = None  # default: the stream's source.batching_window
    flush_records: int | None = None  # overrides flush.max_records so objects rotate during a short run
    aggregate: bool | None = None  # end with the PySpark aggregation job (needs Java); None: Kafka only
    chaos: bool = False
    crash_rate: float = 0.2
    lost_commit_rate: float = 0.03
    seed: int = 7
    recreate_topic: bool = False  # Kafka: delete and create the topic after half the orders (offsets restart)
    format: str | None = None  # overrides the stream's format.type (with that format's default compression)
    compression: str | None = None  # overrides format.compression
    partition_by: tuple[str, ...] = ()  # overrides partition_by.fields
    source: str | None = None  # kafka | kinesis | rabbitmq; None: the config's stream's kind (kafka without --config)
    shards: int = 2  # Kinesis: shards the stream is created with
    split: bool = True  # Kinesis: split a shard mid-run
    avro: bool = False  # Kafka: Avro values, decoded by a local registry through the mapping's integration

    @property
    def config_file(self) -> Path:
        """The config to read: the one given, or the example config of the source kind."""
        if self.config_path is not None:
            return self.config_path
        return self.project_dir / DEFAULT_CONFIGS[self.source or KAFKA]


@dataclass
class Feed:
    """What producing and archiving through a source hands the demo's later steps."""

    location: str  # where the source is: Kafka's bootstrap servers, the Kinesis stream's ARN, the RabbitMQ broker
    expected: Expected  # what the archive must hold
    delivery: MappingStats
    epochs: dict[str, Any] | None = None  # Kafka with --recreate-topic: refused invocations, epochs started
    shards: dict[str, Any] | None = None  # Kinesis: the shards, and which were split into which
    queue: dict[str, Any] | None = None  # RabbitMQ: the broker, what was published, acks and redeliveries

    @property
    def partitions(self) -> list[PartitionId]:
        """The source partitions the expected records are in (a queue's: its one partition)."""
        found = {item.partition if isinstance(item, ExpectedRecord) else QUEUE_PARTITION for item in self.expected}
        return sorted(found, key=partition_sort_key)


@dataclass
class FeedContext:
    """What a runner needs to produce the workload and archive it."""

    options: DemoOptions
    stream: StreamConfig
    orders: list[Order]
    invoker: Invoker
    chaos: Chaos
    ui: DemoUI
    lap: Callable[[str], None]  # ends a timed phase of the report's timings (they add up per name)


class SourceRunner(Protocol):
    """One source kind's part of the demo."""

    kind: str

    def start(self, stack: contextlib.ExitStack, workdir: Path) -> str:
        """Start (or reach) the source's own services, before moto; return the line the demo
        shows for starting moto (Kafka: where the broker is)."""
        ...

    def connect(self, aws: LocalAws) -> None:
        """Once moto runs (Kinesis lives there): get ready to produce."""
        ...

    def feed(self, context: FeedContext) -> Feed:
        """Produce the workload and archive it through the local event source mapping."""
        ...
