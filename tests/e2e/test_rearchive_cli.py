"""``tidemark rearchive`` through the installed CLI: a quarantined flush archived again from the
embedded broker (exit 0, the object named), a rerun with nothing left (exit 2, one line), and the
range named back by ``tidemark status``."""

from __future__ import annotations

import json

import typer.main
import yaml

from tests.e2e.test_demo import tidemark
from tests.integration.test_rearchive import objects, quarantine
from tests.support.harness import small_config_data
from tidemark.cli.app import app
from tidemark.embedded.workload import recreate_topic


def test_every_rearchive_option_is_explained():
    command = typer.main.get_command(app).commands["rearchive"]  # type: ignore[attr-defined]
    assert [param.name for param in command.params if not getattr(param, "help", None)] == []


def test_the_cli_rearchives_a_quarantined_flush_once(archive, kafka_bootstrap, tmp_path):
    setup = quarantine(archive, kafka_bootstrap)
    config = tmp_path / "tidemark.yaml"
    config.write_text(yaml.safe_dump(small_config_data(max_records=10_000, topic=setup.topic)))
    where = ("--config", config, "--endpoint-url", archive.endpoint, "--bucket", archive.bucket)
    where += ("--ledger-table", archive.table)
    buffer = setup.held.flush.buffer

    status = tidemark("status", "--stream", "orders", *where[:2], *where[2:4], *where[6:], "-p", "0", "--json")
    [stream] = json.loads(status.stdout)
    [quarantined] = [row for row in stream["partitions"][0]["buffers"] if row["state"] == "quarantined"]
    assert (quarantined["first"], quarantined["last"]) == (buffer.first, buffer.last)

    args = ("rearchive", "--stream", "orders", "-p", "0", "--bootstrap-servers", kafka_bootstrap)
    span = ("--from-offset", str(buffer.first), "--to-offset", str(buffer.last))
    done = tidemark(*args, *span, *where)
    assert done.returncode == 0, done.stderr
    assert f"offsets {buffer.first}..{buffer.last}, {buffer.records} records -> {setup.held.flush.object_key}" in (
        done.stdout
    )
    assert setup.held.flush.object_key in objects(archive)

    again = tidemark(*args, *span, *where, "--json")
    assert again.returncode == 2
    assert again.stderr.count("\n") == 1 and "no quarantined flush in offsets" in again.stderr


def test_every_abandon_option_is_explained():
    command = typer.main.get_command(app).commands["abandon"]  # type: ignore[attr-defined]
    assert [param.name for param in command.params if not getattr(param, "help", None)] == []


def test_the_cli_abandons_only_what_kafka_no_longer_holds_and_the_audit_lists_it(archive, kafka_bootstrap, tmp_path):
    setup = quarantine(archive, kafka_bootstrap)
    config = tmp_path / "tidemark.yaml"
    config.write_text(yaml.safe_dump(small_config_data(max_records=10_000, topic=setup.topic)))
    where = ("--config", config, "--endpoint-url", archive.endpoint, "--bucket", archive.bucket)
    where += ("--ledger-table", archive.table)
    buffer = setup.held.flush.buffer
    args = ("abandon", "--stream", "orders", "-p", "0", "--reason", "INC-4211: records gone")
    span = ("--from-offset", str(buffer.first), "--to-offset", str(buffer.last))

    unasked = tidemark(*args, *span, *where)
    assert unasked.returncode == 2 and unasked.stderr.count("\n") == 1 and "--bootstrap-servers" in unasked.stderr
    held = tidemark(*args, *span, *where, "--bootstrap-servers", kafka_bootstrap)
    assert held.returncode == 2 and held.stderr.count("\n") == 1 and "rearchive" in held.stderr

    recreate_topic(kafka_bootstrap, setup.topic, 1)  # the records are gone with the old topic
    done = tidemark(*args, *span, *where, "--bootstrap-servers", kafka_bootstrap, "--json")
    assert done.returncode == 0, done.stderr
    [flush] = json.loads(done.stdout)["flushes"]
    assert (flush["flush_id"], flush["reason"]) == (setup.held.flush.flush_id, "INC-4211: records gone")

    audit = tidemark("audit", "--stream", "orders", *where)
    assert audit.returncode == 0, audit.stderr
    lines = audit.stdout.splitlines()
    assert any(line.startswith("abandoned: partition 0") and "INC-4211" in line for line in lines)
    assert lines[-1] == f"clean, but for {buffer.records} records an operator recorded lost (abandoned, above)"
