"""The embedded demo: the whole pipeline on one machine, checked from what lands in S3.

    source: Kafka broker (Tansu, or --bootstrap-servers)   moto server (S3 + DynamoDB [+ Kinesis])
         or a Kinesis stream on moto (a shard split mid-run)         ▲          staging directory
         or a RabbitMQ queue (rabbitmq-server on loopback)           │
        │ produce a workload                                         │
        ▼                                                            │
    local event source mapping ──invoke──▶ archiver handler (functions/archiver) ──▶ S3 + ledger
        (chaos: children killed at crash points, lost commits / checkpoints / acks)
    drain every open buffer ─▶ sweeper (functions/sweeper: sweep, reconcile, complete hours)
    ─▶ read the archive back from S3 ─▶ report, PASS/FAIL

Every step runs the same code as production; only the AWS endpoints are local. This module is
the script of the steps; what touches the source -- producing and the local mapping -- is a
``SourceRunner`` per kind (``demo_kafka``, ``demo_kinesis``, ``demo_rabbitmq``: ``RUNNERS``). The
archive is read back by the checker of the source (``verify_feed``): a log's records by their
positions, a queue's messages -- which the ledger numbers -- by their ids. The replay (and, by
default, the Spark job) are Kafka's steps; the Spark job does not read a queue's archive yet.

With ``--avro`` (Kafka) the orders are Avro values in Confluent's wire format, their schema in a
local Confluent-compatible registry (``workload_avro``); the stream gets ``source.schema_registry``
(``record_format: json``) and the local mapping's registry integration decodes each value to JSON
before the archiver sees it, as the mapping does in AWS. The archive, and so the replay, hold
that JSON, with each value's schema id. A few orders (1 in 500, at least 3) come from a producer
that bypassed the serializer: JSON without the wire-format header, an id the registry does not
know, an Avro payload cut short. The integration rejects them (``SCHEMA_NOT_FOUND``,
``DESERIALIZATION_ERROR``) and the mapping moves past them, as in AWS; after the sweeper, the
demo runs ``tidemark recover`` (a ``Recoverer`` per partition of the topic, reading the broker),
which archives them from Kafka as dead letters holding the bytes as produced -- exactly what
they are expected as. They are replayed so too. (With ``--recreate-topic`` they are among the
orders produced after the recreation: the recovery reads the current epoch's log, the only one
the topic still has.)
"""

from __future__ import annotations

import contextlib
import json
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml
from botocore.exceptions import BotoCoreError, ClientError

from tidemark.audit import Auditor
from tidemark.config.loader import ENV_JSON, parse_config
from tidemark.config.model import StreamConfig, TidemarkConfig
from tidemark.embedded.aggregation import run_demo_aggregation
from tidemark.embedded.aws import LocalAws, local_aws
from tidemark.embedded.chaos import FLUSH_POINTS, Chaos, ChaosLog
from tidemark.embedded.demo_common import (
    DemoError,
    DemoOptions,
    DemoUI,
    Expected,
    FeedContext,
    QuietUI,
    SourceRunner,
)
from tidemark.embedded.demo_kafka import KafkaRunner, before_recreation
from tidemark.embedded.demo_kinesis import KinesisRunner
from tidemark.embedded.demo_rabbitmq import RabbitRunner
from tidemark.embedded.demo_replay import run_replay
from tidemark.embedded.esm.invokers import ChildInvoker, InProcessInvoker, Invoker
from tidemark.embedded.esm.mapping import MappingStats
from tidemark.embedded.lambda_runtime import HandlerRef, patched_environ
from tidemark.embedded.workload import MALFORMED_KINDS, generate
from tidemark.embedded.workload_avro import AVRO_MALFORMED_KINDS, AvroOrders, avro_registry
from tidemark.eventtime import HourBucketer
from tidemark.exceptions import ConfigError
from tidemark.kafka_log import KafkaLog
from tidemark.objects.keys import hour_of_key
from tidemark.recover import PartitionRecovery, Recoverer
from tidemark.replay import UnreplayableFormatError
from tidemark.runtime import Runtime
from tidemark.sources import KAFKA, KINESIS, RABBITMQ, PartitionId, partition_sort_key
from tidemark.verify import ExpectedMessage, ExpectedRecord, VerificationReport, verify_archive, verify_messages

