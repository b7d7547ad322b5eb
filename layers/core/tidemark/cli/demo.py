"""``tidemark demo``: the whole pipeline on this machine, ending in a PASS/FAIL report."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tidemark.cli.errors import EXIT_FAILED, one_line_errors
from tidemark.cli.render import RichUI, render_result
from tidemark.embedded.demo import Demo, DemoError, DemoOptions
from tidemark.embedded.workload import WorkloadSpec
from tidemark.sources import KAFKA, KINESIS, RABBITMQ

DEFAULT_FLUSH_RECORDS = 2000


class Source(StrEnum):
    kafka = KAFKA
    kinesis = KINESIS
    rabbitmq = RABBITMQ


def demo(
    records: Annotated[int, typer.Option(min=1, help="Orders to produce.")] = 50_000,
    source: Annotated[
        Source | None,
        typer.Option(
            help="Where the orders come from: a Kafka topic (the embedded broker), a Kinesis data stream "
            "(on moto, with a shard split mid-run) or a RabbitMQ queue (the installed rabbitmq-server on loopback, "
            "archived through a local Amazon MQ mapping: acks after success, nack and requeue after a failure; "
            "some messages published twice and a few without a message id; checked by message id). "
            "Default: the --config stream's kind; kafka without --config.",
            show_default=False,
        ),
    ] = None,
    partitions: Annotated[
        int, typer.Option(min=1, max=64, help="Kafka: partitions of the topic (when it is created).")
    ] = 4,
    shards: Annotated[int, typer.Option(min=1, max=64, help="Kinesis: shards of the stream (when it is created).")] = 2,
    split: Annotated[
        bool,
        typer.Option(
            "--split/--no-split",
            help="Kinesis: after half the orders, split the shard with the most undelivered records; the rest "
            "go to its two children, which the mapping must read only after the parent.",
        ),
    ] = True,
    hours: Annotated[int, typer.Option(min=1, max=48, help="Event times are spread over this many past hours.")] = 4,
    late_share: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of records arriving 1-6 hours late.")
    ] = 0.03,
    malformed_share: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of malformed records (not JSON, no or bad event time).")
    ] = 0.002,
    tombstone_share: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Kafka: share of tombstones among the orders (null values deleting earlier orders' keys, as a "
            "compacted topic or a CDC connector has), checked archived and replayed as null values.",
        ),
    ] = 0.002,
    chaos: Annotated[
        bool,
        typer.Option(
            "--chaos/--no-chaos",
            help="Kill handler processes at random crash points and lose some offset commits (Kinesis: "
            "checkpoints; RabbitMQ: acks, the connection closed so the broker requeues the batch); "
            "redelivery and recovery must still give exactly once.",
        ),
    ] = False,
    crash_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="With --chaos: share of invocations run in a process set to die.")
    ] = 0.2,
    lost_commit_rate: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="With --chaos: share of successful batches whose commit (Kinesis: checkpoint, RabbitMQ: ack) is lost.",
        ),
    ] = 0.03,
    no_aggregate: Annotated[
        bool,
        typer.Option(
            "--no-aggregate",
            help="Skip the last step, the PySpark aggregation job (local[2], needs Java).",
        ),
    ] = False,
    aggregate: Annotated[
        bool,
        typer.Option(
            "--aggregate",
            help="End with the PySpark aggregation job even for a Kinesis source, where it is skipped by default "
            "(not for RabbitMQ: the job does not read a queue's archive yet).",
        ),
    ] = False,
    recreate_topic: Annotated[
        bool,
        typer.Option(
            "--recreate-topic",
            help="Kafka: delete and create the topic after half the orders (its offsets restart at 0): the archiver "
            "refuses the new log until an operator starts a new epoch, which the demo does; every record is "
            "then archived exactly once, across both epochs.",
        ),
    ] = False,
    avro: Annotated[
        bool,
        typer.Option(
            "--avro",
            help="Kafka: produce the orders as Avro values in Confluent's wire format (magic byte, schema id). A "
            "local Confluent-compatible schema registry (loopback, basic auth from a Secrets Manager secret) decodes "
            "them to JSON, as the mapping's registry integration (source.schema_registry, record_format json) does "
            "in AWS; the archive keeps each value's schema id.",
        ),
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed for the workload and the chaos; a run replays with its seed.")] = 7,
    format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="Archive in this format instead of the stream's (jsonl, parquet, avro, csv, text, bytes), "
            "with its default compression.",
        ),
    ] = None,
    compression: Annotated[str | None, typer.Option(help="And this compression (e.g. zstd).")] = None,
    partition_by: Annotated[
        list[str] | None,
        typer.Option(
            "--partition-by",
            help="Partition objects by this field (_key, _value.<path>, _header.<name>, _topic, _partition); "
            "repeat for more levels.",
        ),
    ] = None,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka: use this broker (host:port,...) instead of starting the embedded one.")
    ] = None,
    topic: Annotated[
        str | None,
        typer.Option(
            help="Topic to produce to and archive (default: the stream's topic), with Kinesis the stream's "
            "name (replacing the one in source.stream_arn), with RabbitMQ the queue; must be empty."
        ),
    ] = None,
    endpoint_url: Annotated[
        str | None, typer.Option(help="Use this S3/DynamoDB (and Kinesis) endpoint instead of starting moto.")
    ] = None,
    broker_port: Annotated[
        int,
        typer.Option(
            min=0, max=65535, help="Kafka: embedded broker port, RabbitMQ: its AMQP port; 0 picks a free one."
        ),
    ] = 0,
    moto_port: Annotated[int, typer.Option(min=0, max=65535, help="moto server port; 0 picks a free one.")] = 0,
    batch_size: Annotated[
        int | None, typer.Option(min=1, max=10_000, help="ESM batch size (default: the stream's source.batch_size).")
    ] = None,
    batching_window: Annotated[
        float | None,
        typer.Option(min=0.0, max=300.0, help="ESM batching window in seconds (default: the stream's source setting)."),
    ] = None,
    flush_records: Annotated[
        int,
        typer.Option(
            min=0,
            help="Override the stream's flush.max_records so objects rotate during a short run; 0 keeps the config's.",
        ),
    ] = DEFAULT_FLUSH_RECORDS,
    config: Annotated[
        Path | None,
        typer.Option(
            help="Stream configuration. Default: config/tidemark.yaml (Kafka), config/kinesis.yaml with "
            "--source kinesis, config/rabbitmq.yaml with --source rabbitmq.",
            show_default=False,
        ),
    ] = None,
    stream: Annotated[str | None, typer.Option(help="Stream to drive (default: the config's first).")] = None,
    bucket: Annotated[str, typer.Option(help="Archive bucket name.")] = "tidemark-demo-archive",
    ledger_table: Annotated[str, typer.Option(help="Ledger table name.")] = "tidemark-demo-ledger",
    workdir: Annotated[
        Path | None,
        typer.Option(help="Directory for staging, spool and logs (default: a new temporary directory, kept)."),
    ] = None,
    report_json: Annotated[Path | None, typer.Option(help="Also write the report as JSON to this file.")] = None,
    project_dir: Annotated[Path, typer.Option(help="Project root holding functions/.")] = Path("."),
) -> None:
    """Run the pipeline end to end on this machine and check the archive record by record.

    Starts a Kafka-protocol broker and moto (S3 + DynamoDB) on free loopback ports, produces an
    order workload (several event hours, late and malformed records, a few tombstones), archives it through a
    local event source mapping and the real archiver handler, drains the buffers, then reads
    every object back from S3. With `--source kinesis` the orders go to a Kinesis data stream on
    moto instead, one of whose shards is split mid-run; with `--source rabbitmq` to a RabbitMQ
    queue (rabbitmq-server on loopback), archived through a local Amazon MQ event source mapping
    and checked by message id. Exit code 0 on PASS, 1 on FAIL, 2 if the demo could not run.
    """
    console = Console()
    with one_line_errors():
        if aggregate and no_aggregate:
            raise DemoError("give --aggregate or --no-aggregate, not both")
        options = DemoOptions(
            project_dir=project_dir.resolve(),
            config_path=config,
            source=None if source is None else source.value,
            shards=shards,
            split=split,
            workload=WorkloadSpec(
                records=records,
                hours=hours,
                late_share=late_share,
                malformed_share=malformed_share,
                seed=seed,
                tombstone_share=tombstone_share,
            ),
            workdir=workdir,
            stream=stream,
            topic=topic,
            partitions=partitions,
            bootstrap_servers=bootstrap_servers,
            endpoint_url=endpoint_url,
            broker_port=broker_port,
            moto_port=moto_port,
            bucket=bucket,
            table=ledger_table,
            batch_size=batch_size,
            batching_window_ms=None if batching_window is None else round(batching_window * 1000),
            flush_records=flush_records or None,
            aggregate=False if no_aggregate else (True if aggregate else None),
            chaos=chaos,
            recreate_topic=recreate_topic,
            avro=avro,
            format=format,
            compression=compression,
            partition_by=tuple(partition_by or ()),
            crash_rate=crash_rate,
            lost_commit_rate=lost_commit_rate,
            seed=seed,
        )
        with RichUI(console) as ui:
            result = Demo(options, ui).run()
    render_result(console, result)
    if report_json is not None:
        report_json.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)
