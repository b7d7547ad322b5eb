"""``tidemark audit``: prove a stream's archive whole, or name what is wrong with it.

Exit code 0: no findings; 1: findings (each on its own line: kind, partition, offsets, object key);
2: the audit could not run. The last line says ``clean`` only when every position the ledger
knows was checked; otherwise it says what was not (each range on a ``not checked:`` line).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Annotated

import typer

from tidemark.audit import Auditor, AuditReport
from tidemark.audit.findings import GAP
from tidemark.cli.errors import EXIT_FAILED, one_line_errors, progress
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
    check_hours,
    kafka_settings,
    load_streams,
    resolve,
)
from tidemark.exceptions import ConfigError
from tidemark.ledger.dynamodb import DynamoDBLedger
from tidemark.sources import KAFKA


def audit(
    stream: StreamOption,
    config: ConfigOption = DEFAULT_CONFIG,
    from_hour: Annotated[
        str | None, typer.Option("--from", help="First event hour to audit, e.g. 2026-11-21T07 (default: the first).")
    ] = None,
    to_hour: Annotated[str | None, typer.Option("--to", help="Last event hour to audit (default: the last).")] = None,
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(help="Kafka brokers: a gap in the archive is a loss only where the topic still holds records."),
    ] = None,
    kafka_config: KafkaConfigOption = None,
    stack_name: StackOption = None,
    bucket: BucketOption = None,
    ledger_table: TableOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Check every object of the stream against the ledger (presence both ways, SHA-256, record
    count, offsets), and -- over every hour -- that each partition's offsets are all archived
    once: no gap, no overlap."""
    with one_line_errors():
        check_hours(from_hour, to_hour)
        loaded = load_streams(config, stream)
        settings = kafka_settings(kafka_config)
        target = resolve(stack_name, bucket, ledger_table, endpoint_url)
        ledger = DynamoDBLedger(target.table, client=target.dynamodb())
        with ExitStack() as stack:
            probe = None
            if bootstrap_servers and loaded.stream(stream).source.shape.kind != KAFKA:
                raise ConfigError(f"--bootstrap-servers: stream {stream!r} does not read Kafka")
            if bootstrap_servers:
                from tidemark.kafka_log import KafkaLog

                probe = stack.enter_context(
                    KafkaLog(bootstrap_servers, loaded.stream(stream).source.topic, settings=settings)
                )
            auditor = Auditor(loaded, stream, ledger, target.s3(), target.bucket, probe=probe)
            report = auditor.run(from_hour, to_hour, progress=None if as_json else progress("audit", "objects read"))
    if as_json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        _print(report)
    if not report.clean:
        raise typer.Exit(EXIT_FAILED)


def _print(report: AuditReport) -> None:
    hours = f"{report.first_hour or 'first'}..{report.last_hour or 'last'}"
    print(f"stream {report.stream}, hours {hours}: {report.objects} objects, {report.records} records")
    gapped = {(finding.partition, finding.epoch) for finding in report.findings if finding.kind == GAP}
    for summary in report.partitions:
        where = f"  partition {summary.partition}" + (f" epoch {summary.epoch}" if summary.epoch else "")
        checked = summary.checked_from is not None and summary.checked_through is not None
        if summary.objects == 0:
            accepted = f", offsets {summary.checked_from}..{summary.checked_through} accepted" if checked else ""
            print(f"{where}: no object{accepted}")
            continue
        if summary.first is None:
            print(f"{where}: no object of it could be read")
            continue
        counted = "" if summary.positions_known else " (some keep no positions: counted)"
        through = ""
        if checked:
            verdict = "checked" if (summary.partition, summary.epoch) in gapped else "no gap"
            through = f", {verdict} {summary.checked_from}..{summary.checked_through}"
            if summary.checked_from == summary.first:
                through = f", {verdict} through {summary.checked_through}"
        explained = f" ({summary.gaps_explained} gaps Kafka holds no records in)" if summary.gaps_explained else ""
        held = f"offsets {summary.first}..{summary.last} in {summary.objects} objects{counted}"
        print(f"{where}: {held}{through}{explained}")
    if not report.gaps_checked:
        print("gaps: not checked (an hour range was given; records of one offset range span hours)")
    for unchecked in report.unchecked:
        print(unchecked.line())
    for abandoned in report.abandoned:
        print(abandoned.line())
    for finding in report.findings:
        print(finding.line())
    print(_verdict(report))


def _verdict(report: AuditReport) -> str:
    """The last line: ``clean`` only when every position was checked and nothing found."""
    ranges = f"{len(report.unchecked)} range{'' if len(report.unchecked) == 1 else 's'} not checked"
    if report.findings:
        return f"{len(report.findings)} findings" + (f"; {ranges}" if report.unchecked else "")
    if not report.gaps_checked:
        return "no findings in the objects of these hours (gaps not checked)"
    if report.unchecked:
        return f"no findings, but not proven whole: {ranges} (above)"
    if report.abandoned:
        lost = sum(item.records for item in report.abandoned)
        return f"clean, but for {lost} records an operator recorded lost (abandoned, above)"
    return "clean"
