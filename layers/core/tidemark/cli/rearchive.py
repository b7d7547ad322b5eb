"""``tidemark rearchive``: archive a quarantined flush again from Kafka, exactly once, and clear
its quarantine entry (see ``tidemark.rearchive.rearchiver``). Exit code 0 when every flush in the
range is archived; 2 when the command refused (the ledger and the bucket are then unchanged, or
hold an upload a rerun finishes)."""

from __future__ import annotations

import json
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
from tidemark.rearchive import Rearchiver, RearchiveReport


def rearchive(
    stream: StreamOption,
    partition: Annotated[str, typer.Option("--partition", "-p", help="The Kafka partition of the quarantined flush.")],
    from_offset: Annotated[
        int, typer.Option(min=0, help="First offset of the range: every quarantined flush wholly inside is rearchived.")
    ],
    to_offset: Annotated[int, typer.Option(min=0, help="Last offset of the range (inclusive).")],
    bootstrap_servers: Annotated[str, typer.Option(help="Kafka brokers to fetch the range from again.")],
    config: ConfigOption = DEFAULT_CONFIG,
    kafka_config: KafkaConfigOption = None,
    stack_name: StackOption = None,
    bucket: BucketOption = None,
    ledger_table: TableOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Fetch the records of quarantined flushes (`tidemark status` lists them) from Kafka again,
    check them against the ledger, upload each flush's object under the key it would have had, and
    clear the quarantine entry -- exactly once, safe to rerun. Refused when Kafka no longer holds
    the range, or holds other records there."""
    with one_line_errors():
        loaded = load_streams(config, stream)
        settings = kafka_settings(kafka_config)
        [partition_id] = partition_ids([partition])
        target = resolve(stack_name, bucket, ledger_table, endpoint_url)
        with scratch_runtime(loaded, target, "rearchive") as runtime:
            stream_config = loaded.stream(stream)
            writer = runtime.writer(stream_config, partition_id)
            with KafkaLog(bootstrap_servers, stream_config.source.topic, settings=settings) as log:
                report = Rearchiver(writer, runtime.ledger, log).run(from_offset, to_offset)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print(report)


def _print(report: RearchiveReport) -> None:
    for flush in report.flushes:
        if flush.by_another_run:
            print(f"{flush.flush_id}: offsets {flush.first}..{flush.last} rearchived by another run meanwhile")
        else:
            print(f"{flush.flush_id}: offsets {flush.first}..{flush.last}, {flush.records} records -> {flush.key}")
    print(
        f"{report.stream}/{report.partition}: {len(report.flushes)} quarantined flushes rearchived "
        f"({report.records} records); run `tidemark audit` to see the archive whole"
    )
