"""``tidemark epoch``: the operator's answer to a position reset, through the installed CLI."""

from __future__ import annotations

import json

import pytest
import typer.main

from tests.e2e.test_demo import tidemark
from tests.support.events import msk_event
from tests.support.harness import small_config
from tests.support.workload import make_orders
from tidemark.archiver import Archiver, PositionResetsError
from tidemark.cli.app import app

CONFIG = "config/tidemark.yaml"


@pytest.mark.parametrize("command", ["start", "list"])
def test_every_epoch_option_is_explained(command):
    click_command = typer.main.get_command(app).commands["epoch"].commands[command]  # type: ignore[attr-defined]
    assert [param.name for param in click_command.params if not getattr(param, "help", None)] == []


def test_epoch_start_unblocks_a_refused_partition_and_list_shows_the_audit_trail(archive):
    config = small_config()
    old = make_orders(partitions=1, per_partition=40, seed=1)
    new = make_orders(partitions=1, per_partition=40, seed=2, base_ms=old.records[0][-1].timestamp_ms)
    archiver = Archiver(archive.runtime(config))
    archiver.handle(msk_event(old.records[0]))
    with pytest.raises(PositionResetsError):
        archiver.handle(msk_event(new.records[0]))
    where = ("--endpoint-url", archive.endpoint, "--ledger-table", archive.table, "--config", CONFIG)

    started = tidemark(
        "epoch", "start", "--stream", "orders", "-p", "0", "--from-offset", "0", "--reason", "topic recreated",
        *where, "--json",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    [start] = json.loads(started.stdout)
    assert start.pop("started_ms") > 0
    assert [start] == [
        {
            "stream": "orders",
            "partition": 0,
            "epoch": 1,
            "first_offset": 0,
            "previous_staged_offset": 39,
            "previous_source": "tidemark-demo/4f3e2d1c-0b9a-4c8d-9e7f-6a5b4c3d2e1f-1/orders",
            "source": "",
            "reason": "topic recreated",
        }
    ]
    assert archiver.handle(msk_event(new.records[0]))["orders"].staged == 40  # the retry goes through

    listed = tidemark("epoch", "list", "--stream", "orders", "-p", "0", *where, "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["epoch"], row["staged_offset"], row["source"].endswith("/orders")) == (1, 39, True)
    assert [(s["epoch"], s["first_offset"], s["reason"]) for s in row["starts"]] == [(1, 0, "topic recreated")]
    text = tidemark("epoch", "list", "--stream", "orders", "-p", "0", *where)
    assert "epoch 1: from offset 0 (topic recreated)" in text.stdout


def test_epoch_start_for_an_unknown_stream_is_one_line(archive):
    done = tidemark(
        "epoch", "start", "--stream", "nope", "-p", "0", "--from-offset", "0",
        "--endpoint-url", archive.endpoint, "--ledger-table", archive.table, "--config", CONFIG,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: --stream 'nope': not in config/tidemark.yaml (streams: orders)"]