__all__ = ["Demo", "DemoError", "DemoOptions", "DemoResult", "DemoUI", "QuietUI", "demo_config", "verify_feed"]

_E = TypeVar("_E", ExpectedRecord, ExpectedMessage)


@dataclass
class DemoResult:
    options: DemoOptions
    workdir: Path
    stream: str
    topic: str  # the Kafka topic, the Kinesis stream's name, or the RabbitMQ queue
    bootstrap_servers: str | None  # Kafka's; None for other sources
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
    audit: dict[str, Any]  # ``tidemark audit``'s report (clean, counts, findings)
    replay: dict[str, Any] | None  # Kafka: ``tidemark replay`` into a new topic, checked record by record
    staging_left: int  # segment files still on the staging directory
    timings_s: dict[str, float]
    source: str = KAFKA  # the source kind: kafka or kinesis
    stream_arn: str | None = None  # Kinesis: the stream the records' eventSourceARN names
    shards: dict[str, Any] | None = None  # Kinesis: the shards, which one was split into which
    schema_registry: dict[str, Any] | None = None  # --avro: the registry, its integration's rejections, recovered
    queue: dict[str, Any] | None = None  # RabbitMQ: the broker, what was published, acks, redeliveries, dedupe
    tombstones: dict[str, int | None] | None = None  # Kafka: produced, archived and replayed with a null value

    @property
    def tombstones_kept(self) -> bool:
        """Every tombstone produced is archived, and replayed (when the replay ran), as a null value."""
        if self.tombstones is None:
            return True
        produced = self.tombstones["produced"]
        replayed = self.tombstones["replayed"]
        return self.tombstones["archived"] == produced and (replayed is None or replayed == produced)

    @property
    def ok(self) -> bool:
        report = self.verification
        return (
            report.ok
            and self.tombstones_kept
            and report.archived + report.dead_lettered == report.produced
            and not self.ledger_only
            and not self.s3_only
            and self.audit["clean"]
            and self.audit["complete"]
            and (self.replay is None or self.replay.get("equal", True))
            and (self.aggregation is None or all(self.aggregation["counts_match"].values()))
            and (self.shards is None or self.shards.get("parent_before_children", True))
            and (self.queue is None or self.queue["left_in_queue"] == 0)
            and self.rejected_recovered
        )

    @property
    def rejected_recovered(self) -> bool:
        """``--avro``: every record the registry integration rejected was recovered from Kafka."""
        registry = self.schema_registry
        return registry is None or registry["recovered"] == registry["rejected"]

    def to_dict(self) -> dict[str, Any]:
        report = self.verification
        partitions = sorted(report.produced_by_partition)
        return {
            "result": "PASS" if self.ok else "FAIL",
            "source": self.source,
            "stream": self.stream,
            "topic": self.topic,
            "workdir": str(self.workdir),
            "bootstrap_servers": self.bootstrap_servers,
            "stream_arn": self.stream_arn,
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
            "tombstones": self.tombstones,
            "dead_letter_reasons": dict(sorted(report.dead_letter_reasons.items())),
            "objects_per_hour": dict(sorted(report.objects_per_hour.items())),
            "records_per_hour": dict(sorted(report.records_per_hour.items())),
            "ledger_only": self.ledger_only,
            "s3_only": self.s3_only,
            "audit": self.audit,
            "replay": self.replay,
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
                "registry_rejected": self.mapping.registry_rejected,
            },
            "drained_objects": self.drained_objects,
            "sweeper": self.sweeper,
            "aggregation": self.aggregation,
            "chaos": None if self.chaos is None else self.chaos.summary(),
            "epochs": self.epochs,
            "shards": self.shards,
            "schema_registry": self.schema_registry,
            "queue": self.queue,
            "timings_s": {name: round(seconds, 2) for name, seconds in self.timings_s.items()},
        }


