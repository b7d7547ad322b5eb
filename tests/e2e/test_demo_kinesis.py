"""``tidemark demo --source kinesis`` end to end, through the installed command line: a Kinesis
stream on moto with a shard split mid-run, the local Kinesis mapping, the real archiver handler,
chaos that kills processes and loses checkpoints -- then an independent check of the archive
against what the stream holds."""

from __future__ import annotations

import json
import uuid

import boto3
import yaml

from tests.conftest import REPO, Archive
from tests.e2e.test_demo import expected_hour, listening, tidemark
from tests.support.harness import assert_objects_describe_themselves
from tests.support.processes import service_processes
from tidemark.clock import ManualClock
from tidemark.config import TidemarkConfig, parse_config
from tidemark.verify import ExpectedRecord, RecordMeta, verify_archive

KINESIS_CONFIG = REPO / "config" / "kinesis.yaml"


def read_stream(endpoint: str, stream: str) -> list[ExpectedRecord]:
    """Every record every shard of the stream holds, read to each closed shard's end: the ground
    truth the archive must match (shard id and sequence number as Kinesis assigned them)."""
    kinesis = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
    found: list[ExpectedRecord] = []
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        closed = "EndingSequenceNumber" in shard["SequenceNumberRange"]
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=1000)
            for record in page["Records"]:
                value = bytes(record["Data"])
                meta = RecordMeta(stream, record["PartitionKey"].encode(), ())
                item = ExpectedRecord(
                    shard["ShardId"], int(record["SequenceNumber"]), value, expected_hour(value), meta
                )
                found.append(item)
            # a closed shard ends (no NextShardIterator); an open one has no end: stop when it is caught up
            iterator = page.get("NextShardIterator") if closed or page["Records"] else None
    return found


def kinesis_config(stream: str) -> TidemarkConfig:
    """config/kinesis.yaml reading ``stream`` (what the demo's ``--topic`` makes of it)."""
    data = yaml.safe_load(KINESIS_CONFIG.read_text())
    data["streams"][0]["source"]["stream_arn"] = f"arn:aws:kinesis:us-east-1:123456789012:stream/{stream}"
    return parse_config(data)


def test_kinesis_demo_with_chaos_and_a_split_is_exactly_once_against_what_the_stream_holds(moto_endpoint, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    name, bucket, table = f"orders-e2e-{suffix}", f"tidemark-kin-{suffix}", f"tidemark-kin-ledger-{suffix}"
    report_path = tmp_path / "report.json"

    done = tidemark(
        "demo", "--source", "kinesis",
        "--records", "2000",
        "--chaos", "--crash-rate", "0.3", "--lost-commit-rate", "0.1", "--seed", "11",
        "--batch-size", "100", "--flush-records", "300",
        "--endpoint-url", moto_endpoint, "--topic", name, "--bucket", bucket, "--ledger-table", table,
        "--workdir", tmp_path / "work", "--report-json", report_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_path.read_text())
    check = report["verification"]
    assert report["result"] == "PASS" and report["source"] == "kinesis"
    assert report["audit"]["clean"] and report["audit"]["records"] == 2000  # no shard's objects overlap
    assert check["produced"] == 2000 == check["archived"] + check["dead_lettered"]
    assert (check["lost"], check["duplicated"], check["unexpected"]) == (0, 0, 0)
    assert report["stream_arn"] == f"arn:aws:kinesis:us-east-1:123456789012:stream/{name}"
    assert report["aggregation"] is None  # the Kinesis demo runs Spark only with --aggregate

    # A shard was split mid-run; the parent and both children hold records; the mapping read the
    # parent to its end before either child.
    shards = report["shards"]
    assert len(shards["initial"]) == 2 and len(shards["closed"]) == 1 and len(shards["children"]) == 2
    parent, children = shards["closed"][0], shards["children"]
    assert parent in shards["initial"] and shards["parent_undelivered_at_split"] > 0
    assert shards["parent_before_children"] is True
    assert set(report["partitions"]) == {*shards["initial"], *children}
    assert all(report["partitions"][shard]["produced"] > 0 for shard in [parent, *children])

    # Chaos happened: killed processes (at least the armed drain of every shard), lost checkpoints.
    assert report["chaos"]["crashes"] >= 4
    assert report["delivery"]["crashed_invocations"] + report["chaos"]["lost_commits"] >= 1
    assert report["delivery"]["records_delivered"] > 2000  # redeliveries, archived once anyway

    # Independent check: the stream's records against the S3 objects and the ledger.
    truth = read_stream(moto_endpoint, name)
    assert len(truth) == 2000
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    config = kinesis_config(name)
    verification = verify_archive(s3, bucket, "orders", truth, config=config.streams[0])
    assert verification.ok, verification.summary()
    assert verification.dead_lettered == sum(item.hour is None for item in truth) > 0
    assert report["verification"] == verification.summary()
    archive = Archive(
        moto_endpoint, bucket, table, tmp_path / "work" / "staging", ManualClock(), s3,
        boto3.client("dynamodb", endpoint_url=moto_endpoint),
    )  # fmt: skip
    assert_objects_describe_themselves(archive, config)
    assert report["sweeper"]["reconcile"]["findings"] == {}


def test_default_kinesis_demo_starts_and_stops_its_own_moto(tmp_path):
    before = service_processes()
    report_path = tmp_path / "report.json"

    done = tidemark(
        "demo", "--source", "kinesis", "--records", "1000", "--workdir", tmp_path / "work", "--report-json", report_path
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS: 1000 records exactly once" in done.stdout
    report = json.loads(report_path.read_text())
    assert report["verification"]["produced"] == 1000 and report["verification"]["lost"] == 0
    assert report["stream_arn"] == "arn:aws:kinesis:us-east-1:123456789012:stream/orders"  # config/kinesis.yaml's
    assert report["bootstrap_servers"] is None and report["chaos"] is None and report["aggregation"] is None
    assert len(report["shards"]["closed"]) == 1 and report["shards"]["parent_before_children"] is True
    assert len(report["objects_per_hour"]) >= 4
    assert not listening(report["endpoint"])
    assert service_processes() == before
