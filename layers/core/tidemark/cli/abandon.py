"""``tidemark abandon``: record as lost a quarantined flush no command can archive any more, and
drop its quarantine entry (see ``tidemark.rearchive.abandon``). Exit code 0 when every flush in
the range is recorded lost; 2 when the command refused -- among others because Kafka still holds
the records (rearchive them instead) -- with the ledger and the bucket unchanged."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer

from tidemark.cli.errors import one_line_errors
from tidemark.cli.target import (
    DEFAULT_CONFIG,
    BucketOption,
    ConfigOption,
    EndpointOption,
    JsonOption,
    KafkaConfigOption,
    StackOption,
    StreamOption,
    TableOption,
    kafka_settings,
    load_streams,
    partition_ids,
    resolve,
    scratch_runtime,
)
from tidemark.kafka_log import KafkaLog
from tidemark.rearchive.abandon import Abandoner, AbandonReport, NoSource


def abandon(
    stream: StreamOption,
    partition: Annotated[str, typer.Option("--partition", "-p", help="The partition of the quarantined flush.")],
    from_offset: Annotated[
        int, typer.Option(min=0, help="First position of the range: each quarantined flush wholly inside is abandoned.")
    ],
    to_offset: Annotated[int, typer.Option(min=0, help="Last position of the range (inclusive).")],
    reason: Annotated[str, typer.Option(help="Why the records are given up (kept in the ledger, shown by audits).")],
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(help="Kafka brokers: asked first; a flush Kafka still holds is refused (rearchive it)."),
    ] = None,
    config: ConfigOption = DEFAULT_CONFIG,
    kafka_config: KafkaConfigOption = None,
    stack_name: StackOption = None,
    bucket: BucketOption = None,
    ledger_table: TableOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record quarantined flushes (`tidemark status` lists them) as lost, once the source is found
    not to hold their records any more (retention, a recreated topic; Kinesis and schema registry
    streams cannot be read again as delivered), and drop their quarantine entries: their hours can
    complete and be replayed, and every `tidemark audit` lists them as abandoned. Kafka streams
    need --bootstrap-servers. Nothing is uploaded or deleted in S3."""
    with one_line_errors():
        loaded = load_streams(config, stream)
        settings = kafka_settings(kafka_config)
        [partition_id] = partition_ids([partition])
        target = resolve(stack_name, bucket, ledger_table, endpoint_url)
        with scratch_runtime(loaded, target, "abandon") as runtime:
            stream_config = loaded.stream(stream)
            writer = runtime.writer(stream_config, partition_id)
            if bootstrap_servers is None:
                report = Abandoner(writer, runtime.ledger, NoSource()).run(from_offset, to_offset, reason)
            else:
                with KafkaLog(bootstrap_servers, stream_config.source.topic, settings=settings) as log:
                    report = Abandoner(writer, runtime.ledger, log).run(from_offset, to_offset, reason)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print(report)


def _print(report: AbandonReport) -> None:
    for flush in report.flushes:
        when = datetime.fromtimestamp(flush.abandoned_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        print(
            f"{flush.flush_id}: offsets {flush.first}..{flush.last}, {flush.records} records recorded lost at {when} "
            f"({flush.checked})"
        )
    for flush_id in report.by_another_run:
        print(f"{flush_id}: rearchived or abandoned by another run meanwhile")
    print(
        f"{report.stream}/{report.partition}: {len(report.flushes)} quarantined flushes abandoned "
        f"({report.records} records); `tidemark audit` lists them from now on"
    )
