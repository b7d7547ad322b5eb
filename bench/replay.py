"""Throughput of ``tidemark replay`` against a plain producer sending the same records.

Setup (untimed)
    A moto server and the embedded Kafka-protocol broker (Tansu), both on loopback, started by
    this script (``tidemark.embedded.moto_server``, ``tidemark.embedded.broker``). An archive of
    ``--records`` orders (``tests/support/workload.py``'s ``make_orders``: ~145-byte JSON values,
    keys, a header on every third record, late records and ~2% malformed ones, which become dead
    letters) over ``--partitions`` partitions and three event hours, written by the real archiver
    (``tests/support/harness.py``: the ESM model delivering ``--batch`` records at a time) with
    the example configuration's format (zstd JSON Lines) and objects of at most ``--object-records``
    records.

What is measured, per run
    ``replay``: ``KafkaTarget`` created, ``Replayer.run`` -- the ledger read, the target's tail
    read back (an empty topic: each partition's end), every object downloaded from moto,
    decompressed, parsed and merged, every record produced (idempotent, acks=all, two headers
    added), and every delivery waited for -- into a new topic with as many partitions.
    ``baseline``: a plain ``confluent_kafka.Producer`` (default settings) created, the very same
    records (key, value, headers, timestamp, partition; read from the archive beforehand, outside
    the timing) produced to another new topic, and flushed. ``baseline_ratio = replay_s /
    baseline_s``: what reading the archive back and the exactly-once producer cost over producing
    records already in memory. ``rerun``: the same replay again into the now complete topic: the
    tail read back, nothing produced (with ``same``, nothing downloaded either). ``read_s``: the
    replay's records read from the archive alone (the plan, every object downloaded, parsed and
    merged; nothing produced) -- ``read_share`` of ``replay_s``.

    Both producers wait for a producer connection; the idempotent one also for its producer id
    (librdkafka retries that on a 500 ms timer when no broker connection is up yet): a fixed cost
    of up to a second that a small ``--records`` makes look large.

Checked
    Both target topics are read back: each must hold every record exactly once (the replay's by
    its ``tidemark.source`` header); ``exactly_once`` says whether they do.

Output
    Progress on stderr; the last stdout line is one JSON object (the best run's figures at the
    top level, every run under ``runs``).

Run: ``.venv/bin/python bench/replay.py [--records 60000 --partitions 3 --runs 2]``; ``--smoke`` (what
``make test`` runs, so the bench cannot rot): 600 records over 2 partitions in objects of at most 100,
one run (the moto server and the broker are started and stopped as always).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support: the workload and the archiver harness

STREAM = "orders"
#: ``--smoke``: the same setup, run and checks on a small archive (still several objects per partition)
SMOKE = {"records": 600, "partitions": 2, "object_records": 100, "batch": 100, "runs": 1}


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def build_archive(endpoint: str, workdir: Path, args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from tests.conftest import make_archive
    from tests.support.harness import EsmModel, finish, small_config
    from tests.support.workload import make_orders

    archive = make_archive(endpoint, workdir)
    config = small_config(max_records=args.object_records, max_bytes="64MiB")
    per_partition = args.records // args.partitions
    workload = make_orders(partitions=args.partitions, per_partition=per_partition, hours=3, seed=args.seed)
    finish(archive, config, EsmModel(workload, lambda crash: archive.runtime(config, crash)), batch=args.batch)
    return archive, config, workload


def new_topic(bootstrap: str, partitions: int, prefix: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=15)
    return name


def count_back(bootstrap: str, topic: str, partitions: int) -> tuple[int, int]:
    """(records the topic holds, distinct identities among them): the replay's records by their
    ``tidemark.source`` header, the baseline's by (partition, key)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        ended: set[int] = set()
        count, seen = 0, set()
        while len(ended) < partitions:
            for message in consumer.consume(5000, 1.0):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(error.str())
                    ended.add(message.partition())
                    continue
                count += 1
                source = dict(message.headers() or ()).get("tidemark.source")
                seen.add(source if source is not None else (message.partition(), message.key()))
        return count, len(seen)
    finally:
        consumer.close()


def archived_records(archive: Any, replayer: Any) -> list[Any]:
    """Every record of the replay, in the order it produces them (read before the timing)."""
    from tidemark.replay.reader import ObjectReader, merged

    plan = replayer.plan()
    reader = ObjectReader(archive.s3, archive.bucket)
    return [record for partition in plan.partitions for record in merged(plan.objects[partition], reader.open)]


