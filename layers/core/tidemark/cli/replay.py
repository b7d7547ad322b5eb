"""``tidemark replay``: produce a stream's archived records into a Kafka topic again, exactly once.

Exit code 0: every record of the hours is in the topic (produced now, or by an earlier run of
the same command); 2: the replay could not start or stopped -- run the same command again to
resume it.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Annotated

import typer

from tidemark.cli.errors import one_line_errors, progress
from tidemark.cli.target import (
    DEFAULT_CONFIG,
    BucketOption,
    ConfigOption,
    EndpointOption,
    JsonOption,
    KafkaConfigOption,
    StackOption,
    TableOption,
    check_hours,
    kafka_settings,
    load_streams,
    partition_ids,
    resolve,
)
from tidemark.exceptions import ConfigError
from tidemark.ledger.dynamodb import DynamoDBLedger
from tidemark.names import TOPIC, matches
from tidemark.replay import PARTITIONERS, SAME, KafkaTarget, Replayer, ReplayReport


def replay(
    stream: Annotated[str, typer.Option(help="The stream whose archive is replayed, as named in the configuration.")],
    from_hour: Annotated[str, typer.Option("--from", help="First event hour to replay, e.g. 2026-11-21T07.")],
    to_hour: Annotated[str, typer.Option("--to", help="Last event hour to replay (included).")],
    topic: Annotated[
        str,
        typer.Option(
            help="The Kafka topic to produce into. It must exist. It may be the source topic: a rerun leaves "
            "out the copies of this replay that the archiver archived again."
        ),
    ],
    bootstrap_servers: Annotated[str, typer.Option(help="Kafka brokers of the target topic.")],
    partitions: Annotated[
        list[str] | None,
        typer.Option(
            "--partition", "-p", help="Replay only these source partitions (repeatable; default: every one archived)."
        ),
    ] = None,
    partitioner: Annotated[
        str,
        typer.Option(
            help="same: each record to the partition number it came from (the topic needs enough partitions); "
            "key: Kafka's Java default partitioner, murmur2 of the key (a record without a key goes to "
            "its source partition modulo the topic's partitions).",
        ),
    ] = SAME,
    dead_letters: Annotated[
        bool,
        typer.Option(
            "--dead-letters/--no-dead-letters",
            help="Replay the dead letters too (records of the source topic the archiver could not file, "
            "with their original bytes).",
        ),
    ] = True,
    config: ConfigOption = DEFAULT_CONFIG,
    kafka_config: KafkaConfigOption = None,
    stack_name: StackOption = None,
    bucket: BucketOption = None,
    ledger_table: TableOption = None,
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Read the stream's committed objects of the hours back, in offset order per source partition,
    and produce every record into --topic exactly once: key, value, headers and timestamp
    (CreateTime) as archived, plus the headers `tidemark.source` (`stream/partition/epoch/offset`)
    and `tidemark.replay` (this replay's id).

    The producer is idempotent; after a crash or Ctrl-C, the same command resumes from what the
    topic already holds of this replay (one run at a time). JSON values replay as the archived
    JSON text (equal as JSON; whitespace may differ from the original bytes), text and bytes
    values byte for byte. Text and CSV objects, and typed value columns (value_schema), do not
    keep the record and are refused before anything is produced."""
    with one_line_errors():
        check_hours(from_hour, to_hour)
        if not matches(TOPIC, topic):
            raise ConfigError(f"--topic {topic!r}: not a Kafka topic name")
        if partitioner not in PARTITIONERS:
            raise ConfigError(f"--partitioner {partitioner!r}: one of {', '.join(PARTITIONERS)}")
        loaded = load_streams(config, stream)
        settings = kafka_settings(kafka_config)
        chosen = partition_ids(partitions) if partitions else None
        target = resolve(stack_name, bucket, ledger_table, endpoint_url)
        ledger = DynamoDBLedger(target.table, client=target.dynamodb())
        with ExitStack() as stack:
            kafka = stack.enter_context(KafkaTarget(bootstrap_servers, topic, settings=settings))
            replayer = Replayer(
                loaded,
                stream,
                ledger,
                target.s3(),
                target.bucket,
                kafka,
                topic=topic,
                first_hour=from_hour,
                last_hour=to_hour,
                partitions=chosen,
                partitioner=partitioner,
                dead_letters=dead_letters,
            )
            report = replayer.run(progress=None if as_json else progress("replay", "records"))
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print(report)


def _print(report: ReplayReport) -> None:
    print(
        f"replay {report.replay_id}: stream {report.stream}, hours {report.first_hour}..{report.last_hour} "
        f"into {report.topic} ({report.target_partitions} partitions, partitioner {report.partitioner})"
    )
    for part in report.partitions:
        dead = f" ({part.dead_letters} dead letters)" if part.dead_letters else ""
        print(
            f"  partition {part.partition}: {part.objects} objects, {part.produced} produced{dead}, "
            f"{part.skipped} already in {report.topic}"
        )
    if not report.partitions:
        print("nothing to replay: no committed object in these hours")
    print(f"produced {report.produced}, already there {report.skipped}")
    if report.later_objects:
        print(
            f"{report.later_objects} objects committed while the replay planned were left out: "
            "run the same command again to replay them"
        )
