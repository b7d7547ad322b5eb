"""What exactly-once costs a RabbitMQ queue: the dedupe index against the same batches from Kafka.

What is measured
    The archiver (``tidemark.archiver.Archiver``, in-process: parsing, numbering, routing,
    segments with fsync, the conditional ledger accept, flushes) handling ``--batches`` Amazon MQ
    events of ``--batch-size`` JSON orders each, every message with its own id, against a moto
    S3 and DynamoDB (``mock_aws``) and a staging directory on local disk. The dedupe index is an
    SQLite file there; on EFS each of its round trips is a network one, so read the ratios, not
    the absolute times.

Baseline (same run, same records)
    The very same records delivered as MSK events to a Kafka stream with the same settings: the
    protocol without the index. ``rabbitmq_over_kafka`` is the ratio of the two handler times.

Does the index cost O(batch), not O(window)?
    The window is 24 h and the index only grows during the run (nothing expires): the mean time
    of the index's own work per batch (lookup + record) over the last tenth of the batches over
    the first tenth, ``index_growth_ratio``, stays near 1 when the cost does not grow with what
    the index holds. ``index_rows`` is what it held at the end. A second pass redelivers every
    batch (a lost ack for each): ``redelivery_over_first`` is its time over the first pass's,
    every message dropped as a duplicate.

Prints one JSON document. ``python bench/dedupe.py --batches 200 --batch-size 100``.
``--smoke`` (what ``make test`` runs, so the bench cannot rot): 10 batches of 20 messages, the JSON
on one line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from moto import mock_aws

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "layers" / "core"))

from tidemark.archiver import Archiver  # noqa: E402
from tidemark.clock import ManualClock  # noqa: E402
from tidemark.config import parse_config  # noqa: E402
from tidemark.config.loader import load_config  # noqa: E402
from tidemark.dedupe.base import DedupeIndex  # noqa: E402
from tidemark.records.esm import EventSource, build_event  # noqa: E402
from tidemark.records.model import Record  # noqa: E402
from tidemark.records.rabbitmq_esm import RabbitMessage, build_rabbitmq_event  # noqa: E402
from tidemark.runtime import Runtime  # noqa: E402

BROKER = "arn:aws:mq:us-east-1:123456789012:broker:orders:b-1234a5b6-78cd-901e-2fgh-3i45j6k178l9"
BASE_MS = 1_795_248_000_000
#: ``--smoke``: the same passes over a few batches (a tenth of them is one batch)
SMOKE = {"batches": 10, "batch_size": 20}


def orders(batch: int, size: int) -> list[tuple[str, bytes, int]]:
    out = []
    for index in range(size):
        number = batch * size + index
        ms = BASE_MS + number * 50
        body = orjson.dumps({"order_id": f"o-{number}", "price": 12.5, "quantity": 2, "created_at": ms})
        out.append((f"m-{number}", body, ms))
    return out


class TimedIndex(DedupeIndex):
    """The real index, with the time of its own work kept per batch."""

    def __init__(self, inner: DedupeIndex) -> None:
        self.inner = inner
        self.spent = 0.0

    def _timed(self, call: Any, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.spent += time.perf_counter() - started

    def _seen(self, digests: set[bytes], since_ms: int) -> set[bytes]:
        return self._timed(self.inner._seen, digests, since_ms)  # type: ignore[no-any-return]

    def _record(self, *args: Any) -> int:
        return self._timed(self.inner._record, *args)  # type: ignore[no-any-return]

    def _indexed_through(self) -> int:
        return self._timed(self.inner._indexed_through)  # type: ignore[no-any-return]


def runtime(config: Any, root: Path) -> Runtime:
    import boto3

    from tidemark.ledger.dynamodb import ledger_table_schema

    s3, dynamodb = boto3.client("s3", region_name="us-east-1"), boto3.client("dynamodb", region_name="us-east-1")
    s3.create_bucket(Bucket="bench")
    dynamodb.create_table(**ledger_table_schema("ledger"))
    (root / "staging").mkdir()
    return Runtime.build(
        config, bucket="bench", table="ledger", staging_root=str(root / "staging"), clock=ManualClock(BASE_MS),
        s3_client=s3, dynamodb_client=dynamodb,
    )  # fmt: skip


def run(kind: str, batches: int, size: int) -> dict[str, Any]:
    data = json.loads(
        load_config(REPO / "config" / ("rabbitmq.yaml" if kind == "rabbitmq" else "tidemark.yaml")).model_dump_json()
    )
    data["streams"][0].update(aggregations=[])
    config = parse_config(data)
    with tempfile.TemporaryDirectory() as tmp, mock_aws():
        rt = runtime(config, Path(tmp))
        timed: TimedIndex | None = None
        if kind == "rabbitmq":
            timed = TimedIndex(rt.dedupe_index(config.streams[0], 0))
            rt._dedupe[("orders", 0)] = timed
        archiver = Archiver(rt)
        events = []
        for batch in range(batches):
            records = orders(batch, size)
            if kind == "rabbitmq":
                messages = [RabbitMessage(body, mid, ms) for mid, body, ms in records]
                events.append(build_rabbitmq_event(messages, broker_arn=BROKER, queue="orders"))
            else:
                recs = [
                    Record("orders", 0, batch * size + i, ms, body, mid.encode())
                    for i, (mid, body, ms) in enumerate(records)
                ]
                events.append(
                    build_event(recs, EventSource("b-1:9098", event_source_arn=config.streams[0].source.cluster_arn))
                )
        index_times: list[float] = []
        started = time.perf_counter()
        for event in events:
            before = timed.spent if timed else 0.0
            archiver.handle(event)
            if timed:
                index_times.append(timed.spent - before)
        first_pass = time.perf_counter() - started
        result: dict[str, Any] = {"handler_s": round(first_pass, 3)}
        if timed:  # a queue: every batch again, a lost ack for each (a Kafka log is not re-read so)
            started = time.perf_counter()
            for event in events:
                outcome = archiver.handle(event)["orders"]
                assert outcome.staged == 0, outcome
            result["redelivery_s"] = round(time.perf_counter() - started, 3)
            tenth = max(1, batches // 10)
            import sqlite3

            path = rt.staging.dedupe_path("orders", 0)
            with sqlite3.connect(path) as db:
                rows = db.execute("SELECT count(*) FROM ids").fetchone()[0]
            result |= {
                "index_ms_per_batch_first_tenth": round(1000 * sum(index_times[:tenth]) / tenth, 3),
                "index_ms_per_batch_last_tenth": round(1000 * sum(index_times[-tenth:]) / tenth, 3),
                "index_growth_ratio": round(sum(index_times[-tenth:]) / max(sum(index_times[:tenth]), 1e-9), 2),
                "index_rows": rows,
                "index_bytes": path.stat().st_size,
            }
        return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="10 batches of 20 (unless given), JSON on one line")
    args = parser.parse_args(argv)
    if args.smoke:  # smaller defaults; options given still win
        parser.set_defaults(**SMOKE)
        args = parser.parse_args(argv)

    kafka = run("kafka", args.batches, args.batch_size)
    rabbitmq = run("rabbitmq", args.batches, args.batch_size)
    print(
        json.dumps(
            {
                "batches": args.batches,
                "batch_size": args.batch_size,
                "kafka": kafka,
                "rabbitmq": rabbitmq,
                "rabbitmq_over_kafka": round(rabbitmq["handler_s"] / kafka["handler_s"], 2),
                "redelivery_over_first": round(rabbitmq["redelivery_s"] / rabbitmq["handler_s"], 2),
            },
            indent=None if args.smoke else 2,
        )
    )


if __name__ == "__main__":
    main()