def one_run(number: int, archive: Any, config: Any, bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer

    from tidemark.ledger.dynamodb import DynamoDBLedger
    from tidemark.replay import KafkaTarget, Replayer

    ledger = DynamoDBLedger(archive.table, client=archive.dynamodb)
    marks = ledger.hour_marks(STREAM)
    first, last = marks[0].hour, marks[-1].hour

    def replayer(target: Any, topic: str) -> Any:
        return Replayer(
            config, STREAM, ledger, archive.s3, archive.bucket, target, topic=topic, first_hour=first, last_hour=last
        )

    topic = new_topic(bootstrap, args.partitions, "replay")
    log(f"run {number}: replay into {topic}")
    started = time.perf_counter()
    with KafkaTarget(bootstrap, topic) as target:
        report = replayer(target, topic).run()
    replay_s = time.perf_counter() - started

    log(f"run {number}: rerun (the topic holds it all)")
    started = time.perf_counter()
    with KafkaTarget(bootstrap, topic) as target:
        rerun = replayer(target, topic).run()
    rerun_s = time.perf_counter() - started

    with KafkaTarget(bootstrap, topic) as target:
        started = time.perf_counter()
        records = archived_records(archive, replayer(target, topic))
        read_s = time.perf_counter() - started
    baseline_topic = new_topic(bootstrap, args.partitions, "plain")
    log(f"run {number}: plain producer into {baseline_topic}")
    failed: list[Any] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(error)

    started = time.perf_counter()
    producer = Producer({"bootstrap.servers": bootstrap})
    for record in records:
        while True:
            try:
                producer.produce(
                    baseline_topic,
                    record.value,
                    record.key,
                    partition=record.partition,
                    headers=list(record.headers),
                    timestamp=record.timestamp_ms or 0,
                    on_delivery=delivered,
                )
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    baseline_s = time.perf_counter() - started

    replayed = count_back(bootstrap, topic, args.partitions)
    plain = count_back(bootstrap, baseline_topic, args.partitions)
    total = report.records
    return {
        "records": total,
        "objects": report.objects,
        "replay_s": round(replay_s, 3),
        "replay_records_per_s": round(total / replay_s),
        "baseline_s": round(baseline_s, 3),
        "baseline_records_per_s": round(len(records) / baseline_s),
        "baseline_ratio": round(replay_s / baseline_s, 2),
        "read_s": round(read_s, 3),
        "read_share": round(read_s / replay_s, 2),
        "rerun_s": round(rerun_s, 3),
        "rerun_skipped": rerun.skipped,
        "rerun_produced": rerun.produced,
        "exactly_once": replayed == (total, total) and plain == (total, total) and not failed and left == 0,
        "replay_topic_holds": replayed[0],
        "baseline_topic_holds": plain[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=60_000, help="records archived, then replayed")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the source and both targets")
    parser.add_argument("--object-records", type=int, default=5_000, help="records per object at most")
    parser.add_argument("--batch", type=int, default=1_000, help="records per archiver invocation")
    parser.add_argument("--runs", type=int, default=1, help="timed runs, each into new topics")
    parser.add_argument("--seed", type=int, default=20_261_121)
    parser.add_argument("--smoke", action="store_true", help="600 records, 2 partitions, one run (unless given)")
    args = parser.parse_args(argv)
    if args.smoke:  # smaller defaults; options given still win
        parser.set_defaults(**SMOKE)
        args = parser.parse_args(argv)
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    for name in [name for name in os.environ if name.startswith(("AWS_ENDPOINT_URL", "AWS_PROFILE"))]:
        del os.environ[name]

    from tidemark.embedded.broker import kafka_broker
    from tidemark.embedded.moto_server import moto_server

    with moto_server() as endpoint, kafka_broker() as bootstrap, tempfile.TemporaryDirectory() as workdir:
        log(f"archiving {args.records} records over {args.partitions} partitions")
        started = time.perf_counter()
        archive, config, _workload = build_archive(endpoint, Path(workdir), args)
        log(f"archived in {time.perf_counter() - started:.1f}s")
        runs = [one_run(number, archive, config, bootstrap, args) for number in range(1, args.runs + 1)]
    best = min(runs, key=lambda run: run["replay_s"])
    result = {**best, "partitions": args.partitions, "runs": runs}
    log(
        f"replay {best['replay_records_per_s']} records/s, plain producer {best['baseline_records_per_s']} records/s, "
        f"ratio {best['baseline_ratio']}"
    )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