def demo_config(
    options: DemoOptions, schema_registry: dict[str, Any] | None = None
) -> tuple[dict[str, Any], TidemarkConfig, StreamConfig]:
    """The config file with the demo's overrides, validated; and the stream the demo drives.

    ``--topic`` names the Kafka topic, for a Kinesis stream the stream (the name in its ARN,
    which a Kinesis source's topic is derived from), for RabbitMQ the queue. ``schema_registry``
    (``--avro``, once the local registry runs) becomes the stream's ``source.schema_registry``, in
    provisioned mode as the integration requires (``archiver.provisioned_pollers``, unless the
    config sets it)."""
    path = options.config_file
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the configuration ({exc})") from None
    config = parse_config(data, origin=str(path))
    names = [stream.name for stream in config.streams]
    name = options.stream or names[0]
    if name not in names:
        raise ConfigError(f"--stream {name!r}: not in {path} (streams: {', '.join(names)})")
    kind = config.stream(name).source.shape.kind
    if options.source is not None and options.source != kind:
        raise ConfigError(
            f"--source {options.source}: stream {name!r} of {path} reads a {kind} source; pass a --config "
            f"whose stream reads {options.source} (or leave --config out for the example one)"
        )
    if options.avro and kind != KAFKA:
        raise ConfigError(f"--avro: a schema registry integration is for Kafka sources; stream {name!r} reads {kind}")
    raw = data["streams"][names.index(name)]
    if raw["source"].get("schema_registry") is not None and not options.avro:
        raise ConfigError(
            f"stream {name!r} of {path} validates its values with source.schema_registry: run the demo with "
            "--avro (its local registry stands in for the configured one)"
        )
    if schema_registry is not None:
        raw["source"]["schema_registry"] = schema_registry
        archiver = raw.setdefault("archiver", {})
        if archiver.get("provisioned_pollers") is None:
            archiver["provisioned_pollers"] = {}  # the defaults: the integration only needs the mode
    if options.topic and kind == KINESIS:
        raw["source"]["stream_arn"] = f"{raw['source']['stream_arn'].rsplit('/', 1)[0]}/{options.topic}"
    elif options.topic and kind == RABBITMQ:
        raw["source"].pop("topic", None)  # a dumped config's; the queue is the name
        raw["source"]["queue"] = options.topic
    elif options.topic:
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
    config = parse_config(data, origin=str(path))
    stream = config.stream(name)
    if stream.event_time.source != "json_field" or stream.event_time.field != "created_at":
        raise ConfigError(
            f"stream {name!r}: the demo's order workload carries its event time in the JSON field "
            "'created_at'; use a stream with event_time.source json_field and field created_at"
        )
    return data, config, stream


#: the demo's part that touches the source, per source kind
RUNNERS: dict[str, Callable[[DemoOptions, DemoUI], SourceRunner]] = {
    KAFKA: KafkaRunner,
    KINESIS: KinesisRunner,
    RABBITMQ: RabbitRunner,
}


def source_runner(kind: str, options: DemoOptions, ui: DemoUI) -> SourceRunner:
    """The runner of the stream's source kind."""
    runner: SourceRunner = RUNNERS[kind](options, ui)
    return runner


