"""The local event source mapping with its schema registry integration, against the embedded
broker, a local Confluent-compatible registry with basic auth, and the registry's credentials in
Secrets Manager on the moto server: decoded values and schema metadata in the event, rejected
records not delivered but committed, an all-rejected batch committed without an invocation."""

from __future__ import annotations

import base64
import io
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import fastavro
import orjson
import pytest
from confluent_kafka import Producer

from tests.support.kafka import committed_offsets, new_topic
from tidemark.config.model import SchemaRegistryConfig
from tidemark.embedded.esm.batching import BatchLimits
from tidemark.embedded.esm.invokers import Invocation
from tidemark.embedded.esm.mapping import EventSourceMapping, MappingConfig
from tidemark.embedded.esm.registry import DESERIALIZATION_ERROR, SCHEMA_NOT_FOUND, RegistryDecoder
from tidemark.embedded.kafka_clients import client_settings
from tidemark.embedded.schema_registry import LocalSchemaRegistry
from tidemark.records.esm import EventSource
from tidemark.wireformat import encode as wire_format

PARTITIONS = 2
SCHEMA = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"}],
}


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def invoke(self, event: dict[str, Any]) -> Invocation:
        self.events.append(event)
        return Invocation(ok=True, response={"status": "ok"})


@pytest.fixture
def registry_and_secret(moto_endpoint: str) -> Iterator[tuple[LocalSchemaRegistry, str, Any]]:
    """A registry with basic auth, and the Secrets Manager secret holding its credentials."""
    credentials = ("esm-poller", uuid.uuid4().hex)
    secrets = boto3.client("secretsmanager", endpoint_url=moto_endpoint, region_name="us-east-1")
    secret = secrets.create_secret(
        Name=f"registry-{uuid.uuid4().hex[:8]}",
        SecretString=json.dumps({"username": credentials[0], "password": credentials[1]}),
    )
    with LocalSchemaRegistry(credentials=credentials) as registry:
        yield registry, secret["ARN"], secrets
    secrets.delete_secret(SecretId=secret["ARN"], ForceDeleteWithoutRecovery=True)


def avro(datum: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), datum)
    return out.getvalue()


def produce(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> dict[int, int]:
    """``(partition, value)`` pairs in order; each partition's end offset."""
    producer = Producer(client_settings(bootstrap, **{"linger.ms": 5}))
    ends: Counter[int] = Counter()
    for partition, value in values:
        producer.produce(topic, value, b"k", partition=partition)
        ends[partition] += 1
    assert producer.flush(30) == 0
    return dict(ends)


class Destination:
    """The on-failure destination: what the integration rejected, with AWS's reason."""

    def __init__(self) -> None:
        self.reasons: Counter[str] = Counter()
        self.offsets: set[tuple[int, int]] = set()

    def send(self, records: list[Any], reason: str, detail: str) -> None:
        self.reasons[reason] += len(records)
        self.offsets.update((record.partition, record.offset) for record in records)


def run(
    bootstrap: str, topic: str, decoder: RegistryDecoder, ends: dict[int, int], on_failure: Destination | None = None
) -> tuple[EventSourceMapping, str]:
    group = f"g-{uuid.uuid4().hex[:8]}"
    config = MappingConfig(
        bootstrap,
        topic,
        group,
        limits=BatchLimits(batch_size=50, window_ms=200),
        event_source=EventSource(bootstrap, event_source="SelfManagedKafka"),
        registry=decoder,
        on_failure=on_failure,
    )
    invoker = Recorder()
    mapping = EventSourceMapping(config, invoker)
    with mapping:
        mapping.run(lambda: all(mapping.committed.get(p, 0) >= end for p, end in ends.items()), idle_timeout_s=30)
    return mapping, group


def test_decoded_values_with_schema_metadata_are_delivered_and_rejected_records_committed(
    kafka_bootstrap, registry_and_secret
):
    registry, secret_arn, secrets = registry_and_secret
    schema_id = registry.client().register("readings-value", SCHEMA)
    config = SchemaRegistryConfig.model_validate(
        {"kind": "confluent", "url": registry.url, "auth": "basic", "secret_arn": secret_arn}
    )
    decoder = RegistryDecoder.from_config(config, secrets)
    topic = new_topic(kafka_bootstrap, PARTITIONS, prefix="readings")
    values: list[tuple[int, bytes]] = []
    for n in range(120):
        good = wire_format(schema_id, avro({"sensor": f"s-{n}", "celsius": n / 2}))
        if n % 10 == 3:
            good = f'{{"sensor": "s-{n}"}}'.encode()  # JSON, no wire-format header
        elif n % 10 == 7:
            good = wire_format(schema_id, b"\x02")  # cut short
        elif n == 50:
            good = wire_format(schema_id + 40, b"")  # unknown id
        values.append((n % PARTITIONS, good))
    ends = produce(kafka_bootstrap, topic, values)

    destination = Destination()
    mapping, group = run(kafka_bootstrap, topic, decoder, ends, destination)

    invoker = mapping.invoker
    assert isinstance(invoker, Recorder)
    records = [
        record for event in invoker.events for group_records in event["records"].values() for record in group_records
    ]
    decoded = [orjson.loads(base64.b64decode(record["value"])) for record in records]
    assert sorted(item["sensor"] for item in decoded) == sorted(
        f"s-{n}" for n in range(120) if n % 10 not in (3, 7) and n != 50
    )
    assert all(item["celsius"] == int(item["sensor"][2:]) / 2 for item in decoded)
    assert all(
        record["valueSchemaMetadata"] == {"dataFormat": "AVRO", "schemaId": str(schema_id)} for record in records
    )
    assert all("keySchemaMetadata" not in record for record in records)  # only the value is validated
    assert committed_offsets(kafka_bootstrap, group, topic, PARTITIONS) == ends  # rejected ones too
    assert mapping.stats.records == len(records) == 120 - 12 - 12 - 1
    assert mapping.stats.registry_rejected == 25
    assert mapping.stats.registry_reasons == {SCHEMA_NOT_FOUND: 13, DESERIALIZATION_ERROR: 12}
    # with an on-failure destination, each rejected record goes there with its reason (AWS drops
    # them without one: the stack always configures one for a registry stream)
    assert destination.reasons == {SCHEMA_NOT_FOUND: 13, DESERIALIZATION_ERROR: 12}
    assert len(destination.offsets) == 25


def test_a_batch_the_integration_rejects_whole_is_committed_without_an_invocation(kafka_bootstrap, registry_and_secret):
    registry, secret_arn, secrets = registry_and_secret
    config = SchemaRegistryConfig.model_validate(
        {"kind": "confluent", "url": registry.url, "auth": "basic", "secret_arn": secret_arn, "record_format": "source"}
    )
    topic = new_topic(kafka_bootstrap, 1, prefix="plain")
    ends = produce(kafka_bootstrap, topic, [(0, b'{"plain": "json"}') for _ in range(30)])

    mapping, group = run(kafka_bootstrap, topic, RegistryDecoder.from_config(config, secrets), ends)

    assert isinstance(mapping.invoker, Recorder) and mapping.invoker.events == []
    assert (mapping.stats.invocations, mapping.stats.batches) == (0, 0)
    assert committed_offsets(kafka_bootstrap, group, topic, 1) == {0: 30}
    assert mapping.stats.registry_reasons == {SCHEMA_NOT_FOUND: 30}
