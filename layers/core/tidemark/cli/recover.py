"""``tidemark recover``: archive from Kafka, exactly once, the records the event source mapping never
delivered -- its schema registry integration could not decode them, or a batch ran out of its
bounded retries (see ``tidemark.recover.recoverer``). A registry stream's are archived as dead
letters with their produced bytes; any other stream's where the archiver would have put them.

One line per partition: the records recovered and their objects, units another run recovered
meanwhile, missing offsets the topic no longer retains, or why nothing could be planned (nothing
committed yet, say: such a partition is named, and does not change the exit code). Then a summary
line; ``tidemark audit`` shows the archive whole afterwards.

Exit code 0: every missing record the log holds was recovered, or nothing was missing; 1: some
missing offsets are no longer retained by the topic -- their records are gone for good (each range
is named); 2: the command refused or could not run (a Kinesis or RabbitMQ stream, a unit claimed
under another configuration or epoch, brokers unreachable, AWS refusing a call): one line on
stderr (``--verbose`` adds the traceback), and what was recovered until then stays recovered -- a
rerun finishes the rest.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from tidemark.cli.errors import EXIT_ERROR, EXIT_FAILED, one_line_errors
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
from tidemark.exceptions import ConfigError, TidemarkError
from tidemark.kafka_log import KafkaLog
from tidemark.recover import PartitionRecovery, Recoverer, UnsupportedStreamError
from tidemark.sources import KAFKA, PartitionId, partition_sort_key


def recover(
    stream: StreamOption,
    bootstrap_servers: Annotated[str, typer.Option(help="Kafka brokers to read the missing records from.")],
    partitions: Annotated[
        list[str] | None,
        typer.Option(
            "--partition",
            "-p",
            help="Recover this partition (repeatable); by default every partition the topic has and every one "
            "the ledger registered.",
        ),
    ] = None,
    config: ConfigOption = DEFAULT_CONFIG,
    kafka_config: KafkaConfigOption = None,
    stack_name: StackOption = None,
    bucket: BucketOption = None,
    ledger_table: TableOption = None,
    endpoint_url: EndpointOption = None,
    from_log_start: Annotated[
        bool,
        typer.Option(
            "--from-log-start",
            help="The archive was meant to begin at the topic's start (the mapping started at TRIM_HORIZON with a "
            "group of its own): also recover what it withheld before the first record it delivered.",
        ),
    ] = False,
    as_json: JsonOption = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="On an error, also print its traceback on stderr.")
    ] = False,
) -> None:
    """Archive the records the event source mapping never delivered (undecodable by its schema
    registry integration, or abandoned after bounded retries): the offsets of a partition's
    committed range that no object holds are read from Kafka and archived -- exactly once, safe to
    rerun. `tidemark audit` names them as gaps before, and finds none after. Records the topic no
    longer retains are named, and exit 1."""
    reports: list[PartitionRecovery] = []
    with one_line_errors(), _exit_2_on_errors(verbose=verbose):
        loaded = load_streams(config, stream)
        stream_config = loaded.stream(stream)
        if stream_config.source.shape.kind != KAFKA:
            raise UnsupportedStreamError(
                f"--stream {stream!r}: recover reads Kafka; a {stream_config.source.shape.kind} source cannot be "
                "read again by position"
            )
        given = partition_ids(partitions or [])
        if any(not isinstance(partition, int) for partition in given):
            raise ConfigError(f"--partition: stream {stream!r} reads Kafka: give partition numbers")
        settings = kafka_settings(kafka_config)
        target = resolve(stack_name, bucket, ledger_table, endpoint_url)
        s3 = target.s3()
        with (
            scratch_runtime(loaded, target, "recover") as runtime,
            KafkaLog(bootstrap_servers, stream_config.source.topic, settings=settings) as log,
        ):
            in_topic: set[PartitionId] = set(log.partitions())
            absent = [partition for partition in given if partition not in in_topic]
            if absent:
                raise ConfigError(f"--partition {absent[0]}: {_not_in_topic(log.topic, in_topic)}")
            wanted = set(given) if given else in_topic | runtime.ledger.partitions(stream)
            for partition in sorted(wanted, key=partition_sort_key):
                if partition not in in_topic:
                    report = PartitionRecovery(stream, partition, unchecked=_not_in_topic(log.topic, in_topic))
                else:
                    writer = runtime.writer(stream_config, partition)
                    ledger, clock = runtime.ledger, runtime.clock
                    recoverer = Recoverer(
                        writer, ledger, s3, target.bucket, log, clock=clock, from_log_start=from_log_start
                    )
                    report = recoverer.run()
                reports.append(report)
                if not as_json:
                    print(_line(report), flush=True)
    if as_json:
        print(json.dumps(_summary(stream, reports), indent=2))
    else:
        print(_verdict(stream, reports))
    if any(report.not_retained for report in reports):
        raise typer.Exit(EXIT_FAILED)


@contextmanager
def _exit_2_on_errors(*, verbose: bool) -> Iterator[None]:
    """Inside ``one_line_errors`` (which makes a Tidemark error one line and exit 2): any other
    error -- AWS refusing a call, say -- is one line and exit 2 too, since exit 1 says records are
    lost; ``--verbose`` prints the traceback first."""
    try:
        yield
    except TidemarkError:
        if verbose:
            traceback.print_exc()
        raise
    except Exception as exc:  # noqa: BLE001 -- the exit code must not say "records lost" for a crash
        if verbose:
            traceback.print_exc()
        print(f"error: {' '.join(str(exc).split()) or type(exc).__name__}", file=sys.stderr)
        raise typer.Exit(EXIT_ERROR) from None


def _not_in_topic(topic: str, in_topic: set[PartitionId]) -> str:
    have = ", ".join(str(partition) for partition in sorted(in_topic, key=partition_sort_key)) or "none"
    return f"topic {topic!r} has no such partition now (it has {have}): its records cannot be read again"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _ranges(pairs: list[tuple[int, int]]) -> str:
    return ", ".join(f"{first}" if first == last else f"{first}..{last}" for first, last in pairs)


def _objects(report: PartitionRecovery) -> int:
    return sum(len(unit.keys) for unit in report.units if not unit.by_another_run)


def _line(report: PartitionRecovery) -> str:
    where = f"partition {report.partition}" + (f" epoch {report.epoch}" if report.epoch else "")
    if report.unchecked:
        return f"{where}: nothing planned: {report.unchecked}"
    mine = [unit for unit in report.units if not unit.by_another_run]
    theirs = [unit for unit in report.units if unit.by_another_run]
    parts = []
    if mine:
        parts.append(f"{_count(report.records, 'record')} recovered in {_count(_objects(report), 'object')}")
    if theirs:
        spans = _ranges([(unit.first, unit.last) for unit in theirs])
        parts.append(f"{_count(len(theirs), 'unit')} recovered by another run meanwhile (offsets {spans})")
    if report.not_retained:
        parts.append(
            f"offsets {_ranges(report.not_retained)} no longer retained by the topic: their records are gone for good"
        )
    return f"{where}: " + ("; ".join(parts) if parts else "nothing missing")


def _verdict(stream: str, reports: list[PartitionRecovery]) -> str:
    records = sum(report.records for report in reports)
    objects = sum(_objects(report) for report in reports)
    told = (
        f"stream {stream}: {_count(records, 'record')} recovered in {_count(objects, 'object')} over "
        f"{_count(len(reports), 'partition')}"
    )
    gone = [report for report in reports if report.not_retained]
    unchecked = [report for report in reports if report.unchecked]
    if gone:
        ranges = sum(len(report.not_retained) for report in gone)
        told += f"; {_count(ranges, 'missing range')} no longer retained by the topic (above): their records are lost"
    if unchecked:
        told += f"; nothing planned in {_count(len(unchecked), 'partition')} (above)"
    return told + "; run `tidemark audit` to see the archive whole"


def _summary(stream: str, reports: list[PartitionRecovery]) -> dict[str, Any]:
    return {
        "stream": stream,
        "records": sum(report.records for report in reports),
        "objects": sum(_objects(report) for report in reports),
        "not_retained": any(report.not_retained for report in reports),
        "partitions": [report.to_dict() for report in reports],
    }
