"""The demo path end to end, through the installed command line: a real broker, moto in server
mode, the real archiver handler, chaos that kills processes -- then an independent check of
the archive against what the broker holds."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import boto3
import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.conftest import REPO, Archive
from tests.support.harness import assert_objects_describe_themselves, example_config_data
from tests.support.processes import CHILD, service_processes
from tidemark.clock import ManualClock
from tidemark.config import load_config, parse_config
from tidemark.embedded.kafka_clients import client_settings
from tidemark.verify import ExpectedRecord, RecordMeta, verify_archive

TIMEOUT_S = 600


def tidemark(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli.app", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def expected_hour(value: bytes | None, timestamp_ms: int | None = None) -> str | None:
    """Independently of the archiver: the UTC hour of ``created_at``, None if unusable; a
    tombstone's (a null value: no ``created_at``), the UTC hour of its record timestamp."""
    if value is None:
        assert timestamp_ms is not None, "a tombstone is filed by its record timestamp"
        return datetime.fromtimestamp(timestamp_ms / 1000, UTC).strftime("%Y-%m-%dT%H")
    try:
        created = orjson.loads(value)["created_at"]
        return datetime.fromisoformat(created).astimezone(UTC).strftime("%Y-%m-%dT%H")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def read_topic(bootstrap: str, topic: str) -> list[ExpectedRecord]:
    """Everything the broker holds for ``topic``: the ground truth the archive must match."""
    consumer = Consumer(client_settings(bootstrap, **{"group.id": f"check-{uuid.uuid4().hex[:6]}"}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        found: dict[tuple[int, int], tuple[bytes | None, RecordMeta, int]] = {}
        quiet = 0
        # Read until the topic stays quiet (the embedded broker's watermarks are not exact).
        while quiet < 3:
            messages = consumer.consume(1000, timeout=1)
            quiet = 0 if messages else quiet + 1
            for message in messages:
                assert message.error() is None
                headers = tuple(message.headers() or ())
                found[(message.partition(), message.offset())] = (
                    message.value(),  # None: a tombstone
                    RecordMeta(topic, message.key(), headers),
                    message.timestamp()[1],
                )
    finally:
        consumer.close()
    return [
        ExpectedRecord(p, o, value, expected_hour(value, stamp), meta)
        for (p, o), (value, meta, stamp) in sorted(found.items())
    ]


def assert_replayed_once(bootstrap: str, topic: str, truth: list[ExpectedRecord]) -> None:
    """Independently of the demo's own check: ``<topic>-replay`` holds every record of ``truth``
    once (by its ``tidemark.source`` header), in source order per partition, with the same key,
    headers and value (JSON values compared parsed; dead letters byte for byte)."""
    copies: dict[tuple[int, int], ExpectedRecord] = {}
    order: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for copy in read_topic(bootstrap, f"{topic}-replay"):
        assert copy.meta is not None
        _stream, partition, epoch, offset = dict(copy.meta.headers)["tidemark.source"].decode().split("/")
        assert (int(partition), int(offset)) not in copies
        copies[(int(partition), int(offset))] = copy
        order.setdefault((copy.partition, int(partition)), []).append((int(epoch), int(offset)))
    assert sorted(copies) == sorted((item.partition, item.offset) for item in truth)
    assert all(positions == sorted(positions) for positions in order.values())
    for item in truth:
        copy = copies[(item.partition, item.offset)]
        assert copy.meta is not None and item.meta is not None
        assert copy.meta.key == item.meta.key
        assert tuple(pair for pair in copy.meta.headers if not pair[0].startswith("tidemark.")) == item.meta.headers
        if item.hour is None or item.value is None:  # a dead letter: its bytes as produced; a tombstone: null
            assert copy.value == item.value
        else:
            assert orjson.loads(copy.value) == orjson.loads(item.value)


def test_demo_with_chaos_is_exactly_once_against_what_the_broker_holds(kafka_bootstrap, moto_endpoint, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    topic, bucket, table = f"orders-e2e-{suffix}", f"tidemark-e2e-{suffix}", f"tidemark-e2e-ledger-{suffix}"
    report_path = tmp_path / "report.json"

    done = tidemark(
        "demo",
        "--records", "1600",
        "--chaos", "--crash-rate", "0.3", "--lost-commit-rate", "0.1", "--seed", "11",
        "--batch-size", "200", "--flush-records", "400",
        "--bootstrap-servers", kafka_bootstrap, "--endpoint-url", moto_endpoint,
        "--topic", topic, "--bucket", bucket, "--ledger-table", table,
        "--workdir", tmp_path / "work", "--report-json", report_path, "--no-aggregate",
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout
    report = json.loads(report_path.read_text())
    assert report["result"] == "PASS"
    tombstones = report["tombstones"]  # a few null values deleting earlier orders' keys, among the orders
    assert tombstones["produced"] > 0 and tombstones["produced"] == tombstones["archived"] == tombstones["replayed"]
    total = 1600 + tombstones["produced"]
    assert report["chaos"]["crashes"] >= 4  # at least the armed drain of every partition died
    # The demo's audit: every object against the ledger, every partition's offsets tiled (gaps
    # asked of the broker), after crashes and lost commits.
    audit = report["audit"]
    assert (audit["clean"], audit["findings"], audit["records"]) == (True, [], total)
    assert report["delivery"]["crashed_invocations"] + report["chaos"]["lost_commits"] >= 1
    # The replay into a new topic, its first process killed: every record once, checked by the demo.
    replay = report["replay"]
    assert (replay["equal"], replay["records"], replay["produced"] + replay["skipped"]) == (True, total, total)
    assert replay["killed"] is not None and replay["timestamps_compared"] == total

    # Independent check: the broker's records against the S3 objects and the ledger.
    truth = read_topic(kafka_bootstrap, topic)
    assert len(truth) == total and sum(item.value is None for item in truth) == tombstones["produced"]
    assert_replayed_once(kafka_bootstrap, topic, truth)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    verification = verify_archive(s3, bucket, "orders", truth)
    assert verification.ok, verification.summary()
    assert verification.archived + verification.dead_lettered == total
    assert verification.tombstones == tombstones["produced"]
    assert verification.dead_lettered == sum(item.hour is None for item in truth) > 0
    assert report["verification"] == verification.summary()
    archive = Archive(
        moto_endpoint,
        bucket,
        table,
        tmp_path / "work" / "staging",
        ManualClock(),
        s3,
        boto3.client("dynamodb", endpoint_url=moto_endpoint),
    )
    config = load_config(REPO / "config" / "tidemark.yaml")
    assert_objects_describe_themselves(archive, config)

    # The sweeper ran: nothing to reconcile, and every hour it called complete has a manifest
    # listing exactly the hour's objects in the ledger.
    sweeper = report["sweeper"]
    assert sweeper["reconcile"]["findings"] == {} and sweeper["reconcile"]["objects_checked"] > 0
    completed = sweeper["completeness"]["completed"]
    assert completed and len(completed) == len(sweeper["completeness"]["manifests"])
    runtime = archive.runtime(config)
    for name, key in zip(completed, sweeper["completeness"]["manifests"], strict=True):
        hour = name.split("/", 1)[1]
        manifest = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        assert sorted(o["key"] for o in manifest["objects"]) == sorted(
            o.key for o in runtime.ledger.committed_objects("orders", hour)
        )


def test_demo_with_a_topic_recreated_mid_run_archives_both_logs_exactly_once(kafka_bootstrap, moto_endpoint, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    topic, bucket, table = f"orders-reset-{suffix}", f"tidemark-reset-{suffix}", f"tidemark-reset-ledger-{suffix}"
    report_path = tmp_path / "report.json"

    done = tidemark(
        "demo",
        "--records", "1200", "--partitions", "2", "--recreate-topic",
        "--chaos", "--crash-rate", "0.2", "--seed", "5", "--batch-size", "100", "--flush-records", "200",
        "--bootstrap-servers", kafka_bootstrap, "--endpoint-url", moto_endpoint,
        "--topic", topic, "--bucket", bucket, "--ledger-table", table,
        "--workdir", tmp_path / "work", "--report-json", report_path, "--no-aggregate",
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_path.read_text())
    total = 1200 + report["tombstones"]["produced"]  # orders, and tombstones among them on both logs
    assert report["result"] == "PASS" and report["verification"]["produced"] == total
    assert report["audit"]["clean"] and report["audit"]["records"] == total  # both epochs tiled
    assert report["replay"]["equal"] and report["replay"]["records"] == total  # both logs, in epoch order
    assert report["epochs"]["refused_invocations"] >= 1
    assert report["epochs"]["started"] == {"0": 1, "1": 1}

    # Independent check of the second log: what the recreated topic holds is in epoch 1, once.
    truth = [replace(item, epoch=1) for item in read_topic(kafka_bootstrap, topic)]
    # the second half of what was produced: 600 orders and the tombstones among them
    assert len(truth) - sum(item.value is None for item in truth) == 600
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    second = verify_archive(s3, bucket, "orders", truth)
    assert (second.lost, second.duplicated, second.misfiled, second.corrupted) == ([], [], [], [])
    assert len(second.unexpected) == total - len(truth)  # the first log's records, in epoch 0 (offsets 0.. again)
    assert all(len(ident) == 2 for ident in second.unexpected)
    archive = Archive(
        moto_endpoint, bucket, table, tmp_path / "work" / "staging", ManualClock(), s3,
        boto3.client("dynamodb", endpoint_url=moto_endpoint),
    )  # fmt: skip
    assert_objects_describe_themselves(archive, load_config(REPO / "config" / "tidemark.yaml"))


def test_demo_in_parquet_partitioned_by_country_and_channel_is_exactly_once(kafka_bootstrap, moto_endpoint, tmp_path):
    """``--format parquet --partition-by ...``, with chaos: the independent check reads the
    Parquet objects back and requires every record under the folders its content selects."""
    suffix = uuid.uuid4().hex[:8]
    topic, bucket, table = f"orders-pq-{suffix}", f"tidemark-pq-{suffix}", f"tidemark-pq-ledger-{suffix}"
    report_path = tmp_path / "report.json"

    done = tidemark(
        "demo",
        "--records", "500", "--partitions", "2", "--format", "parquet", "--compression", "zstd",
        "--partition-by", "_value.country", "--partition-by", "_header.channel",
        "--chaos", "--crash-rate", "0.2", "--seed", "3", "--batch-size", "80", "--flush-records", "100",
        "--bootstrap-servers", kafka_bootstrap, "--endpoint-url", moto_endpoint,
        "--topic", topic, "--bucket", bucket, "--ledger-table", table,
        "--workdir", tmp_path / "work", "--report-json", report_path, "--no-aggregate",
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_path.read_text())
    tombstones = report["tombstones"]["produced"]
    assert tombstones > 0 and report["tombstones"]["archived"] == report["tombstones"]["replayed"] == tombstones
    total = 500 + tombstones
    assert report["result"] == "PASS" and report["verification"]["produced"] == total
    assert report["replay"]["equal"] and report["replay"]["records"] == total  # Parquet keeps the envelope
    data = example_config_data()
    data["streams"][0]["format"] = {"type": "parquet", "compression": "zstd"}
    data["streams"][0]["partition_by"] = {"fields": ["_value.country", "_header.channel"]}
    config = parse_config(data)
    truth = read_topic(kafka_bootstrap, topic)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    verification = verify_archive(s3, bucket, "orders", truth, config=config.streams[0])
    assert verification.ok, verification.summary()
    assert verification.archived + verification.dead_lettered == total
    raw = [
        item["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="raw/orders/")
        for item in page.get("Contents", [])
    ]
    assert raw and all(key.endswith(".parquet") for key in raw)
    # the channel level; a tombstone has no channel header (and no country: its value is null)
    assert {key.split("/")[3] for key in raw} == {"web", "app", "store", "__missing__"}
    assert any(key.split("/")[2:4] == ["__missing__", "__missing__"] for key in raw)
    archive = Archive(
        moto_endpoint, bucket, table, tmp_path / "work" / "staging", ManualClock(), s3,
        boto3.client("dynamodb", endpoint_url=moto_endpoint),
    )  # fmt: skip
    assert_objects_describe_themselves(archive, config)


def listening(address: str) -> bool:
    host, port = address.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, int(port))) == 0


def test_default_demo_starts_and_stops_its_own_broker_and_moto(tmp_path):
    before = service_processes()
    report_path = tmp_path / "report.json"

    done = tidemark(
        "demo", "--records", "1500", "--chaos", "--workdir", tmp_path / "work", "--report-json", report_path
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_path.read_text())
    tombstones = report["tombstones"]["produced"]  # 3: at least a few even in a short run
    total = 1500 + tombstones
    assert tombstones >= 3 and report["tombstones"]["archived"] == report["tombstones"]["replayed"] == tombstones
    assert f"PASS: {total} records exactly once" in done.stdout
    assert f"replay into orders-replay: {total} records, equal to the source record by record" in done.stdout
    assert f"tombstones produced: {tombstones}" in done.stdout
    assert report["verification"]["produced"] == total and report["verification"]["lost"] == 0
    assert report["dead_letter_reasons"].keys() == {
        "invalid_event_time",
        "invalid_value_encoding",
        "missing_event_time",
    }
    assert len(report["objects_per_hour"]) >= 4  # several event hours, late ones included
    assert report["aggregation"]["counts_match"] == {"orders_by_product": True}  # Spark ran, counts check out
    # the job skips tombstones: they have no value to aggregate
    assert report["aggregation"]["run"]["records"] == report["verification"]["archived"] - tombstones
    assert not listening(report["bootstrap_servers"]) and not listening(report["endpoint"])
    assert service_processes() == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_a_chaos_child_runs_stops_every_process(signum, tmp_path):
    before = service_processes()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidemark.cli.app",
            "demo",
            "--records",
            "200000",
            "--chaos",
            "--crash-rate",
            "0.5",
            "--workdir",
            str(tmp_path / "work"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even if our parent ignores it
    )
    try:
        deadline = time.monotonic() + 120
        while not any(CHILD in cmdline for _pid, cmdline in service_processes()):
            assert time.monotonic() < deadline, "no chaos child started"
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.1)
            assert process.returncode is None, process.communicate()
        process.send_signal(signum)
        _out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "interrupted: every process this command started has been stopped" in err
    assert service_processes() == before