class Demo:
    def __init__(self, options: DemoOptions, ui: DemoUI | None = None) -> None:
        self.options = options
        self.ui = ui or QuietUI()
        self.timings: dict[str, float] = {}
        self._started = time.monotonic()
        self._started_ms = int(time.time() * 1000)
        self._mark = self._started

    def _lap(self, name: str) -> None:
        """End a timed phase: the time since the last lap is added to ``name``."""
        now = time.monotonic()
        self.timings[name] = self.timings.get(name, 0.0) + now - self._mark
        self._mark = now

    def run(self) -> DemoResult:
        """Run the demo; a Kafka or AWS failure becomes a ``DemoError`` naming what failed."""
        from confluent_kafka import KafkaException

        try:
            return self._run()
        except KafkaException as exc:
            raise DemoError(f"Kafka failed: {exc.args[0].str() if exc.args else exc}") from None
        except (BotoCoreError, ClientError) as exc:
            raise DemoError(f"AWS (S3/DynamoDB/Kinesis) at the local endpoint failed: {exc}") from None

    def _run(self) -> DemoResult:
        options = self.options
        data, config, stream = demo_config(options)
        kind = stream.source.shape.kind
        handler = HandlerRef.for_function(options.project_dir, "archiver").check()
        workdir = options.workdir or Path(tempfile.mkdtemp(prefix="tidemark-demo-"))
        workdir.mkdir(parents=True, exist_ok=True)
        runner = source_runner(kind, options, self.ui)
        with contextlib.ExitStack() as stack:
            self._mark = time.monotonic()
            self.ui.step(runner.start(stack, workdir))
            aws = stack.enter_context(
                local_aws(
                    workdir,
                    bucket=options.bucket,
                    table=options.table,
                    endpoint_url=options.endpoint_url,
                    port=options.moto_port,
                )
            )
            runner.connect(aws)
            avro: AvroOrders | None = None
            if options.avro:
                self.ui.step(
                    "starting a Confluent-compatible schema registry on loopback; registering the order schema"
                )
                avro = stack.enter_context(avro_registry(aws, stream.source.topic))
                data, config, stream = demo_config(options, schema_registry=avro.schema_registry())
            env = {**aws.environment(), ENV_JSON: json.dumps(data, default=str)}
            stack.enter_context(patched_environ(env))
            self._lap("start_services")

            kinds = AVRO_MALFORMED_KINDS if avro is not None else MALFORMED_KINDS
            orders = list(generate(options.workload, int(time.time() * 1000), stream.event_time.timezone, kinds))
            if avro is not None:
                # A few past the serializer: the mapping rejects them, and the recover step reads them
                # from the topic -- with --recreate-topic from its second log (the first is deleted).
                orders = avro.encode(orders)
                kept = before_recreation(orders, options.workload) if options.recreate_topic else 0
                orders = orders[:kept] + avro.bypassing(orders[kept:])
            chaos = Chaos(options.seed, crash_rate=options.crash_rate, lost_commit_rate=options.lost_commit_rate)
            warm_log = stack.enter_context((workdir / "handler.log").open("a", encoding="utf-8"))
            warm: Invoker = InProcessInvoker(handler, warm_log)
            cold = ChildInvoker(handler, env, workdir / "crashed-containers.log")
            invoker = chaos.invoker(warm, cold) if options.chaos else warm
            fed = runner.feed(FeedContext(options, stream, orders, invoker, chaos, self.ui, self._lap))
            expected = fed.expected

            self.ui.step("draining open buffers (every record into an S3 object)")
            drained = self._drain(stream, fed.partitions, cold, chaos if options.chaos else None)
            self._lap("drain")

            self.ui.step("running the sweeper: sweep every partition, reconcile, complete event hours")
            sweeper = run_sweeper(options.project_dir, warm_log)
            self._lap("sweeper")

            recovered = None
            if avro is not None:
                self.ui.step("recovering from Kafka the records the mapping's registry integration did not deliver")
                recovered = run_recover(aws, stream, fed.location, self.ui)
                rejected = sum(fed.delivery.registry_rejected_records.values())
                self.ui.step(
                    f"{rejected} records rejected by the registry integration, "
                    f"{recovered['records']} recovered from Kafka as dead letters"
                )
                self._lap("recover")

            self.ui.step("reading the archive back from S3 and checking it")
            report = verify_feed(aws, config, stream, expected)
            hours = {item.hour for item in expected if item.hour}
            hours |= run_hours(self._started_ms, time.time(), stream.event_time.timezone)
            ledger_only, s3_only = reconcile(aws, config, stream.name, hours)
            self._lap("verify")

            self.ui.step(
                "auditing the archive: every object against the ledger, "
                + ("positions tiled (a queue: no source to ask about gaps)" if kind == RABBITMQ else "offsets tiled")
            )
            audit = run_audit(aws, config, stream, fed.location if kind == KAFKA else None)
            self._lap("audit")

            replay = None
            if kind == KAFKA:
                self.ui.step("replaying the archive into a new topic, checked record by record against the source")
                replay = self._replay(aws, config, data, stream, fed.location, _only(expected, ExpectedRecord), workdir)
                if avro is not None and "not_run" not in replay:
                    replay["compared_with"] = (
                        "the archived values: the registry-decoded JSON the mapping delivered (the source holds "
                        "Avro); the records it rejected, recovered as dead letters, byte for byte as produced"
                    )
                self._lap("replay")

            aggregation = None
            # Kafka runs the Spark job by default; Kinesis only when asked (--aggregate); RabbitMQ refuses it.
            if options.aggregate if options.aggregate is not None else kind == KAFKA:
                self.ui.step("aggregating the archive with PySpark (local[2]) into DynamoDB")
                aggregation = run_demo_aggregation(aws, stream, _only(expected, ExpectedRecord))
                self._lap("aggregate")
            self.timings["total"] = time.monotonic() - self._started
            return DemoResult(
                options=options,
                workdir=workdir,
                stream=stream.name,
                topic=stream.source.topic,
                bootstrap_servers=fed.location if kind == KAFKA else None,
                endpoint=aws.endpoint,
                verification=report,
                mapping=fed.delivery,
                chaos=chaos.log if options.chaos else None,
                epochs=fed.epochs,
                late_produced=sum(order.late for order in orders),
                drained_objects=drained,
                sweeper=sweeper,
                aggregation=aggregation,
                ledger_only=ledger_only,
                s3_only=s3_only,
                audit=audit,
                replay=replay,
                staging_left=sum(1 for _ in aws.staging_root.rglob("*.seg")),
                timings_s=self.timings,
                source=kind,
                stream_arn=fed.location if kind == KINESIS else None,
                shards=fed.shards,
                schema_registry=None
                if avro is None or recovered is None
                else {
                    **avro.summary(),
                    # each record once (a redelivered batch's rejections are in "rejections")
                    "rejected": sum(fed.delivery.registry_rejected_records.values()),
                    "reasons": dict(sorted(fed.delivery.registry_rejected_records.items())),
                    "rejections": fed.delivery.registry_rejected,
                    "recovered": recovered["records"],
                    "recovery": recovered,
                },
                queue=fed.queue,
                tombstones=_tombstones(expected, report, replay) if kind == KAFKA else None,
            )

    def _replay(
        self,
        aws: LocalAws,
        config: TidemarkConfig,
        data: dict[str, Any],
        stream: StreamConfig,
        bootstrap: str,
        expected: list[ExpectedRecord],
        workdir: Path,
    ) -> dict[str, Any]:
        """``tidemark replay`` of every archived hour (with ``--chaos``: one replay process killed
        first); a format that keeps no envelope (csv, text, typed columns) is not replayed."""
        chaos = random.Random(self.options.seed) if self.options.chaos else None
        try:
            return run_replay(
                aws, config, data, stream, Runtime.from_env().ledger, bootstrap, expected, workdir=workdir, chaos=chaos
            )
        except UnreplayableFormatError as exc:
            return {"not_run": str(exc)}

    def _drain(
        self, stream: StreamConfig, partitions: list[PartitionId], cold: ChildInvoker, chaos: Chaos | None
    ) -> int:
        if chaos is not None:  # kill a drain at a flush-side point first; the next drain recovers
            for partition in partitions:
                crash_at = chaos.arm(FLUSH_POINTS, max_nth=1)
                chaos.record(crash_at, cold.drain(stream.name, [partition], crash_at=crash_at))
        runtime = Runtime.from_env()
        drained = 0
        for partition in partitions:
            drained += len(runtime.writer(stream, partition).drain().flushes)
        return drained


