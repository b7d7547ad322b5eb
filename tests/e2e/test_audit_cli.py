"""``tidemark audit`` through the installed CLI, against a real archive on the moto server: exit
codes, one line per finding, JSON, the stack's outputs as the target."""

from __future__ import annotations

import json

import pytest
import typer.main

from tests.e2e.test_demo import tidemark
from tests.support.harness import EsmModel, finish, small_config
from tests.support.workload import make_orders
from tidemark.cli.app import app

CONFIG = "config/tidemark.yaml"


def test_every_audit_option_is_explained():
    command = typer.main.get_command(app).commands["audit"]  # type: ignore[attr-defined]
    assert [param.name for param in command.params if not getattr(param, "help", None)] == []


@pytest.fixture
def whole(archive):
    config = small_config()
    esm = EsmModel(make_orders(partitions=2, per_partition=120, seed=4), lambda crash: archive.runtime(config, crash))
    finish(archive, config, esm)
    return archive


def where(archive) -> tuple[str, ...]:
    return ("--endpoint-url", archive.endpoint, "--bucket", archive.bucket, "--ledger-table", archive.table)


def test_a_clean_archive_exits_0_and_a_damaged_one_1_naming_each_finding(whole):
    clean = tidemark("audit", "--stream", "orders", "--config", CONFIG, *where(whole))
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.splitlines()[-1] == "clean"
    assert "partition 0: offsets 0..119" in clean.stdout and "no gap through 119" in clean.stdout

    keys = [item["Key"] for item in whole.s3.list_objects_v2(Bucket=whole.bucket, Prefix="raw/")["Contents"]]
    whole.s3.delete_object(Bucket=whole.bucket, Key=keys[0])
    damaged = tidemark("audit", "--stream", "orders", "--config", CONFIG, *where(whole), "--json")
    assert damaged.returncode == 1, damaged.stderr
    report = json.loads(damaged.stdout)
    assert report["clean"] is False
    assert {finding["kind"] for finding in report["findings"]} == {"missing_object", "gap"}
    assert [f["key"] for f in report["findings"] if f["kind"] == "missing_object"] == [keys[0]]

    lines = tidemark("audit", "--stream", "orders", "--config", CONFIG, *where(whole)).stdout.splitlines()
    assert any(
        line.startswith("missing_object: partition ") and line.endswith(": recorded in the ledger, not in S3")
        for line in lines
    )


def test_the_stack_outputs_name_the_bucket_and_table(whole):
    cloudformation = __import__("boto3").client("cloudformation", endpoint_url=whole.endpoint)
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {
            "ArchiveBucketName": {"Value": whole.bucket},
            "LedgerTableName": {"Value": whole.table},
        },
    }
    stack = f"tidemark-{whole.bucket[-10:]}"
    cloudformation.create_stack(StackName=stack, TemplateBody=json.dumps(template))
    done = tidemark(
        "audit", "--stream", "orders", "--config", CONFIG, "--endpoint-url", whole.endpoint, "--stack-name", stack
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "clean"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--stream", "nope"), "--stream 'nope': not in"),
        (("--stream", "orders", "--from", "yesterday"), "--from 'yesterday'"),
        (("--stream", "orders", "--bucket", "", "--ledger-table", ""), "which archive?"),
    ],
)
def test_unusable_options_are_one_line_errors_with_exit_2(args, message, monkeypatch):
    monkeypatch.delenv("TIDEMARK_BUCKET", raising=False)
    monkeypatch.delenv("TIDEMARK_LEDGER_TABLE", raising=False)
    done = tidemark("audit", "--config", CONFIG, *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr


def test_status_lists_every_partition_and_flags_none_when_all_is_in_s3(whole):
    done = tidemark(
        "status", "--stream", "orders", "--config", CONFIG, "--endpoint-url", whole.endpoint,
        "--ledger-table", whole.table, "-p", "0", "-p", "1", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [stream] = json.loads(done.stdout)
    rows = {row["partition"]: row for row in stream["partitions"]}
    assert sorted(rows) == [0, 1] and stream["stale_partitions"] == []
    assert [(row["staged_offset"], row["committed_through"], row["buffers"]) for row in rows.values()] == [
        (119, 119, []),
        (119, 119, []),
    ]
    where = ("--endpoint-url", whole.endpoint, "--ledger-table", whole.table, "-p", "1")
    text = tidemark("status", "--config", CONFIG, *where)
    assert text.returncode == 0, text.stderr
    assert "partition 1: staged 119, in S3 through 119, 0 open buffers" in text.stdout


def test_kafka_client_settings_come_from_a_properties_file(whole, kafka_bootstrap, tmp_path):
    """``--kafka-config``: what a real cluster needs (SASL, TLS) reaches the client; a property
    librdkafka refuses, or a line that is no property, is a one-line error."""
    good, unknown, broken = tmp_path / "good.properties", tmp_path / "unknown.properties", tmp_path / "broken"
    good.write_text(
        "# as a Java client's file\n\nclient.id = tidemark-ops\n! another comment\nsocket.timeout.ms=20000\n"
    )
    unknown.write_text("no.such.property=1\n")
    broken.write_text("client.id=x\nsasl.mechanism\n")
    args = ("audit", "--stream", "orders", "--config", CONFIG, *where(whole), "--bootstrap-servers", kafka_bootstrap)
    done = tidemark(*args, "--kafka-config", good)
    assert done.returncode == 0, done.stderr
    refused = tidemark(*args, "--kafka-config", unknown)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "Kafka client settings" in refused.stderr and "no.such.property" in refused.stderr
    malformed = tidemark(*args, "--kafka-config", broken)
    assert malformed.returncode == 2 and f"{broken}:2: expected key=value, got 'sasl.mechanism'" in malformed.stderr
