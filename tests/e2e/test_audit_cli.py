"""``tidemark audit`` through the installed CLI, against a real archive on the moto server: exit
codes, one line per finding, JSON, the stack's outputs as the target."""

from __future__ import annotations

import json

import pytest
import typer.main
import yaml

from tests.e2e.test_demo import tidemark
from tests.support.audit import committed, dense, erase
from tests.support.harness import EsmModel, finish, small_config, small_config_data
from tests.support.kafka import new_topic, produce_records
from tests.support.workload import BASE_MS, HOUR_MS, make_orders
from tidemark.cli.app import app
from tidemark.config import parse_config
from tidemark.embedded.workload import recreate_topic

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
    librdkafka refuses, or a line that is no property, is a one-line error that never echoes the
    line (it may be a secret pasted alone); a file others can read is warned about."""
    good, unknown, broken = tmp_path / "good.properties", tmp_path / "unknown.properties", tmp_path / "broken"
    good.write_text(
        "# as a Java client's file\n\nclient.id = tidemark-ops\n! another comment\nsocket.timeout.ms=20000\n"
    )
    unknown.write_text("no.such.property=1\n")
    broken.write_text("client.id=x\nsasl.mechanism\n")
    for path in (good, unknown, broken):
        path.chmod(0o600)  # as a file of credentials should be
    args = ("audit", "--stream", "orders", "--config", CONFIG, *where(whole), "--bootstrap-servers", kafka_bootstrap)
    done = tidemark(*args, "--kafka-config", good)
    assert done.returncode == 0, done.stderr
    refused = tidemark(*args, "--kafka-config", unknown)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "Kafka client settings" in refused.stderr and "no.such.property" in refused.stderr
    malformed = tidemark(*args, "--kafka-config", broken)
    assert malformed.returncode == 2 and malformed.stderr.count("\n") == 1
    assert f"{broken}:2: property 'sasl.mechanism' has no value (expected key=value)" in malformed.stderr
    pasted = tmp_path / "pasted.properties"
    pasted.write_text("client.id: x\nhunter2-the-password\n")
    pasted.chmod(0o644)  # readable by others: warned about, on a line of its own
    leaked = tidemark(*args, "--kafka-config", pasted)
    assert leaked.returncode == 2 and "hunter2" not in leaked.stderr + leaked.stdout
    assert f"{pasted}:2: property has no value" in leaked.stderr and "can be read by other users" in leaked.stderr


def test_erased_epoch_ends_and_a_whole_partition_fail_the_audit_with_the_kafka_probe(
    archive, kafka_bootstrap, tmp_path
):
    """Issue 29, finding 2, as reported: two partitions, the topic recreated, epoch 1 from offset
    0; erased (object and ledger item): the head of partition 0's epoch 1 (still in Kafka), the
    tail of its epoch 0, and every object of partition 1. Each is a gap, partition 1 included."""
    topic = new_topic(kafka_bootstrap, 2, "audit")
    data = small_config_data(topic=topic, max_records=20)
    config_file = tmp_path / "tidemark.yaml"
    config_file.write_text(yaml.safe_dump(data))
    config = parse_config(data)
    for epoch, seed in enumerate((1, 2)):
        if epoch:
            recreate_topic(kafka_bootstrap, topic, 2)
            for partition in (0, 1):
                archive.runtime(config).writer(config.streams[0], partition).start_epoch(0, reason="recreated")
        workload = dense(partitions=2, per_partition=100, seed=seed, base_ms=BASE_MS + 2 * epoch * HOUR_MS, topic=topic)
        for records in workload.records.values():
            assert produce_records(kafka_bootstrap, records) == list(range(100))
        finish(archive, config, EsmModel(workload, lambda crash: archive.runtime(config, crash)), 10)
    objects = committed(archive.runtime(config).ledger)
    victims = [obj for obj in objects if obj.partition == 1 or (obj.partition, obj.epoch, obj.first) == (0, 1, 0)]
    victims += [obj for obj in objects if (obj.partition, obj.epoch, obj.last) == (0, 0, 99)]
    assert sum(obj.records for obj in victims if obj.partition == 1) == 200
    for obj in victims:
        erase(archive, obj)

    done = tidemark(
        "audit", "--stream", "orders", "--config", config_file, *where(archive), "--bootstrap-servers", kafka_bootstrap
    )
    assert done.returncode == 1, done.stdout + done.stderr
    found = [line for line in done.stdout.splitlines() if line.startswith("gap: ")]
    assert [line.split(":")[1] for line in found] == [
        " partition 0, offsets 80..99",
        " partition 0 epoch 1, offsets 0..19",
        " partition 1, offsets 0..99",
        " partition 1 epoch 1, offsets 0..99",
    ], done.stdout
    assert found[1].endswith("the source still holds 20 records here")
    assert found[3].endswith("the source still holds 100 records here")
    assert "  partition 1 epoch 1: no object" in done.stdout
    assert done.stdout.splitlines()[-1] == "4 findings"


def test_what_could_not_be_checked_is_named_and_never_called_clean(archive):
    """A ledger state from before the first accepted offset was kept, its partition's first
    object erased: no finding (exit 0), but a ``not checked`` line and no ``clean``."""
    whole, config = archive, small_config()
    finish(
        archive, config, EsmModel(dense(partitions=1, per_partition=120, seed=5), lambda c: archive.runtime(config, c))
    )
    key = {"pk": {"S": "PART#orders#0"}, "sk": {"S": "STATE"}}
    item = whole.dynamodb.get_item(TableName=whole.table, Key=key, ConsistentRead=True)["Item"]
    del item["first_accepted"]
    whole.dynamodb.put_item(TableName=whole.table, Item=item)
    first = committed(whole.runtime(config).ledger)[0]
    assert (first.partition, first.first) == (0, 0)
    erase(whole, first)

    done = tidemark("audit", "--stream", "orders", "--config", CONFIG, *where(whole))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("not checked: ")] == [
        f"not checked: partition 0, offsets ..{first.last}: the ledger's first accepted offset is not known "
        "(a state item written before it was kept)"
    ]
    assert lines[-1] == "no findings, but not proven whole: 1 range not checked (above)"
    report = json.loads(tidemark("audit", "--stream", "orders", "--config", CONFIG, *where(whole), "--json").stdout)
    assert (report["clean"], report["complete"], len(report["unchecked"])) == (True, False, 1)
    hours = tidemark("audit", "--stream", "orders", "--config", CONFIG, *where(whole), "--from", first.hour)
    assert hours.returncode == 0 and hours.stdout.splitlines()[-1].endswith("(gaps not checked)")
