"""``tidemark recover`` through the installed CLI, against the embedded broker and the moto server:
records the event source mapping withheld are archived from the log (exit 0, one line per
partition, the audit clean after), a rerun finds nothing left, a registry stream's become dead
letters (``--json``), records the topic no longer retains are named (exit 1), and a refusal is one
line (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

from tests.e2e.test_demo import tidemark
from tests.integration.test_recover import GLUE, WITHHELD, archive_withholding, keys
from tests.support.harness import small_config_data
from tidemark.cli import recover as recover_cli
from tidemark.cli.app import app
from tidemark.config import parse_config
from tidemark.exceptions import NotRetainedError
from tidemark.kafka_log import KafkaLog


def test_every_recover_option_is_explained():
    command = typer.main.get_command(app).commands["recover"]  # type: ignore[attr-defined]
    assert [param.name for param in command.params if not getattr(param, "help", None)] == []
    done = tidemark("recover", "--help")
    assert done.returncode == 0
    for param in command.params:
        assert any(opt in done.stdout for opt in param.opts), param.name  # shown in full, not cut off


def withholding(archive: Any, bootstrap: str, root: Path, *, registry: bool = False) -> tuple[Any, tuple[Any, ...]]:
    """``archive_withholding``'s scenario, its configuration written where the CLI reads it; the
    target options."""
    setup = archive_withholding(archive, bootstrap, WITHHELD, registry=registry)
    data = small_config_data(max_records=10_000, topic=setup.topic)
    if registry:  # as archive_withholding configures it
        data["streams"][0]["source"]["schema_registry"] = GLUE
        data["streams"][0]["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 2}}
    assert parse_config(data) == setup.config
    config = root / "tidemark.yaml"
    config.write_text(yaml.safe_dump(data))
    where = ("--config", config, "--endpoint-url", archive.endpoint, "--bucket", archive.bucket)
    return setup, (*where, "--ledger-table", archive.table)


def test_the_cli_recovers_what_the_mapping_withheld_once(archive, kafka_bootstrap, tmp_path):
    _setup, where = withholding(archive, kafka_bootstrap, tmp_path)
    audit = ("audit", "--stream", "orders", *where, "--bootstrap-servers", kafka_bootstrap)
    before = tidemark(*audit)
    assert before.returncode == 1, before.stderr
    assert any(line.startswith("gap: partition 0") for line in before.stdout.splitlines()), before.stdout

    args = ("recover", "--stream", "orders", "--bootstrap-servers", kafka_bootstrap, *where)
    done = tidemark(*args)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"partition 0: {len(WITHHELD)} records recovered in "), lines
    assert len(lines) == 2 and lines[-1].startswith(f"stream orders: {len(WITHHELD)} records recovered in ")
    assert lines[-1].endswith("run `tidemark audit` to see the archive whole")

    after = tidemark(*audit)
    assert after.returncode == 0, after.stdout
    assert after.stdout.splitlines()[-1] == "clean"

    objects = keys(archive)
    again = tidemark(*args, "-p", "0")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == "partition 0: nothing missing"
    assert again.stdout.splitlines()[-1].startswith("stream orders: 0 records recovered in 0 objects over 1 partition;")
    assert keys(archive) == objects

    absent = tidemark(*args, "-p", "0", "-p", "5")  # refused before any partition is read
    assert absent.returncode == 2 and absent.stdout == ""
    assert absent.stderr.count("\n") == 1 and "--partition 5: topic " in absent.stderr, absent.stderr
    verbose = tidemark(*args, "-p", "5", "--verbose")
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr
    assert verbose.stderr.splitlines()[-1].startswith("error: --partition 5: topic ")

    # AWS refusing a call is exit 2 as well (exit 1 would say records are gone): one line
    no_table = tidemark(*args, "--ledger-table", "no-such-table")
    assert no_table.returncode == 2 and no_table.stdout == ""
    assert no_table.stderr.count("\n") == 1 and "ResourceNotFoundException" in no_table.stderr, no_table.stderr


def test_a_registry_streams_records_are_recovered_as_dead_letters_in_json(archive, kafka_bootstrap, tmp_path):
    _setup, where = withholding(archive, kafka_bootstrap, tmp_path, registry=True)
    done = tidemark("recover", "--stream", "orders", "--bootstrap-servers", kafka_bootstrap, *where, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["stream"], report["records"], report["not_retained"]) == ("orders", len(WITHHELD), False)
    [partition] = report["partitions"]
    assert partition["partition"] == 0 and partition["not_retained"] == [] and partition["unchecked"] == ""
    written = [key for unit in partition["units"] for key in unit["keys"]]
    assert written and len(written) == report["objects"] and all(key.startswith("errors/orders/") for key in written)


def test_records_the_topic_no_longer_retains_are_named_and_exit_1(archive, kafka_bootstrap, tmp_path, monkeypatch):
    """The log as retention left it (offsets below 40 deleted: the embedded broker deletes no
    records, so its reader is wrapped), the CLI in this process."""
    _setup, where = withholding(archive, kafka_bootstrap, tmp_path)

    class Truncated(KafkaLog):
        def start_offset(self, partition: Any) -> int:
            return 40

        def records(self, partition: Any, first: int, last: int) -> Any:
            if first < 40:
                raise NotRetainedError(f"offset {first} is no longer retained")
            return super().records(partition, first, last)

    monkeypatch.setattr(recover_cli, "KafkaLog", Truncated)
    args = ["recover", "--stream", "orders", "--bootstrap-servers", kafka_bootstrap, *map(str, where)]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 1, (done.stdout, done.stderr, done.exception)
    recovered = len({offset for offset in WITHHELD if offset >= 40})
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"partition 0: {recovered} records recovered in "), first
    assert first.endswith("; offsets 3, 17..19 no longer retained by the topic: their records are gone for good")
    assert "; 2 missing ranges no longer retained by the topic (above): their records are lost;" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--stream", "orders", "--config", "KINESIS"), "recover reads Kafka"),
        (("--stream", "nope", "--config", "config/tidemark.yaml"), "--stream 'nope': not in"),
        (("--stream", "orders", "--config", "config/tidemark.yaml", "-p", "shardId-000000000000"), "partition numbers"),
        (("--stream", "orders", "--config", "config/tidemark.yaml", "--ledger-table", ""), "which archive?"),
    ],
)
def test_a_refusal_is_one_line_with_exit_2(args, message, tmp_path, monkeypatch):
    monkeypatch.delenv("TIDEMARK_BUCKET", raising=False)
    monkeypatch.delenv("TIDEMARK_LEDGER_TABLE", raising=False)
    if "KINESIS" in args:
        config = tmp_path / "kinesis.yaml"
        config.write_text(yaml.safe_dump(small_config_data(kind="kinesis")))
        args = tuple(str(config) if arg == "KINESIS" else arg for arg in args)
    target = ("--bucket", "b", "--ledger-table", "t") if "--ledger-table" not in args else ("--bucket", "b")
    done = tidemark("recover", *args, *target, "--bootstrap-servers", "127.0.0.1:1")
    assert done.returncode == 2, done.stdout
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert done.stdout == ""


def test_a_missing_stream_is_a_usage_error_with_exit_2():
    done = tidemark("recover", "--bootstrap-servers", "127.0.0.1:1")
    assert done.returncode == 2 and "--stream" in done.stderr
