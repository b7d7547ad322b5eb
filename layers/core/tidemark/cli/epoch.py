"""``tidemark epoch``: start a new position epoch for partitions whose positions were reset.

The archiver refuses a batch whose positions went back in a way no redelivery explains (a topic
recreated or changed, a cluster migrated, a truncated log): nothing is dropped, the mapping
retries, and the ``PositionResets`` alarm fires. The operator then decides where archiving
resumes on the new log and says so here; the archiver's next retry goes through.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import boto3
import typer

from tidemark.cli.errors import one_line_errors
from tidemark.cli.target import JsonOption, partition_ids
from tidemark.config.loader import load_config
from tidemark.exceptions import ConfigError
from tidemark.runtime import ENV_LEDGER_TABLE, Runtime

app = typer.Typer(
    help="Position epochs: start one after a topic was recreated or changed, or a cluster migrated.",
    no_args_is_help=True,
)

ConfigOption = Annotated[Path, typer.Option(help="Stream configuration (object keys are derived from it).")]
TableOption = Annotated[
    str,
    typer.Option("--ledger-table", envvar=ENV_LEDGER_TABLE, help="The ledger table (default: $TIDEMARK_LEDGER_TABLE)."),
]
EndpointOption = Annotated[
    str | None, typer.Option(help="DynamoDB endpoint, e.g. the embedded stack's moto server; default: AWS.")
]
StreamOption = Annotated[str, typer.Option(help="The stream, as named in the configuration.")]
PartitionsOption = Annotated[
    list[str],
    typer.Option(
        "--partition", "-p", help="A Kafka partition number or a Kinesis shard id (shardId-...); repeat for several."
    ),
]


def _runtime(config: Path, table: str, endpoint_url: str | None) -> Runtime:
    client = boto3.client("dynamodb", endpoint_url=endpoint_url) if endpoint_url else None
    s3 = boto3.client("s3", endpoint_url=endpoint_url) if endpoint_url else None
    # The epoch transition reads and writes the ledger only: sealed flushes are uploaded by the
    # next archiver run or sweep, which have the staging mount. Nothing is written under the
    # staging root given here (the store only remembers the path).
    return Runtime.build(
        load_config(config),
        bucket="unused-by-epoch-commands",
        table=table,
        staging_root=tempfile.gettempdir(),
        dynamodb_client=client,
        s3_client=s3,
    )


@app.command()
def start(
    stream: StreamOption,
    partitions: PartitionsOption,
    from_offset: Annotated[
        int,
        typer.Option(
            min=0,
            help="The first position of the new log that is not archived yet (a Kinesis sequence number for a "
            "shard): 0 (or the log start offset) "
            "for a recreated or new topic; for a migrated cluster, the new cluster's offset of the first "
            "record the archive does not hold (MirrorMaker's translated offset of the next record).",
        ),
    ],
    source: Annotated[
        str,
        typer.Option(
            help="The new log's identity, '<cluster>/<topic>' as the archiver logs it; default: adopt the "
            "source of the next batch."
        ),
    ] = "",
    reason: Annotated[str, typer.Option(help="Why, for the audit trail (kept in the ledger).")] = "",
    config: ConfigOption = Path("config/tidemark.yaml"),
    ledger_table: TableOption = "",
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start a new epoch at --from-offset for each partition.

    Every open buffer is sealed under the ending epoch (and uploaded by the next run); records
    below --from-offset are from then on taken as archived; objects of the new epoch carry
    `+e<n>+` in their keys, so they never collide with the old epoch's.
    """
    with one_line_errors():
        runtime = _runtime(config, ledger_table, endpoint_url)
        names = [candidate.name for candidate in runtime.config.streams]
        if stream not in names:
            raise ConfigError(f"--stream {stream!r}: not in {config} (streams: {', '.join(names)})")
        stream_config = runtime.config.stream(stream)
        started = []
        for partition in partition_ids(partitions):
            record = runtime.writer(stream_config, partition).start_epoch(from_offset, source=source, reason=reason)
            started.append({"stream": stream, "partition": partition} | asdict(record))
    if as_json:
        print(json.dumps(started, indent=2))
        return
    for item in started:
        print(
            f"{item['stream']}/{item['partition']}: epoch {item['epoch']} starts at offset {item['first_offset']} "
            f"(the previous epoch had staged up to {item['previous_staged_offset']})"
        )


@app.command("list")
def list_epochs(
    stream: StreamOption,
    partitions: PartitionsOption,
    config: ConfigOption = Path("config/tidemark.yaml"),
    ledger_table: TableOption = "",
    endpoint_url: EndpointOption = None,
    as_json: JsonOption = False,
) -> None:
    """Each partition's current epoch and every epoch start, oldest first."""
    with one_line_errors():
        runtime = _runtime(config, ledger_table, endpoint_url)
        rows: list[dict[str, Any]] = []
        for partition in partition_ids(partitions):
            state = runtime.ledger.load(stream, partition)
            rows.append(
                {
                    "stream": stream,
                    "partition": partition,
                    "epoch": state.epoch,
                    "source": state.source,
                    "staged_offset": state.staged_offset,
                    "starts": [asdict(start) for start in runtime.ledger.epochs(stream, partition)],
                }
            )
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print(f"{row['stream']}/{row['partition']}: epoch {row['epoch']}, source {row['source'] or '(none yet)'}")
        for start in row["starts"]:
            print(f"  epoch {start['epoch']}: from offset {start['first_offset']} ({start['reason'] or 'no reason'})")
