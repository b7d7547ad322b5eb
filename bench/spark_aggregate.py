"""Benchmark of the Spark aggregation job against Spark's native JSON reader, in one run.

1. Archive N order records (default 1,000,000) through the real archiver into moto server (S3 +
   DynamoDB) and drain them into objects.
2. Job: ``run_aggregation`` over every hour -- ledger plan, executor-side boto3 reads from moto
   in ``mapInArrow``, dedupe, value parsing, the stream's aggregations, DynamoDB writes.
3. Baseline: the same objects copied to local disk, read with ``spark.read.json`` and put
   through the same aggregations (no dedupe, no ledger, no DynamoDB). zstd objects (the
   default codec) are decompressed while they are copied, outside the timing: Hadoop here has
   no native zstd codec.

Both on ``local[2]``. Prints progress on stderr and, as its last line, JSON with
``records``, ``records_per_s`` (the job) and ``baseline_ratio`` (job time / baseline time).
``--smoke`` is a quick run of 20,000 records over 2 hours (Spark's start-up dominates it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
import orjson  # noqa: E402

from tidemark.archiver import Archiver  # noqa: E402
from tidemark.config import load_config, parse_config  # noqa: E402
from tidemark.embedded.moto_server import moto_server  # noqa: E402
from tidemark.formats.compression import decompress  # noqa: E402
from tidemark.ledger.dynamodb import ledger_table_schema  # noqa: E402
from tidemark.records.esm import EventSource, build_event  # noqa: E402
from tidemark.records.model import Record  # noqa: E402
from tidemark.runtime import Runtime  # noqa: E402

HOUR_MS = 3_600_000
#: ``--smoke`` (what ``make test`` runs, so the bench cannot rot)
SMOKE = {"records": 20_000, "hours": 2}


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def orders(count: int, partitions: int, hours: int, seed: int = 1) -> list[list[Record]]:
    rng = random.Random(seed)
    start = (int(time.time() * 1000) // HOUR_MS - hours) * HOUR_MS
    per = count // partitions
    out: list[list[Record]] = []
    for partition in range(partitions):
        records = []
        for offset in range(per):
            event_ms = start + hours * HOUR_MS * offset // per
            value = orjson.dumps(
                {
                    "order_id": f"o-{partition}-{offset}",
                    "customer_id": f"c-{rng.randint(1, 20_000)}",
                    "product_id": f"p-{rng.randint(1, 200):03d}",
                    "price": round(rng.uniform(1, 300), 2),
                    "quantity": rng.randint(1, 5),
                    "created_at": event_ms,
                }
            )
            records.append(Record("orders", partition, offset, event_ms, value, f"c{offset}".encode()))
        out.append(records)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--smoke", action="store_true", help="20,000 records over 2 hours (unless given)")
    args = parser.parse_args(argv)
    if args.smoke:  # smaller defaults; options given still win
        parser.set_defaults(**SMOKE)
        args = parser.parse_args(argv)
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    data = json.loads(load_config(ROOT / "config" / "tidemark.yaml").model_dump_json())
    data["streams"][0]["flush"]["max_records"] = 200_000
    config = parse_config(data)
    stream = config.streams[0]
    with moto_server() as endpoint, tempfile.TemporaryDirectory(prefix="tidemark-spark-bench-") as scratch:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        s3, dynamodb = boto3.client("s3"), boto3.client("dynamodb")
        s3.create_bucket(Bucket="bench")
        dynamodb.create_table(**ledger_table_schema("ledger"))
        from jobs.aggregation.sink import AggregateSink, aggregates_table_schema

        dynamodb.create_table(**aggregates_table_schema("aggregates"))
        staging = Path(scratch) / "staging"
        staging.mkdir()
        runtime = Runtime.build(config, bucket="bench", table="ledger", staging_root=str(staging))
        archiver = Archiver(runtime)
        started = time.monotonic()
        source = EventSource("bench:9092", event_source="SelfManagedKafka")
        for records in orders(args.records, args.partitions, args.hours):
            for first in range(0, len(records), 5000):
                archiver.handle(build_event(records[first : first + 5000], source))
        for partition in range(args.partitions):
            runtime.writer(stream, partition).drain()
        log(f"archived {args.records} records in {time.monotonic() - started:.1f}s")

        from jobs.aggregation.job import run_aggregation
        from jobs.aggregation.session import local_session
        from jobs.aggregation.transforms import aggregate

        spark = local_session("tidemark-bench", driver_memory="2g")
        try:
            started = time.monotonic()
            report = run_aggregation(
                spark, stream, ledger=runtime.ledger, bucket="bench", sink=AggregateSink("aggregates"), tasks=8
            )
            job_s = time.monotonic() - started
            log(f"job: {report.records} records, {report.items_written} items in {job_s:.1f}s {report.seconds}")

            local = Path(scratch) / "objects"
            local.mkdir()
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix="raw/"):
                for item in page.get("Contents", []):
                    name = item["Key"].replace("/", "_")
                    body = s3.get_object(Bucket="bench", Key=item["Key"])["Body"].read()
                    if name.endswith(".zst"):  # no native zstd in Hadoop here: the baseline reads it plain
                        body, name = decompress(body, "zstd"), name.removesuffix(".zst")
                    (local / name).write_bytes(body)
            started = time.monotonic()
            native = spark.read.json(str(local)).select("partition", "offset", "value.*")
            from pyspark.sql import functions as F

            native = native.withColumn(
                "hour", F.date_format(F.from_unixtime(F.col("created_at") / 1000), "yyyy-MM-dd'T'HH")
            )
            rows = 0
            for aggregation in stream.aggregations:
                rows += len(aggregate(native, aggregation).frame.collect())
            baseline_s = time.monotonic() - started
            log(f"baseline (spark.read.json from local disk): {rows} aggregate rows in {baseline_s:.1f}s")
        finally:
            spark.stop()
    print(
        json.dumps(
            {
                "records": report.records,
                "records_per_s": round(report.records / job_s, 1),
                "baseline_ratio": round(job_s / baseline_s, 2),
                "job_seconds": round(job_s, 2),
                "baseline_seconds": round(baseline_s, 2),
                "duplicates": report.duplicates,
                "objects": len(report.objects),
            }
        )
    )


if __name__ == "__main__":
    main()
