"""Aggregate archived event hours into DynamoDB (the EMR Serverless job's entry point).

    spark-submit jobs/aggregate.py --stream orders                  # the hours the ledger marks dirty
    spark-submit jobs/aggregate.py --stream orders --hours 2026-11-21T00 2026-11-21T23   # a backfill range
    spark-submit jobs/aggregate.py --stream orders --config s3://bucket/key.json       # as deployed
    spark-submit jobs/aggregate.py --stream orders --archive-root s3://bucket   # Spark's own readers

Objects are fetched with boto3 and read with Arrow by default (every format, no Hadoop S3
connector needed). ``--archive-root`` names where Spark itself can read the archive (on EMR
``s3://<bucket>``, served by EMRFS; locally ``file:///dir``): Parquet, JSON Lines and CSV are
then read with ``spark.read.parquet/json/csv`` from there, the other formats (Avro, zstd, bytes)
still with Arrow, from the same root.

After the run the driver prints the run's summary (JSON), one log line per hour it could not
aggregate (those stay dirty and are retried) and per aggregation naming fields no record has,
and puts the run's figures into CloudWatch (``jobs.aggregation.metrics``).

Settings come from the same environment as the Lambdas (``TIDEMARK_CONFIG[_JSON]``,
``TIDEMARK_BUCKET``, ``TIDEMARK_LEDGER_TABLE``) plus ``TIDEMARK_AGGREGATES_TABLE``; ``--config``
names the configuration instead of the environment (the deployed schedule passes the S3 asset
the stack uploads: a Spark property holds at most 1,024 characters, too few for the config).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timedelta
from typing import Any

from pyspark.sql import SparkSession

from jobs.aggregation.job import run_aggregation
from jobs.aggregation.metrics import log_report, publish
from jobs.aggregation.reader import ObjectStore
from jobs.aggregation.session import JOB_CONF
from jobs.aggregation.sink import AggregateSink
from tidemark.config import TidemarkConfig, load_config, parse_config
from tidemark.config.loader import load_config_from_env
from tidemark.exceptions import ConfigError
from tidemark.ledger.dynamodb import DynamoDBLedger

ENV_AGGREGATES_TABLE = "TIDEMARK_AGGREGATES_TABLE"


def hour_range(first: str, last: str) -> list[str]:
    """Every hour label from ``first`` to ``last`` inclusive."""
    start, end = (datetime.strptime(label, "%Y-%m-%dT%H") for label in (first, last))
    if end < start:
        raise ConfigError(f"--hours: {last} is before {first}")
    hours = []
    while start <= end:
        hours.append(start.strftime("%Y-%m-%dT%H"))
        start += timedelta(hours=1)
    return hours


def load_job_config(location: str | None, *, s3: Any | None = None) -> TidemarkConfig:
    """``--config``: ``s3://bucket/key`` (JSON), a local YAML/JSON path, or None for the environment."""
    if location is None:
        return load_config_from_env()
    if not location.startswith("s3://"):
        return load_config(location)
    bucket, _, key = location.removeprefix("s3://").partition("/")
    if not bucket or not key:
        raise ConfigError(f"--config: {location!r} is not an s3://bucket/key address")
    if s3 is None:
        import boto3

        s3 = boto3.client("s3")
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ConfigError(f"{location}: not valid JSON: {exc}") from None
    return parse_config(data, origin=location)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream", required=True, help="stream to aggregate (a name in the config)")
    parser.add_argument("--hours", nargs=2, metavar=("FIRST", "LAST"), help="explicit hour range (backfill)")
    parser.add_argument("--tasks", type=int, default=8, help="read tasks (objects are spread over them)")
    parser.add_argument("--config", help="s3://bucket/key or a path (default: TIDEMARK_CONFIG[_JSON])")
    parser.add_argument(
        "--archive-root",
        metavar="URI",
        help="read Parquet, JSON Lines and CSV with Spark's readers from here: s3://<bucket> (EMR) or file:///dir",
    )
    args = parser.parse_args(argv)
    if args.archive_root is not None:
        try:
            ObjectStore(args.archive_root)
        except ValueError as exc:
            parser.error(f"--archive-root: {exc}")
    config = load_job_config(args.config)
    try:
        stream = config.stream(args.stream)
        bucket, ledger_table, aggregates = (
            os.environ[name] for name in ("TIDEMARK_BUCKET", "TIDEMARK_LEDGER_TABLE", ENV_AGGREGATES_TABLE)
        )
    except KeyError as exc:
        sys.exit(f"aggregate: missing {exc.args[0]}")
    spark = SparkSession.builder.appName(f"tidemark-aggregate-{stream.name}").config(map={**JOB_CONF}).getOrCreate()
    try:
        report = run_aggregation(
            spark,
            stream,
            ledger=DynamoDBLedger(ledger_table),
            bucket=bucket,
            sink=AggregateSink(aggregates),
            hours=hour_range(*args.hours) if args.hours else None,
            tasks=args.tasks,
            archive_root=args.archive_root,
        )
    finally:
        spark.stop()
    summary = report.summary()
    print(json.dumps(summary))
    log_report(summary)
    publish(summary, cloudwatch=cloudwatch_client())


def cloudwatch_client() -> Any:
    """CloudWatch with boto3's standard retry mode (the driver puts one request per run)."""
    import boto3
    from botocore.config import Config

    return boto3.client("cloudwatch", config=Config(retries={"mode": "standard", "max_attempts": 5}))


if __name__ == "__main__":
    main()
