"""Which archive an operator command works on: the bucket and ledger table, and how to reach them.

In AWS (boto3's default credentials and region), ``--stack-name`` reads the names from the
deployed stack's outputs (``ArchiveBucketName``, ``LedgerTableName``); ``--bucket`` and
``--ledger-table`` (or the ``TIDEMARK_BUCKET``/``TIDEMARK_LEDGER_TABLE`` environment the
Lambdas get) name them directly. ``--endpoint-url`` points every client at another endpoint:
the embedded stack's moto server.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import boto3
import typer
from botocore.exceptions import BotoCoreError, ClientError

from tidemark.cli.kafka_properties import read_properties
from tidemark.config.loader import load_config
from tidemark.config.model import TidemarkConfig
from tidemark.exceptions import ConfigError
from tidemark.names import HOUR, matches
from tidemark.runtime import ENV_BUCKET, ENV_LEDGER_TABLE, Runtime
from tidemark.sources import PartitionId, partition_of_text

DEFAULT_CONFIG = Path("config/tidemark.yaml")
BUCKET_OUTPUT = "ArchiveBucketName"
TABLE_OUTPUT = "LedgerTableName"

StreamOption = Annotated[str, typer.Option(help="The stream, as named in the configuration.")]
ConfigOption = Annotated[Path, typer.Option(help="Stream configuration.")]
KafkaConfigOption = Annotated[
    Path | None,
    typer.Option(
        help="librdkafka client properties (key=value lines, as a Java client's .properties file) for the "
        "brokers: security.protocol, sasl.mechanism, sasl.username, ssl.ca.location, ...",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the report as JSON instead of text.")]
StackOption = Annotated[
    str | None, typer.Option("--stack-name", help="Read the bucket and ledger table from this stack's outputs.")
]
BucketOption = Annotated[
    str | None, typer.Option("--bucket", envvar=ENV_BUCKET, help="The archive bucket (default: $TIDEMARK_BUCKET).")
]
TableOption = Annotated[
    str | None,
    typer.Option("--ledger-table", envvar=ENV_LEDGER_TABLE, help="The ledger table (default: $TIDEMARK_LEDGER_TABLE)."),
]
EndpointOption = Annotated[
    str | None, typer.Option("--endpoint-url", help="AWS endpoint, e.g. the embedded stack's moto server.")
]


@dataclass(frozen=True)
class Target:
    bucket: str
    table: str
    endpoint_url: str | None = None

    def s3(self) -> Any:
        return boto3.client("s3", endpoint_url=self.endpoint_url)

    def dynamodb(self) -> Any:
        return boto3.client("dynamodb", endpoint_url=self.endpoint_url)


def resolve(
    stack_name: str | None,
    bucket: str | None,
    table: str | None,
    endpoint_url: str | None,
    *,
    needs_bucket: bool = True,
) -> Target:
    """The target the options name; a ``ConfigError`` saying what is missing otherwise (a
    command that reads the ledger only needs no bucket)."""
    if stack_name:
        outputs = stack_outputs(stack_name, endpoint_url)
        bucket = bucket or outputs.get(BUCKET_OUTPUT)
        table = table or outputs.get(TABLE_OUTPUT)
        if not bucket or not table:
            raise ConfigError(f"stack {stack_name!r} has no {BUCKET_OUTPUT}/{TABLE_OUTPUT} outputs: is it Tidemark's?")
    if (needs_bucket and not bucket) or not table:
        raise ConfigError(
            "which archive? give --stack-name, or --bucket and --ledger-table "
            f"(or ${ENV_BUCKET} and ${ENV_LEDGER_TABLE})"
        )
    return Target(bucket or "", table, endpoint_url)


@contextmanager
def scratch_runtime(loaded: TidemarkConfig, target: Target, command: str) -> Iterator[Runtime]:
    """The runtime of an operator command whose records come from the source, not from a staging
    mount (``rearchive``, ``recover``, ``abandon``): its segment store is never written, and
    objects are rendered into a spool file under a scratch directory removed on exit."""
    with tempfile.TemporaryDirectory(prefix=f"tidemark-{command}-") as scratch:
        yield Runtime.build(
            loaded,
            bucket=target.bucket,
            table=target.table,
            staging_root=scratch,
            spool_dir=scratch,
            s3_client=target.s3(),
            dynamodb_client=target.dynamodb(),
        )


def stack_outputs(stack_name: str, endpoint_url: str | None = None) -> dict[str, str]:
    client = boto3.client("cloudformation", endpoint_url=endpoint_url)
    try:
        stacks = client.describe_stacks(StackName=stack_name)["Stacks"]
    except (ClientError, BotoCoreError) as exc:
        raise ConfigError(f"--stack-name {stack_name!r}: {exc}") from None
    return {output["OutputKey"]: output["OutputValue"] for output in stacks[0].get("Outputs", [])}


def partition_ids(given: list[str]) -> list[PartitionId]:
    """``--partition`` values: Kafka partition numbers or Kinesis shard ids."""
    try:
        return [partition_of_text(text) for text in given]
    except ValueError as exc:
        raise ConfigError(f"--partition: {exc} (a partition number, or a Kinesis shard id)") from None


def load_streams(config: Path, *streams: str | None) -> TidemarkConfig:
    """The configuration at ``config``; a ``ConfigError`` naming the streams it has when one of
    ``streams`` (``--stream`` values; ``None``: not given) is not among them."""
    loaded = load_config(config)
    names = [candidate.name for candidate in loaded.streams]
    for stream in streams:
        if stream is not None and stream not in names:
            raise ConfigError(f"--stream {stream!r}: not in {config} (streams: {', '.join(names)})")
    return loaded


def check_hours(from_hour: str | None, to_hour: str | None) -> None:
    """``--from``/``--to``: event hours like 2026-11-21T07 (``None``: not given), in order."""
    for name, hour in (("--from", from_hour), ("--to", to_hour)):
        if hour is not None and not matches(HOUR, hour):
            raise ConfigError(f"{name} {hour!r}: an event hour looks like 2026-11-21T07")
    if from_hour is not None and to_hour is not None and from_hour > to_hour:
        raise ConfigError(f"--from {from_hour} is after --to {to_hour}")


def kafka_settings(path: Path | None) -> dict[str, str]:
    """``--kafka-config``: a Kafka client's ``.properties`` file (:mod:`tidemark.cli.kafka_properties`),
    ``{}`` without one; a warning on stderr when other users may read it."""
    if path is None:
        return {}
    return read_properties(path, warn=lambda message: typer.echo(message, err=True))
