"""``tidemark demo --source rabbitmq`` end to end, through the installed command line: a real
RabbitMQ broker (the installed rabbitmq-server on loopback), the local Amazon MQ mapping, the real
archiver handler, chaos that kills processes and loses acks -- then an independent read of the
archive by message id, and no broker, epmd or child process left behind, also after a Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import yaml

from tests.conftest import REPO
from tests.e2e.test_demo import listening, tidemark
from tests.support.processes import CHILD
from tidemark.config import StreamConfig, parse_config
from tidemark.embedded.rabbitmq import marked_pids
from tidemark.verify import read_archive

NODE = re.compile(r"tidemark-[0-9a-f]{12}@localhost")
SEED = 11


def rabbitmq_stream() -> StreamConfig:
    return parse_config(yaml.safe_load((REPO / "config" / "rabbitmq.yaml").read_text())).streams[0]


def assert_each_id_archived_once(endpoint: str, bucket: str, records: int, queue: dict[str, Any]) -> None:
    """Independently of the demo's check: every order's id ``m-<seed>-<n>`` is in the archive
    once; the messages published without one are dead letters ``missing_message_id``, once each;
    the ledger's positions tile 0..n-1."""
    s3 = boto3.client("s3", endpoint_url=endpoint)
    archived, _objects, _hours = read_archive(s3, bucket, "orders", config=rabbitmq_stream())
    ids = Counter(record.meta.key for record in archived if record.meta.key)
    assert set(ids.values()) == {1}
    missing = [record for record in archived if not record.meta.key]
    assert len(missing) == queue["without_message_id"] > 0
    assert {record.error.split(":", 1)[0] for record in missing} == {"missing_message_id"}
    assert all(record.dead_letter for record in missing)
    assert len(ids) + len(missing) == records
    assert set(ids) <= {f"m-{SEED}-{n}".encode() for n in range(records)}
    assert sorted(record.offset for record in archived) == list(range(records))


def descendants(root: int) -> dict[int, bytes]:
    """pid -> command line of every live process below ``root`` (from /proc)."""
    parents: dict[int, int] = {}
    commands: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: dict[int, bytes] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = commands.get(pid, b"")
                frontier.append(pid)
    return found


def still_running(processes: dict[int, bytes]) -> dict[int, bytes]:
    """Those of ``processes`` still alive (the same pid with the same command line, not a zombie)."""
    alive: dict[int, bytes] = {}
    for pid, command in processes.items():
        try:
            same = Path(f"/proc/{pid}/cmdline").read_bytes() == command
            zombie = ") Z " in Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # gone
            continue
        if same and not zombie:
            alive[pid] = command
    return alive


def broker_left(output: str) -> set[int]:
    """Processes still running for the broker the demo's output names (broker, epmd, children)."""
    nodes = set(NODE.findall(output))
    assert len(nodes) == 1, output
    return marked_pids(nodes.pop())


