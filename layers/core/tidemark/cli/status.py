"""``tidemark status``: where each partition of a stream stands. Exit code 1 when a partition is
stale (it needs attention: see ``tidemark.status``), 2 when the status could not be read."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from typing import Annotated

import typer

from tidemark.cli.errors import EXIT_FAILED, one_line_errors
from tidemark.cli.target import (
    DEFAULT_CONFIG,
    BucketOption,
    ConfigOption,
    EndpointOption,
    JsonOption,
    KafkaConfigOption,
    StackOption,
    TableOption,
    kafka_settings,
    load_streams,
    partition_ids,
    resolve,
)
from tidemark.ledger.dynamodb import DynamoDBLedger
from tidemark.sources import KAFKA
from tidemark.status import DEFAULT_GRACE_MS, StreamStatus, stream_status


def status(
    stream: Annotated[str | None, typer.Option(help="One stream (default: every stream of the configuration).")] = None,
    config: ConfigOption = DEFAULT_CONFIG,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka brokers: adds each partition's end offset and lag.")
    ] = None,
    partitions: Annotated[
        list[str] | None,
        typer.Option(
            "--partition",
            "-p",
            help="Also these partitions (numbers or shard ids); by default those the sweeper registered, plus "
            "the topic's with --bootstrap-servers.",
        ),
    ] = None,
    grace_minutes: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="How late a flush may be before its partition is flagged stale (default: 15, or the sweeper's "
            "interval plus 5 if that is longer: the sweeper flushes idle buffers once per interval).",
        ),
    ] = None,
    kafka_config: KafkaConfigOption = None,
    stack_name: StackOption = None,
    bucket: BucketOption = None,
    ledger_table: TableOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Per partition: staged offset, offset committed to S3 through, open buffers (hour, records,
    bytes, age), sealed and quarantined flushes, and -- with --bootstrap-servers -- Kafka's end
    offset and the lag. Stale partitions are flagged."""
    with one_line_errors():
        loaded = load_streams(config, stream)
        target = resolve(stack_name, bucket, ledger_table, endpoint_url, needs_bucket=False)
        ledger = DynamoDBLedger(target.table, client=target.dynamodb())
        now_ms = int(time.time() * 1000)
        if grace_minutes is None:
            grace_ms = max(DEFAULT_GRACE_MS, loaded.sweeper.interval_ms + 5 * 60_000)
        else:
            grace_ms = int(grace_minutes * 60_000)
        settings = kafka_settings(kafka_config)
        results: list[StreamStatus] = []
        for candidate in loaded.streams:
            if stream is not None and candidate.name != stream:
                continue
            with ExitStack() as stack:
                source = None
                if bootstrap_servers and candidate.source.shape.kind == KAFKA:
                    from tidemark.kafka_log import KafkaLog

                    source = stack.enter_context(KafkaLog(bootstrap_servers, candidate.source.topic, settings=settings))
                wanted = partition_ids(partitions or [])
                if source is not None:
                    wanted += source.partitions()
                results.append(
                    stream_status(
                        candidate,
                        ledger,
                        now_ms,
                        partitions=wanted,
                        source=source,
                        grace_ms=grace_ms,
                    )
                )
    if as_json:
        print(json.dumps([result.to_dict() for result in results], indent=2, default=str))
    else:
        for result in results:
            _print(result)
    if any(result.stale for result in results):
        raise typer.Exit(EXIT_FAILED)


def _print(result: StreamStatus) -> None:
    print(f"stream {result.stream}: {len(result.partitions)} partitions, {len(result.stale)} stale")
    for row in result.partitions:
        lag = "" if row.lag is None else f", end {row.end_offset}, lag {row.lag}"
        epoch = f" epoch {row.epoch}" if row.epoch else ""
        print(
            f"  partition {row.partition}{epoch}: staged {row.staged_offset}, in S3 through {row.committed_through}"
            f"{lag}, {row.open_buffers} open buffers" + (" STALE" if row.stale else "")
        )
        for buffer in row.buffers:
            where = f"{buffer.kind}/{buffer.hour}" + (f"/{buffer.folders}" if buffer.folders else "")
            detail = f" ({buffer.detail})" if buffer.detail else ""
            print(
                f"    {buffer.state:<11} {where}: {buffer.records} records, {buffer.bytes} bytes, "
                f"offsets {buffer.first}..{buffer.last}, age {buffer.age_s:.0f}s{detail}"
            )
        for reason in row.stale:
            print(f"    stale: {reason}")