def verify_feed(aws: LocalAws, config: TidemarkConfig, stream: StreamConfig, expected: Expected) -> VerificationReport:
    """Read the archive back from S3 and check it against what the source was fed, with the
    checker of the source's kind: a log's records by (partition, position) -- ``verify_archive``
    --, a queue's messages, which the ledger numbers as it accepts them, by their ids --
    ``verify_messages``: each id once, and the positions tiling ``0..n-1``."""
    s3, raw, errors = aws.s3(), config.archive.raw_prefix, config.archive.errors_prefix
    if stream.source.shape.assigns_positions:
        messages = _only(expected, ExpectedMessage)
        return verify_messages(
            s3, aws.bucket, stream.name, messages, config=stream, raw_prefix=raw, errors_prefix=errors
        )
    records = _only(expected, ExpectedRecord)
    return verify_archive(s3, aws.bucket, stream.name, records, config=stream, raw_prefix=raw, errors_prefix=errors)


def _only(expected: Expected, kind: type[_E]) -> list[_E]:
    """``expected`` as a list of ``kind`` (a runner hands back one kind of expectation)."""
    items = [item for item in expected if isinstance(item, kind)]
    if len(items) != len(expected):
        raise DemoError(f"expected {kind.__name__} items, got {type(expected[0]).__name__}")
    return items


