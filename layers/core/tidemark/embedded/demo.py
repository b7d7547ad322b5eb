"""The embedded demo: the whole pipeline on one machine, checked from what lands in S3.

    broker (Tansu, or --bootstrap-servers)   moto server (S3 + DynamoDB)   staging directory
        │ produce a workload                          ▲
        ▼                                             │
    local event source mapping ──invoke──▶ archiver handler (functions/archiver) ──▶ S3 + ledger
        (chaos: children killed at crash points, lost commits)
    drain every open buffer ─▶ sweeper (functions/sweeper: sweep, reconcile, complete hours)
    ─▶ read the archive back from S3 ─▶ report, PASS/FAIL

Every step runs the same code as production; only the AWS endpoints are local.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Protocol

import yaml
from botocore.exceptions import BotoCoreError, ClientError

from tidemark.config.loader import ENV_JSON, parse_config
from tidemark.config.model import StreamConfig, TidemarkConfig
from tidemark.embedded.aggregation import run_demo_aggregation
from tidemark.embedded.aws import LocalAws, local_aws
from tidemark.embedded.broker import BrokerError, kafka_broker
from tidemark.embedded.chaos import FLUSH_POINTS, Chaos, ChaosLog
from tidemark.embedded.esm.batching import BatchLimits
from tidemark.embedded.esm.invokers import ChildInvoker, InProcessInvoker, Invoker
from tidemark.embedded.esm.mapping import EventSourceMapping, MappingConfig, MappingStats
from tidemark.embedded.kafka_clients import client_settings, kafka_client_log
from tidemark.embedded.lambda_runtime import HandlerRef, patched_environ
from tidemark.embedded.operator import EpochOperator
from tidemark.embedded.ports import claim_port
from tidemark.embedded.workload import Order, WorkloadSpec, ensure_topic, generate, produce, recreate_topic
from tidemark.eventtime import HourBucketer
from tidemark.exceptions import ConfigError, TidemarkError
from tidemark.objects.keys import hour_of_key
from tidemark.records.esm import EventSource
from tidemark.runtime import Runtime
from tidemark.verify import ExpectedRecord, VerificationReport, verify_archive


class DemoUI(Protocol):
    """Where the demo reports what it is doing (the CLI draws progress bars)."""

    def step(self, text: str) -> None: ...

    def progress(self, task: str, done: int, total: int) -> None: ...


class QuietUI:
    def step(self, text: str) -> None:
        return None

    def progress(self, task: str, done: int, total: int) -> None:
        return None


@dataclass(frozen=True)
class DemoOptions:
    project_dir: Path
    config_path: Path
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    workdir: Path | None = None  # default: a new temporary directory (kept, it holds the logs)
    stream: str | None = None  # default: the config's first stream
    topic: str | None = None  # default: the stream's topic
    partitions: int = 4
    bootstrap_servers: str | None = None  # default: start the embedded broker
    endpoint_url: str | None = None  # default: start moto
    broker_port: int = 0
    moto_port: int = 0
    bucket: str = "tidemark-demo-archive"
    table: str = "tidemark-demo-ledger"
    batch_size: int | None = None  # default: the stream's source.batch_size
    batching_window_ms: int | None = None  # default: the stream's source.batching_window
    flush_records: int | None = None  # overrides flush.max_records so objects rotate during a short run
    aggregate: bool = True  # end with the PySpark aggregation job (needs Java)
    chaos: bool = False
    crash_rate: float = 0.2
    lost_commit_rate: float = 0.03
    seed: int = 7
    recreate_topic: bool = False  # delete and create the topic after half the orders (offsets restart)
    format: str | None = None  # overrides the stream's format.type (with that format's default compression)
    compression: str | None = None  # overrides format.compression
    partition_by: tuple[str, ...] = ()  # overrides partition_by.fields


@dataclass
class DemoResult:
    options: DemoOptions
    workdir: Path
    stream: str
    topic: str
    bootstrap_servers: str
    endpoint: str
    verification: VerificationReport
    mapping: MappingStats
    chaos: ChaosLog | None
    late_produced: int
    drained_objects: int
    sweeper: dict[str, Any]  # what each sweeper step returned
    aggregation: dict[str, Any] | None  # the Spark job's run, and its results read back
    epochs: dict[str, Any] | None  # with --recreate-topic: refused invocations and epochs started
    ledger_only: list[str]  # committed in the ledger, missing from S3
    s3_only: list[str]  # in S3, unknown to the ledger
    staging_left: int  # segment files still on the staging directory
    timings_s: dict[str, float]

    @property
    def ok(self) -> bool:
        report = self.verification
        return (
            report.ok
            and report.archived + report.dead_lettered == report.produced
            and not self.ledger_only
            and not self.s3_only
            and (self.aggregation is None or all(self.aggregation["counts_match"].values()))
        )

    def to_dict(self) -> dict[str, Any]:
        report = self.verification
        partitions = sorted(report.produced_by_partition)
        return {
            "result": "PASS" if self.ok else "FAIL",
            "stream": self.stream,
            "topic": self.topic,
            "workdir": str(self.workdir),
            "bootstrap_servers": self.bootstrap_servers,
            "endpoint": self.endpoint,
            "verification": report.summary(),
            "partitions": {
                str(p): {
                    "produced": report.produced_by_partition[p],
                    "archived": report.archived_by_partition[p],
                    "dead_lettered": report.dead_lettered_by_partition[p],
                }
                for p in partitions
            },
            "late_produced": self.late_produced,
            "dead_letter_reasons": dict(sorted(report.dead_letter_reasons.items())),
            "objects_per_hour": dict(sorted(report.objects_per_hour.items())),
            "records_per_hour": dict(sorted(report.records_per_hour.items())),
            "ledger_only": self.ledger_only,
            "s3_only": self.s3_only,
            "staging_segments_left": self.staging_left,
            "delivery": {
                "batches": self.mapping.batches,
                "records_delivered": self.mapping.records,
                "invocations": self.mapping.invocations,
                "failed_invocations": self.mapping.failed_invocations,
                "crashed_invocations": self.mapping.crashed_invocations,
                "rebalances": self.mapping.rebalances,
                "lost_commits": self.mapping.lost_commits,
                "largest_batch": self.mapping.max_batch,
                "function_errors": self.mapping.errors,
            },
            "drained_objects": self.drained_objects,
            "sweeper": self.sweeper,
            "aggregation": self.aggregation,
            "chaos": None if self.chaos is None else self.chaos.summary(),
            "epochs": self.epochs,
            "timings_s": {name: round(seconds, 2) for name, seconds in self.timings_s.items()},
        }


class DemoError(TidemarkError):
    """The demo could not run (bad options, unreachable services)."""


def demo_config(options: DemoOptions) -> tuple[dict[str, Any], TidemarkConfig, StreamConfig]:
    """The config file with the demo's overrides, validated; and the stream the demo drives."""
    try:
        data = yaml.safe_load(options.config_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{options.config_path}: cannot read the configuration ({exc})") from None
    config = parse_config(data, origin=str(options.config_path))
    names = [stream.name for stream in config.streams]
    name = options.stream or names[0]
    if name not in names:
        raise ConfigError(f"--stream {name!r}: not in {options.config_path} (streams: {', '.join(names)})")
    raw = data["streams"][names.index(name)]
    if options.topic:
        raw["source"]["topic"] = options.topic
    if options.flush_records:
        raw.setdefault("flush", {})["max_records"] = options.flush_records
    if options.format or options.compression:
        fmt = raw.setdefault("format", {})
        if options.format and options.format != fmt.get("type", "jsonl"):
            raw["format"] = fmt = {"type": options.format}  # the other format's own defaults
        if options.compression:
            fmt["compression"] = options.compression
    if options.partition_by:
        raw.setdefault("partition_by", {})["fields"] = list(options.partition_by)
    config = parse_config(data, origin=str(options.config_path))
    stream = config.stream(name)
    if stream.event_time.source != "json_field" or stream.event_time.field != "created_at":
        raise ConfigError(
            f"stream {name!r}: the demo's order workload carries its event time in the JSON field "
            "'created_at'; use a stream with event_time.source json_field and field created_at"
        )
    return data, config, stream


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


class Demo:
    def __init__(self, options: DemoOptions, ui: DemoUI | None = None) -> None:
        self.options = options
        self.ui = ui or QuietUI()
        self.timings: dict[str, float] = {}
        self._started = time.monotonic()
        self._started_ms = int(time.time() * 1000)

    def _lap(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.timings[name] = now - since
        return now

    def run(self) -> DemoResult:
        """Run the demo; a Kafka or AWS failure becomes a ``DemoError`` naming what failed."""
        from confluent_kafka import KafkaException

        try:
            return self._run()
        except KafkaException as exc:
            raise DemoError(f"Kafka failed: {exc.args[0].str() if exc.args else exc}") from None
        except (BotoCoreError, ClientError) as exc:
            raise DemoError(f"S3/DynamoDB at the local endpoint failed: {exc}") from None

    def _run(self) -> DemoResult:
        options = self.options
        data, config, stream = demo_config(options)
        handler = HandlerRef.for_function(options.project_dir, "archiver").check()
        workdir = options.workdir or Path(tempfile.mkdtemp(prefix="tidemark-demo-"))
        workdir.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            stack.enter_context(kafka_client_log(workdir / "kafka-clients.log"))
            mark = time.monotonic()
            bootstrap = options.bootstrap_servers
            if bootstrap is None:
                self.ui.step("starting the Kafka-protocol broker (Tansu) on loopback")
                port = claim_port(options.broker_port, option="--broker-port")
                try:
                    bootstrap = stack.enter_context(kafka_broker(port=port))
                except BrokerError as exc:
                    raise DemoError(str(exc)) from None
            check_reachable(bootstrap)
            self.ui.step(f"Kafka at {bootstrap}; starting moto (S3 + DynamoDB)")
            aws = stack.enter_context(
                local_aws(
                    workdir,
                    bucket=options.bucket,
                    table=options.table,
                    endpoint_url=options.endpoint_url,
                    port=options.moto_port,
                )
            )
            env = {**aws.environment(), ENV_JSON: json.dumps(data, default=str)}
            stack.enter_context(patched_environ(env))
            mark = self._lap("start_services", mark)

            topic = stream.source.topic
            self.ui.step(f"producing {options.workload.records} orders to {topic!r} ({options.partitions} partitions)")
            ensure_topic(bootstrap, topic, options.partitions)
            orders = list(generate(options.workload, int(time.time() * 1000), stream.event_time.timezone))
            # With --recreate-topic, half the orders go to the topic before it is recreated.
            first = orders[: len(orders) // 2] if options.recreate_topic else orders
            expected = produce(
                bootstrap,
                topic,
                iter(first),
                on_progress=lambda n: self.ui.progress("produce", n, len(orders)),
            )
            mark = self._lap("produce", mark)

            chaos = Chaos(options.seed, crash_rate=options.crash_rate, lost_commit_rate=options.lost_commit_rate)
            warm_log = stack.enter_context((workdir / "handler.log").open("a", encoding="utf-8"))
            warm: Invoker = InProcessInvoker(handler, warm_log)
            cold = ChildInvoker(handler, env, workdir / "crashed-containers.log")
            invoker = chaos.invoker(warm, cold) if options.chaos else warm
            self.ui.step("archiving through the local event source mapping" + (" with chaos" if options.chaos else ""))
            delivery = self._archive(stream, bootstrap, expected, invoker, chaos).stats
            epochs = None
            if options.recreate_topic:
                recreated, again, operator = self._recreate(stream, bootstrap, orders[len(first) :], invoker, chaos)
                expected += recreated
                delivery = delivery.plus(again.stats)
                epochs = {"refused_invocations": operator.refused, "started": operator.epochs}
            mark = self._lap("archive", mark)

            self.ui.step("draining open buffers (every record into an S3 object)")
            drained = self._drain(stream, expected, cold, chaos if options.chaos else None)
            mark = self._lap("drain", mark)

            self.ui.step("running the sweeper: sweep every partition, reconcile, complete event hours")
            sweeper = run_sweeper(options.project_dir, warm_log)
            mark = self._lap("sweeper", mark)

            self.ui.step("reading the archive back from S3 and checking it")
            report = verify_archive(
                aws.s3(),
                aws.bucket,
                stream.name,
                expected,
                raw_prefix=config.archive.raw_prefix,
                errors_prefix=config.archive.errors_prefix,
                config=stream,
            )
            hours = {item.hour for item in expected if item.hour}
            hours |= run_hours(self._started_ms, time.time(), stream.event_time.timezone)
            ledger_only, s3_only = reconcile(aws, config, stream.name, hours)
            mark = self._lap("verify", mark)

            aggregation = None
            if options.aggregate:
                self.ui.step("aggregating the archive with PySpark (local[2]) into DynamoDB")
                aggregation = run_demo_aggregation(aws, stream, expected)
                self._lap("aggregate", mark)
            self.timings["total"] = time.monotonic() - self._started
            return DemoResult(
                options=options,
                workdir=workdir,
                stream=stream.name,
                topic=topic,
                bootstrap_servers=bootstrap,
                endpoint=aws.endpoint,
                verification=report,
                mapping=delivery,
                chaos=chaos.log if options.chaos else None,
                epochs=epochs,
                late_produced=sum(order.late for order in orders),
                drained_objects=drained,
                sweeper=sweeper,
                aggregation=aggregation,
                ledger_only=ledger_only,
                s3_only=s3_only,
                staging_left=sum(1 for _ in aws.staging_root.rglob("*.seg")),
                timings_s=self.timings,
            )

    def _archive(
        self,
        stream: StreamConfig,
        bootstrap: str,
        expected: list[ExpectedRecord],
        invoker: Invoker,
        chaos: Chaos,
    ) -> EventSourceMapping:
        options, source = self.options, stream.source
        ends: dict[int, int] = {}
        for item in expected:
            ends[item.partition] = max(ends.get(item.partition, 0), item.offset + 1)
        limits = BatchLimits(
            batch_size=options.batch_size or source.batch_size,
            window_ms=(
                options.batching_window_ms
                if options.batching_window_ms is not None
                else int(source.batching_window.total_seconds() * 1000)
            ),
        )
        config = MappingConfig(
            bootstrap_servers=bootstrap,
            topic=source.topic,
            group_id=f"tidemark-demo-{uuid.uuid4().hex[:8]}",
            limits=limits,
            # The workload is produced before the mapping starts, so it reads from the beginning
            # whatever the stream's starting_position (LATEST would see nothing).
            starting_position="TRIM_HORIZON",
            event_source=EventSource(bootstrap, event_source_arn=source.cluster_arn)
            if source.kind == "msk"
            else EventSource(bootstrap, event_source="SelfManagedKafka"),
        )
        total = len(expected)
        mapping = EventSourceMapping(
            config,
            invoker,
            lose_commit=chaos.lose_commit if options.chaos else (lambda: False),
            on_delivered=lambda _records, _result: self.ui.progress("archive", _done(mapping.committed, ends), total),
        )

        def caught_up() -> bool:
            return all(mapping.committed.get(p, 0) >= end for p, end in ends.items())

        with mapping:
            mapping.run(caught_up)
        self.ui.progress("archive", total, total)
        return mapping

    def _recreate(
        self, stream: StreamConfig, bootstrap: str, orders: list[Order], invoker: Invoker, chaos: Chaos
    ) -> tuple[list[ExpectedRecord], EventSourceMapping, EpochOperator]:
        """Delete and create the topic (its offsets restart at 0), produce the rest of the orders,
        and archive them with a fresh mapping. The archiver refuses the new log's first batch (a
        position reset); the operator starts epoch 1 at offset 0 and the retry goes through."""
        topic, partitions = stream.source.topic, self.options.partitions
        self.ui.step(f"recreating {topic!r} mid-run: offsets restart at 0; an operator starts a new epoch")
        recreate_topic(bootstrap, topic, partitions)
        produced = produce(bootstrap, topic, iter(orders))
        operator = EpochOperator(invoker, stream, list(range(partitions)), reason="demo: topic recreated mid-run")
        mapping = self._archive(stream, bootstrap, produced, operator, chaos)
        return [replace(item, epoch=1) for item in produced], mapping, operator

    def _drain(
        self, stream: StreamConfig, expected: list[ExpectedRecord], cold: ChildInvoker, chaos: Chaos | None
    ) -> int:
        partitions = sorted({item.partition for item in expected})
        if chaos is not None:  # kill a drain at a flush-side point first; the next drain recovers
            for partition in partitions:
                crash_at = chaos.arm(FLUSH_POINTS, max_nth=1)
                chaos.record(crash_at, cold.drain(stream.name, [partition], crash_at=crash_at))
        runtime = Runtime.from_env()
        drained = 0
        for partition in partitions:
            drained += len(runtime.writer(stream, partition).drain().flushes)
        return drained


def run_sweeper(project_dir: Path, log: IO[str]) -> dict[str, Any]:
    """The sweeper state machine's steps, in its order, through the real sweeper handlers."""
    code = project_dir / "functions" / "sweeper"

    def step(name: str, event: dict[str, Any]) -> Any:
        result = InProcessInvoker(HandlerRef(code, f"handler.{name}"), log).invoke(event)
        if not result.ok:
            raise DemoError(f"sweeper step {name} failed: {result.error}")
        return result.response

    listed = step("list_partitions", {})
    swept = [step("sweep_partition", item) for item in listed["partitions"]]
    return {
        "partitions": len(swept),
        "flushed": sum(sum(item["flushed"].values()) for item in swept),
        "resumed": sum(item["resumed"] for item in swept),
        "garbage_deleted": sum(item["garbage_deleted"] for item in swept),
        "directories_removed": sum(item["directory_removed"] for item in swept),
        "reconcile": step("reconcile", listed),
        "completeness": step("complete_hours", listed),
    }


def _done(committed: Mapping[int, int], ends: Mapping[int, int]) -> int:
    """Records committed so far (offsets start at 0 on a fresh topic)."""
    return sum(min(committed.get(p, 0), end) for p, end in ends.items())


def run_hours(start_ms: int, end_s: float, timezone: str) -> set[str]:
    """The hours the run spanned, in the stream's zone: dead letters are filed under their Kafka
    timestamp's hour, which is produce time here. Sampled every 15 minutes and at both ends, so
    zones with half- and quarter-hour offsets are covered."""
    labels = HourBucketer(timezone)
    end_ms = int(end_s * 1000)
    return {labels.label(ms) for ms in [*range(start_ms, end_ms, 900_000), end_ms]}


def reconcile(aws: LocalAws, config: TidemarkConfig, stream: str, hours: set[str]) -> tuple[list[str], list[str]]:
    """Keys the ledger committed but S3 lacks, and keys in S3 the ledger does not know. The
    ledger is asked about ``hours`` (every hour the run could have written) and every hour S3
    has objects for, so an hour whose objects all vanished is still checked."""
    s3 = aws.s3()
    in_s3: set[str] = set()
    for prefix in (config.archive.raw_prefix, config.archive.errors_prefix):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=aws.bucket, Prefix=f"{prefix}/{stream}/"):
            in_s3.update(item["Key"] for item in page.get("Contents", []))
    runtime = Runtime.from_env()
    in_ledger: set[str] = set()
    for hour in hours | {hour_of_key(key) for key in in_s3}:
        in_ledger.update(item.key for item in runtime.ledger.committed_objects(stream, hour))
    return sorted(in_ledger - in_s3), sorted(in_s3 - in_ledger)