def test_rabbitmq_demo_archives_each_message_id_once_and_stops_its_broker(moto_endpoint: str, tmp_path: Path):
    suffix = uuid.uuid4().hex[:8]
    bucket, table = f"tidemark-rmq-{suffix}", f"tidemark-rmq-ledger-{suffix}"
    report_path = tmp_path / "report.json"

    done = tidemark(
        "demo", "--source", "rabbitmq", "--records", "400", "--seed", str(SEED), "--no-aggregate",
        "--endpoint-url", moto_endpoint, "--bucket", bucket, "--ledger-table", table,
        "--workdir", tmp_path / "work", "--report-json", report_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS: 400 records exactly once" in done.stdout
    report = json.loads(report_path.read_text())
    check, queue, delivery = report["verification"], report["queue"], report["delivery"]
    assert report["result"] == "PASS" and report["source"] == "rabbitmq" and report["topic"] == "orders"
    assert check["produced"] == 400 == check["archived"] + check["dead_lettered"]
    assert (check["lost"], check["duplicated"], check["unexpected"], check["misfiled"], check["corrupted"]) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert report["partitions"] == {
        "0": {"produced": 400, "archived": check["archived"], "dead_lettered": check["dead_lettered"]}
    }
    assert report["dead_letter_reasons"]["missing_message_id"] == queue["without_message_id"] == 4
    assert queue["broker_arn"] == rabbitmq_stream().source.broker_arn and queue["virtual_host"] == "/"
    # Some orders were published twice (a publisher's retry): the dedupe index dropped exactly those.
    assert queue["publisher_retries"] == 5 and queue["published"] == 405 == queue["acked"] == queue["received"]
    assert queue["duplicates_dropped"] == queue["publisher_retries"]
    assert (queue["redelivered"], queue["nacked"], queue["lost_acks"], queue["left_in_queue"]) == (0, 0, 0, 0)
    assert delivery["records_delivered"] == 405 and delivery["largest_batch"] == 100  # config/rabbitmq.yaml's
    assert report["audit"]["clean"] and report["audit"]["records"] == 400 and report["audit"]["partitions"] == 1
    assert report["replay"] is None and report["aggregation"] is None and report["chaos"] is None
    assert report["bootstrap_servers"] is None and report["stream_arn"] is None
    assert_each_id_archived_once(moto_endpoint, bucket, 400, queue)
    assert not listening(queue["broker"].removeprefix("amqp://").split("/")[0])
    assert not broker_left(done.stdout)


def test_rabbitmq_demo_with_chaos_redelivers_and_still_archives_each_id_once(moto_endpoint: str, tmp_path: Path):
    suffix = uuid.uuid4().hex[:8]
    bucket, table = f"tidemark-rmq-{suffix}", f"tidemark-rmq-ledger-{suffix}"
    report_path = tmp_path / "report.json"

    done = tidemark(
        "demo", "--source", "rabbitmq", "--records", "240", "--no-aggregate",
        "--chaos", "--crash-rate", "0.6", "--lost-commit-rate", "0.2", "--seed", str(SEED),
        "--batch-size", "20", "--flush-records", "150",
        "--endpoint-url", moto_endpoint, "--bucket", bucket, "--ledger-table", table,
        "--workdir", tmp_path / "work", "--report-json", report_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_path.read_text())
    check, queue, delivery, chaos = report["verification"], report["queue"], report["delivery"], report["chaos"]
    assert report["result"] == "PASS"
    assert check["produced"] == 240 == check["archived"] + check["dead_lettered"]
    assert (check["lost"], check["duplicated"], check["unexpected"]) == (0, 0, 0)
    # Chaos happened: processes killed (at least the armed drain), failed invocations nacked and
    # requeued, acks lost; the broker redelivered, the archiver dropped what it had accepted.
    assert chaos["crashes"] >= 1 and chaos["lost_commits"] == queue["lost_acks"] >= 1
    assert delivery["failed_invocations"] >= 1 and queue["nacked"] >= 1
    assert queue["redelivered"] >= queue["nacked"] and queue["reconnects"] == queue["lost_acks"]
    assert queue["duplicates_dropped"] > queue["publisher_retries"] > 0
    assert delivery["records_delivered"] > queue["published"] == queue["acked"]
    assert queue["left_in_queue"] == 0 and delivery["largest_batch"] == 20
    assert report["audit"]["clean"] and report["sweeper"]["reconcile"]["findings"] == {}
    assert_each_id_archived_once(moto_endpoint, bucket, 240, queue)
    assert not broker_left(done.stdout)


def test_a_ctrl_c_while_a_chaos_child_runs_stops_the_broker_epmd_moto_and_the_child(tmp_path: Path):
    command = [
        sys.executable, "-m", "tidemark.cli.app", "demo", "--source", "rabbitmq", "--records", "20000",
        "--chaos", "--crash-rate", "0.5", "--workdir", str(tmp_path / "work"),
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even if our parent ignores it
    )
    started: dict[int, bytes] = {}
    try:
        deadline = time.monotonic() + 120
        while not any(CHILD in cmdline for cmdline in started.values()):
            assert time.monotonic() < deadline, "no chaos child started"
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.1)
            assert process.returncode is None, process.communicate()
            started = descendants(process.pid)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "interrupted: every process this command started has been stopped" in err
    names = b" ".join(started.values())
    assert all(name in names for name in (b"beam.smp", b"epmd", b"moto_server", CHILD)), started
    assert not still_running(started)
    assert not broker_left(out)
