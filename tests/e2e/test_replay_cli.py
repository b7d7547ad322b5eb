"""``tidemark replay`` through the installed CLI against a real archive (moto server) and the
embedded broker: the summary, one-line errors, and a replay SIGKILLed at random points and then
run to completion -- every record exactly once in the target, in source offset order."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import typer.main
from confluent_kafka import Consumer, TopicPartition

from tests.conftest import REPO, Archive, make_archive
from tests.e2e.test_demo import tidemark
from tests.integration.test_replay import assert_replayed_exactly_once, hours_of, read_back
from tests.support.harness import EsmModel, finish, small_config
from tests.support.kafka import new_topic
from tests.support.workload import Workload, make_orders
from tidemark.cli.app import app
from tidemark.embedded.kafka_clients import client_settings

CONFIG = "config/tidemark.yaml"
PER_PARTITION = 3_000


def test_every_replay_option_is_explained():
    command = typer.main.get_command(app).commands["replay"]  # type: ignore[attr-defined]
    assert [param.name for param in command.params if not getattr(param, "help", None)] == []


@pytest.fixture(scope="module")
def big(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Archive, Workload]:
    """3 x 3,000 small records over several hours (late ones, dead letters), in objects of about
    100 records: the replay produces for about a second, long enough that a kill lands while it
    does (its first records wait about as long for the idempotent producer's id)."""
    archive = make_archive(moto_endpoint, Path(tmp_path_factory.mktemp("replay-cli")))
    config = small_config()
    workload = make_orders(partitions=3, per_partition=PER_PARTITION, hours=3, seed=21)
    finish(archive, config, EsmModel(workload, lambda crash: archive.runtime(config, crash)), batch=100)
    return archive, workload


def replay_args(archive: Archive, topic: str, bootstrap: str, *extra: str) -> list[str]:
    first, last = hours_of(archive)
    return [
        "replay", "--stream", "orders", "--from", first, "--to", last, "--topic", topic,
        "--bootstrap-servers", bootstrap, "--config", CONFIG, "--endpoint-url", archive.endpoint,
        "--bucket", archive.bucket, "--ledger-table", archive.table, *extra,
    ]  # fmt: skip


def test_a_replay_prints_its_summary_and_a_rerun_produces_nothing_more(big, kafka_bootstrap):
    archive, workload = big
    total = len(workload.all_records())
    topic = new_topic(kafka_bootstrap, 3)
    done = tidemark(*replay_args(archive, topic, kafka_bootstrap, "--json"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["produced"], report["skipped"], report["topic"]) == (total, 0, topic)
    assert [(part["partition"], part["produced"]) for part in report["partitions"]] == [
        (p, PER_PARTITION) for p in range(3)
    ]
    assert_replayed_exactly_once(read_back(kafka_bootstrap, topic), workload, report["replay_id"])
    again = tidemark(*replay_args(archive, topic, kafka_bootstrap))
    assert again.returncode == 0, again.stderr
    assert f"replay {report['replay_id']}: stream orders" in again.stdout
    assert "  partition 2: " in again.stdout and f"{PER_PARTITION} already in {topic}" in again.stdout
    assert again.stdout.splitlines()[-1] == f"produced 0, already there {total}"
    assert len(read_back(kafka_bootstrap, topic)) == total


def test_unusable_options_are_one_line_errors_with_exit_2(big, kafka_bootstrap):
    archive, _workload = big
    small = new_topic(kafka_bootstrap, 2)
    missing = f"nope-{uuid.uuid4().hex[:8]}"
    cases = [
        (replay_args(archive, small, kafka_bootstrap), f"topic '{small}' has 2 partitions"),
        (replay_args(archive, missing, kafka_bootstrap), "create the topic first"),
        (replay_args(archive, small, kafka_bootstrap, "--partitioner", "random"), "--partitioner 'random'"),
        ([*replay_args(archive, small, kafka_bootstrap), "--from", "yesterday"], "--from 'yesterday'"),
        ([*replay_args(archive, small, kafka_bootstrap), "--stream", "nope"], "--stream 'nope': not in"),
    ]
    for args, message in cases:
        done = tidemark(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert read_back(kafka_bootstrap, small) == []


def watch_until(bootstrap: str, topic: str, partitions: int, count: int, process: subprocess.Popen[bytes]) -> bool:
    """Read ``topic`` as it fills until it holds ``count`` records (True) or ``process`` ended."""
    consumer = Consumer(
        client_settings(bootstrap, **{"group.id": f"watch-{uuid.uuid4().hex[:6]}", "fetch.wait.max.ms": 10})
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen = 0
        while process.poll() is None:
            seen += sum(1 for message in consumer.consume(500, 0.05) if message.error() is None)
            if seen >= count:
                return True
        return False
    finally:
        consumer.close()


def test_a_replay_killed_at_random_points_then_run_to_the_end_holds_every_record_once(big, kafka_bootstrap):
    archive, workload = big
    seed = random.randrange(1 << 32)
    print("seed", seed)
    rng = random.Random(seed)
    total = len(workload.all_records())
    # A round kills the replay up to three times into a fresh topic. On a loaded machine a whole
    # round can miss (the watcher sees the records only after the replay has finished them all):
    # then another round, into another topic, until a kill lands while the replay produces.
    for round_ in range(4):
        topic = new_topic(kafka_bootstrap, 3)
        args = [sys.executable, "-m", "tidemark.cli.app", *replay_args(archive, topic, kafka_bootstrap)]
        held_after_kills = []
        held = 0
        kinds = ["early", "producing", "producing"]
        rng.shuffle(kinds)  # an early kill of a rerun lands while it reads the target's tail back
        for attempt, kind in enumerate(kinds):
            if held >= total - 3:
                break  # a kill found the replay done: nothing left to interrupt
            process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                if kind == "early":  # start-up, planning, reading the tail back, the first records
                    time.sleep(rng.uniform(0.2, 1.2))
                else:  # once the target holds some more records: while it produces
                    watch_until(kafka_bootstrap, topic, 3, held + rng.randint(1, (total - held) // 3), process)
            finally:
                if process.poll() is None:
                    process.kill()  # SIGKILL: no flush, no clean-up
                process.wait()
            held = len(read_back(kafka_bootstrap, topic))
            held_after_kills.append(held)
            print(f"round {round_}, kill {attempt} ({kind}): exit {process.returncode}, the target holds {held}")
        if any(0 < count < total for count in held_after_kills):
            break
    assert any(0 < count < total for count in held_after_kills), "no kill landed while the replay produced"
    done = tidemark(*replay_args(archive, topic, kafka_bootstrap, "--json"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["skipped"], report["produced"]) == (held, total - held)
    assert_replayed_exactly_once(read_back(kafka_bootstrap, topic), workload, report["replay_id"])
