"""The ``tidemark`` command line: documented options, one-line errors, no stray processes,
and ``tidemark invoke`` as the no-Docker ``sam local invoke``."""

from __future__ import annotations

import json
import socket

import boto3
import pytest
import typer.main

from tests.conftest import REPO
from tests.e2e.test_demo import tidemark
from tests.support.processes import service_processes
from tidemark.cli.app import app
from tidemark.config import load_config
from tidemark.embedded.invoke import InvokeOptions
from tidemark.embedded.moto_server import moto_server
from tidemark.embedded.ports import free_port
from tidemark.verify import read_archive


@pytest.mark.parametrize("command", ["demo", "invoke"])
def test_every_option_is_explained(command):
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    undocumented = [param.name for param in click_command.params if not getattr(param, "help", None)]
    assert undocumented == []
    done = tidemark(command, "--help")
    assert done.returncode == 0
    for param in click_command.params:
        assert any(opt in done.stdout for opt in param.opts), param.name  # shown in full, not cut off


def one_line_error(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_unreachable_broker_is_one_actionable_line_and_nothing_left_running(tmp_path):
    before = service_processes()
    port = free_port()  # nothing listens there
    done = tidemark("demo", "--bootstrap-servers", f"127.0.0.1:{port}", "--workdir", tmp_path)
    assert done.returncode == 2
    assert one_line_error(done) == (
        f"error: cannot reach Kafka at 127.0.0.1:{port} within 10s: check --bootstrap-servers "
        "(or leave it out to use the embedded broker)"
    )
    assert service_processes() == before


@pytest.mark.parametrize("option", ["--broker-port", "--moto-port"])
def test_a_port_in_use_is_one_actionable_line_and_nothing_left_running(option, tmp_path):
    before = service_processes()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = tidemark("demo", option, port, "--workdir", tmp_path)
    assert done.returncode == 2
    assert one_line_error(done) == (
        f"error: port {port} on 127.0.0.1 is already in use: pass another with {option}, or {option} 0 for a free one"
    )
    assert service_processes() == before  # with --moto-port, the broker had started: it is gone again


def test_invoke_runs_the_archiver_with_a_sample_event_and_drains_it_to_s3(tmp_path):
    before = service_processes()
    done = tidemark("invoke", "archiver", "-e", "events/msk-orders.json", "--drain", "--workdir", tmp_path)
    assert done.returncode == 0, done.stderr
    response = json.loads(done.stdout)
    assert response["status"] == "ok"
    assert response["streams"]["orders"]["records_in"] > 0
    assert "s3://tidemark-local-archive/raw/orders/2026/11/21/" in done.stderr
    assert '"_aws"' in done.stderr  # the EMF metrics document, on stderr like the logs
    assert service_processes() == before


def test_invoke_with_a_kinesis_event_defaults_to_the_kinesis_config_and_archives_it(tmp_path):
    """``events/kinesis-orders.json`` names the stream of ``config/kinesis.yaml``, which ``--config``
    defaults to for a Kinesis event: five records of one shard, one of them garbage (dead-lettered)
    and one delivered twice in the batch (archived once)."""
    before = service_processes()
    with moto_server() as endpoint:
        done = tidemark(
            "invoke", "archiver", "-e", "events/kinesis-orders.json", "--drain",
            "--workdir", tmp_path, "--endpoint-url", endpoint,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        response = json.loads(done.stdout)
        assert response["streams"]["orders"] | {"objects_committed": 0} == {
            "records_in": 5,
            "duplicates": 1,
            "staged": 4,
            "dead_lettered": 1,
            "objects_committed": 0,
            "flush_errors": 0,
            "quarantined": 0,
        }
        s3 = boto3.client("s3", endpoint_url=endpoint)
        keys = sorted(item["Key"] for item in s3.list_objects_v2(Bucket=InvokeOptions.bucket).get("Contents", []))
        stream = load_config(REPO / "config" / "kinesis.yaml").streams[0]
        records, objects, _hours = read_archive(s3, InvokeOptions.bucket, "orders", config=stream)
    shard, first = "shardId-000000000006", 49590338271490256608559692538361571095921575989136588898
    assert objects == len(keys) == 3
    assert [key.split("+")[0] for key in keys] == [
        "errors/orders/2026/11/21/07/orders",  # dead letters: under the arrival hour
        "raw/orders/2026/11/21/07/orders",
        "raw/orders/2026/11/21/08/orders",
    ]
    assert all(f"+{shard}+" in key for key in keys)
    for key in keys:
        assert f"s3://{InvokeOptions.bucket}/{key}" in done.stderr  # listed after the drain
    raw = sorted((r.folder, r.offset, json.loads(r.value)["order_id"]) for r in records if not r.dead_letter)
    assert raw == [  # o-2002 was in the batch twice: archived once
        ("2026/11/21/07", first, "o-2001"),
        ("2026/11/21/07", 49590338271490256608559692538361571095953420055848418930, "o-2002"),
        ("2026/11/21/08", 49590338271490256608559692538361571096017108189272078994, "o-2003"),
    ]
    assert all(r.partition == shard and r.meta.topic == "orders" for r in records)
    [garbage] = [r for r in records if r.dead_letter]
    assert garbage.value == b"{not json: the producer sent garbage"
    assert garbage.error.startswith("invalid_value_encoding")
    assert garbage.offset == 49590338271490256608559692538361571095985264122560248962
    assert garbage.meta.key == b"c-2"
    assert service_processes() == before


def test_invoke_with_a_rabbitmq_event_defaults_to_its_config_numbers_and_dedupes(tmp_path):
    """``events/rabbitmq-orders.json``: four messages of queue ``orders``, the first redelivered
    in the same batch (archived once), one without a message id (dead-lettered). The ledger
    numbers what it accepts: positions 0 and 1 archived, 2 dead-lettered."""
    before = service_processes()
    with moto_server() as endpoint:
        done = tidemark(
            "invoke", "archiver", "-e", "events/rabbitmq-orders.json", "--drain",
            "--workdir", tmp_path, "--endpoint-url", endpoint,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        response = json.loads(done.stdout)
        assert response["streams"]["orders"] | {"objects_committed": 0} == {
            "records_in": 4,
            "duplicates": 1,
            "staged": 3,
            "dead_lettered": 1,
            "objects_committed": 0,
            "flush_errors": 0,
            "quarantined": 0,
        }
        s3 = boto3.client("s3", endpoint_url=endpoint)
        stream = load_config(REPO / "config" / "rabbitmq.yaml").streams[0]
        records, objects, _hours = read_archive(s3, InvokeOptions.bucket, "orders", config=stream)
    assert objects == 2
    raw = sorted((r.offset, r.meta.key, json.loads(r.value)["order_id"]) for r in records if not r.dead_letter)
    assert raw == [(0, b"m-1001", "o-1001"), (1, b"m-1002", "o-1002")]
    [missing] = [r for r in records if r.dead_letter]
    assert (missing.offset, missing.meta.key) == (2, None)
    assert missing.error.startswith("missing_message_id")
    assert ("amqp.content_type", b"application/json") in missing.meta.headers
    assert all(r.meta.topic == "orders" for r in records)
    assert service_processes() == before


def test_invoke_reports_a_function_error_with_exit_code_1(tmp_path):
    event = tmp_path / "not-kafka.json"
    event.write_text(json.dumps({"Records": [{"eventSource": "aws:sqs"}]}))
    done = tidemark("invoke", "-e", event, "--workdir", tmp_path)
    assert done.returncode == 1
    assert (
        "not a Kafka, Kinesis or RabbitMQ event source mapping event: eventSource='aws:sqs'"
        in json.loads(done.stdout)["errorMessage"]
    )


@pytest.mark.parametrize("verbose", [False, True])
def test_invoke_shows_the_function_error_traceback_only_with_verbose(verbose, tmp_path):
    event = tmp_path / "refused.json"
    event.write_text(json.dumps({"eventSource": "nope", "records": {}}))
    done = tidemark("invoke", "-e", event, "--workdir", tmp_path, *(["--verbose"] if verbose else []))
    assert done.returncode == 1
    assert done.stdout.count("\n") == 1  # the one JSON line, with or without --verbose
    assert json.loads(done.stdout) == {
        "errorMessage": "MalformedEventError: not a Kafka event source mapping event: eventSource='nope' "
        "(expected one of ['SelfManagedKafka', 'aws:SelfManagedKafka', 'aws:kafka'])"
    }
    assert ("Traceback (most recent call last)" in done.stderr) is verbose, done.stderr
    if verbose:
        assert "tidemark.exceptions.MalformedEventError: not a Kafka event source mapping event" in done.stderr


def test_invoke_with_a_missing_event_file_is_one_line(tmp_path):
    done = tidemark("invoke", "-e", tmp_path / "nope.json", "--workdir", tmp_path)
    assert done.returncode == 2
    assert one_line_error(done).startswith(f"error: {tmp_path / 'nope.json'}: cannot read the event")
