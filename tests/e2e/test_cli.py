"""The ``tidemark`` command line: documented options, one-line errors, no stray processes,
and ``tidemark invoke`` as the no-Docker ``sam local invoke``."""

from __future__ import annotations

import json
import socket

import pytest
import typer.main

from tests.e2e.test_demo import tidemark
from tests.support.processes import service_processes
from tidemark.cli.app import app
from tidemark.embedded.ports import free_port


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


def test_invoke_reports_a_function_error_with_exit_code_1(tmp_path):
    event = tmp_path / "not-kafka.json"
    event.write_text(json.dumps({"Records": [{"eventSource": "aws:sqs"}]}))
    done = tidemark("invoke", "-e", event, "--workdir", tmp_path)
    assert done.returncode == 1
    assert "not a Kafka event source mapping event" in json.loads(done.stdout)["errorMessage"]


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
