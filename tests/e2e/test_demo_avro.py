"""``tidemark demo --avro`` through the command line: Avro orders in Confluent's wire format, a
local registry, the mapping's registry integration decoding them to JSON; a few values a producer
wrote past the serializer, which the integration rejects and ``tidemark recover`` then archives
from Kafka as dead letters -- then an independent check of the archive against what the broker
holds, decoded here with the order schema, and of the schema id every archived record must carry."""

from __future__ import annotations

import io
import json
import uuid
from collections import Counter
from dataclasses import replace

import boto3
import fastavro
import orjson

from tests.e2e.test_demo import expected_hour, read_topic, tidemark
from tidemark.embedded.esm.registry import DESERIALIZATION_ERROR, SCHEMA_NOT_FOUND
from tidemark.embedded.workload_avro import ORDER_SCHEMA
from tidemark.records.model import SchemaRef
from tidemark.routing import NOT_DELIVERED
from tidemark.verify import ExpectedRecord, RecordMeta, read_archive, verify_archive
from tidemark.wireformat import NotWireFormatError
from tidemark.wireformat import parse as parse_wire_format


def decoded_truth(bootstrap: str, topic: str, schema_id: int) -> tuple[list[ExpectedRecord], Counter[str]]:
    """What the broker holds, each value decoded with the order schema to the JSON the archive
    must hold (the registry integration's rendering: fields in schema order), with its schema id;
    a value that is not in the wire format, names another id or does not decode with the order
    schema is a dead letter holding the bytes as produced, without a schema id. And how many of
    those there are by the reason the integration gives."""
    parsed = fastavro.parse_schema(ORDER_SCHEMA)
    truth = []
    rejected: Counter[str] = Counter()
    for item in read_topic(bootstrap, topic):
        assert item.meta is not None and item.meta.schemas == ()
        if item.value is None:  # a tombstone: nothing to decode, no schema id (the integration adds none)
            truth.append(item)
            continue
        try:
            wire_id, payload = parse_wire_format(item.value)
        except NotWireFormatError:
            wire_id, payload = -1, b""
        if wire_id != schema_id:
            rejected[SCHEMA_NOT_FOUND] += 1
            truth.append(replace(item, hour=None))
            continue
        stream = io.BytesIO(payload)
        try:
            datum = fastavro.schemaless_reader(stream, parsed, None)
        except EOFError:
            datum = None
        if datum is None or stream.tell() != len(payload):
            rejected[DESERIALIZATION_ERROR] += 1
            truth.append(replace(item, hour=None))
            continue
        value = orjson.dumps(datum)
        meta = RecordMeta(
            item.meta.topic, item.meta.key, item.meta.headers, (SchemaRef("value", "AVRO", str(wire_id)),)
        )
        truth.append(ExpectedRecord(item.partition, item.offset, value, expected_hour(value), meta))
    return truth, rejected


def run_avro_demo(kafka_bootstrap: str, moto_endpoint: str, tmp_path, *extra: str) -> tuple[dict, str, str]:
    suffix = uuid.uuid4().hex[:8]
    topic, bucket, table = f"orders-avro-{suffix}", f"tidemark-avro-{suffix}", f"tidemark-avro-ledger-{suffix}"
    report_path = tmp_path / "report.json"
    done = tidemark(
        "demo", "--avro", *extra,
        "--bootstrap-servers", kafka_bootstrap, "--endpoint-url", moto_endpoint,
        "--topic", topic, "--bucket", bucket, "--ledger-table", table,
        "--workdir", tmp_path / "work", "--report-json", report_path, "--no-aggregate",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout
    return json.loads(report_path.read_text()), topic, bucket


def check_archive(kafka_bootstrap: str, moto_endpoint: str, report: dict, topic: str, bucket: str) -> None:
    """The archive against the broker, decoded independently; every record with its schema id."""
    registry = report["schema_registry"]
    schema_id = registry["schema_id"]
    truth, rejected = decoded_truth(kafka_bootstrap, topic, schema_id)
    assert rejected == registry["reasons"]  # what the integration rejected, found so here
    produced = report["verification"]["produced"]
    assert len(truth) == produced
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    verification = verify_archive(s3, bucket, "orders", truth)
    assert verification.ok, verification.summary()
    assert verification.archived + verification.dead_lettered == produced
    assert verification.dead_lettered == sum(item.hour is None for item in truth) > 0
    archived, _objects, _hours = read_archive(s3, bucket, "orders")
    assert len(archived) == produced
    recovered = [record for record in archived if record.dead_letter and record.error.startswith(NOT_DELIVERED)]
    assert len(recovered) == sum(rejected.values()) == registry["recovered"]
    assert {record.meta.schemas for record in recovered} == {()}  # as produced: the mapping decoded nothing
    delivered = [record for record in archived if not record.error.startswith(NOT_DELIVERED)]
    values = [record for record in delivered if record.value is not None]  # tombstones carry no value id
    assert len(delivered) - len(values) == report["tombstones"]["produced"] > 0
    assert {record.meta.schemas for record in values} == {(SchemaRef("value", "AVRO", str(schema_id)),)}
    assert all(record.value[:1] == b"{" for record in values)  # JSON objects, not the wire format


def test_demo_with_avro_values_and_chaos_is_exactly_once(kafka_bootstrap, moto_endpoint, tmp_path):
    report, topic, bucket = run_avro_demo(
        kafka_bootstrap, moto_endpoint, tmp_path,
        "--records", "600", "--chaos", "--crash-rate", "0.3", "--lost-commit-rate", "0.1", "--seed", "13",
        "--batch-size", "60", "--flush-records", "150",
    )  # fmt: skip

    tombstones = report["tombstones"]["produced"]
    total = 600 + tombstones
    assert report["result"] == "PASS" and report["verification"]["produced"] == total
    assert report["chaos"]["crashes"] >= 4  # at least the armed drain of every partition died
    assert report["delivery"]["crashed_invocations"] + report["chaos"]["lost_commits"] >= 1
    registry = report["schema_registry"]
    assert (registry["subject"], registry["record_format"]) == (f"{topic}-value", "json")
    assert registry["url"].startswith("http://127.0.0.1:") and registry["schema_id"] >= 1
    # 1 in 500 of the orders (3 at least) past the serializer: JSON, another registry's id, a cut payload
    rejected = registry["rejected"]
    assert rejected == registry["recovered"] == 3
    assert registry["reasons"] == {SCHEMA_NOT_FOUND: 2, DESERIALIZATION_ERROR: 1}
    assert registry["recovery"]["not_retained"] == {} and registry["recovery"]["unchecked"] == {}
    assert report["delivery"]["registry_rejected"] == registry["rejections"] >= rejected  # redeliveries again
    # created_at null or "yesterday"; and the rejected records, recovered from Kafka
    assert report["dead_letter_reasons"] == {"invalid_event_time": 3, NOT_DELIVERED: rejected}
    assert report["audit"]["clean"] and report["audit"]["complete"] and report["audit"]["records"] == total
    replay = report["replay"]
    assert (replay["equal"], replay["records"], replay["timestamps_compared"]) == (True, total, total)
    assert replay["tombstones"] == tombstones > 0
    assert "registry-decoded JSON" in replay["compared_with"]
    check_archive(kafka_bootstrap, moto_endpoint, report, topic, bucket)