def _tombstones(expected: Expected, report: VerificationReport, replay: dict[str, Any] | None) -> dict[str, int | None]:
    """Tombstones produced (a null value), found archived as null values by the checker (each is
    also checked where it belongs, record by record) and replayed as null values (``None``: the
    replay did not run)."""
    produced = sum(1 for item in expected if isinstance(item, ExpectedRecord) and item.value is None)
    replayed = None if replay is None or "not_run" in replay else int(replay.get("tombstones", 0))
    return {"produced": produced, "archived": report.tombstones, "replayed": replayed}


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


def run_hours(start_ms: int, end_s: float, timezone: str) -> set[str]:
    """The hours the run spanned, in the stream's zone: dead letters are filed under their Kafka
    timestamp's hour, which is produce time here. Sampled every 15 minutes and at both ends, so
    zones with half- and quarter-hour offsets are covered."""
    labels = HourBucketer(timezone)
    end_ms = int(end_s * 1000)
    return {labels.label(ms) for ms in [*range(start_ms, end_ms, 900_000), end_ms]}


def run_recover(aws: LocalAws, stream: StreamConfig, bootstrap: str, ui: DemoUI | None = None) -> dict[str, Any]:
    """``tidemark recover`` of every partition of the stream's topic: a ``Recoverer`` per partition,
    reading the records the mapping never delivered from the broker at ``bootstrap``."""
    runtime = Runtime.from_env()
    s3 = aws.s3()
    reports: list[PartitionRecovery] = []
    with KafkaLog(bootstrap, stream.source.topic) as log:
        partitions = sorted(log.partitions(), key=partition_sort_key)
        for partition in partitions:
            writer = runtime.writer(stream, partition)
            # The demo's mapping starts at TRIM_HORIZON with a group of its own: the archive begins at
            # the topic's start, and a partition's first records may be among those withheld.
            recoverer = Recoverer(writer, runtime.ledger, s3, aws.bucket, log, clock=runtime.clock, from_log_start=True)
            reports.append(recoverer.run())
            if ui is not None:
                ui.progress("recover", len(reports), len(partitions))
    return {
        "records": sum(report.records for report in reports),
        "objects": sum(len(unit.keys) for report in reports for unit in report.units if not unit.by_another_run),
        "partitions": {str(report.partition): report.records for report in reports},
        "not_retained": {str(r.partition): [list(pair) for pair in r.not_retained] for r in reports if r.not_retained},
        "unchecked": {str(report.partition): report.unchecked for report in reports if report.unchecked},
    }


def run_audit(aws: LocalAws, config: TidemarkConfig, stream: StreamConfig, bootstrap: str | None) -> dict[str, Any]:
    """``tidemark audit`` over every hour: gaps asked of Kafka itself (a Kafka source)."""
    ledger = Runtime.from_env().ledger
    with contextlib.ExitStack() as stack:
        probe = None
        if bootstrap is not None:
            probe = stack.enter_context(KafkaLog(bootstrap, stream.source.topic))
        report = Auditor(config, stream.name, ledger, aws.s3(), aws.bucket, probe=probe).run()
    return {
        "clean": report.clean,
        "complete": report.complete,  # nothing left unchecked: proven whole
        "unchecked": len(report.unchecked),
        "objects": report.objects,
        "records": report.records,
        "partitions": len(report.partitions),
        "gaps_explained": sum(summary.gaps_explained for summary in report.partitions),
        "findings": [finding.line() for finding in report.findings],
    }


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
