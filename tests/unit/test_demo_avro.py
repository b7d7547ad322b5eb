"""``tidemark demo --avro``'s workload and configuration: Avro orders in Confluent's wire format,
what the archive must hold for each (the JSON the registry integration delivers), and the stream
config the demo runs."""

from __future__ import annotations

import io
from collections import Counter

import fastavro
import orjson
import pytest
import yaml

from tests.conftest import EXAMPLE_CONFIG, REPO
from tests.support.harness import example_config_data
from tidemark.embedded.demo import DemoOptions, demo_config
from tidemark.embedded.esm.registry import DESERIALIZATION_ERROR, SCHEMA_NOT_FOUND, RegistryDecoder
from tidemark.embedded.schema_registry import LocalSchemaRegistry
from tidemark.embedded.workload import WorkloadSpec, generate
from tidemark.embedded.workload_avro import (
    AVRO_MALFORMED_KINDS,
    FOREIGN_SCHEMA_ID,
    ORDER_SCHEMA,
    AvroOrders,
    value_subject,
)
from tidemark.exceptions import ConfigError
from tidemark.records.model import Record, SchemaRef
from tidemark.wireformat import parse as parse_wire_format

NOW_MS = 1_795_255_200_000  # 2026-11-21T10:00:00Z
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:tidemark-demo-schema-registry-AbCdEf"


def test_avro_orders_decode_to_exactly_what_the_archive_must_hold():
    orders = list(generate(WorkloadSpec(records=900, malformed_share=0.01), NOW_MS, "UTC", AVRO_MALFORMED_KINDS))
    with LocalSchemaRegistry() as registry:
        schema_id = registry.client().register(value_subject("orders"), ORDER_SCHEMA)
        encoded = AvroOrders(registry.url, SECRET_ARN, "orders-value", schema_id).encode(orders)
        records = [Record("orders", 0, n, NOW_MS, order.value, order.key) for n, order in enumerate(encoded)]
        decoded = RegistryDecoder(registry.client()).decode(records)

    assert not decoded.rejected and len(decoded.delivered) == len(orders) == 900
    parsed = fastavro.parse_schema(ORDER_SCHEMA)
    for order, source, delivered in zip(orders, encoded, decoded.delivered, strict=True):
        wire_id, payload = parse_wire_format(source.value)
        assert wire_id == schema_id
        assert source.schemas == delivered.schemas == (SchemaRef("value", "AVRO", str(schema_id)),)
        assert delivered.value == source.archived  # byte for byte: dead letters are compared so
        datum = fastavro.schemaless_reader(io.BytesIO(payload), parsed, None)
        assert datum == {"created_at": None, **orjson.loads(order.value)}  # the same order
        assert (source.key, source.headers, source.hour) == (order.key, order.headers, order.hour)


def test_avro_malformed_orders_are_the_kinds_avro_can_carry():
    orders = list(generate(WorkloadSpec(records=3000, malformed_share=0.002), NOW_MS, "UTC", AVRO_MALFORMED_KINDS))
    encoded = AvroOrders("http://127.0.0.1:1", SECRET_ARN, "orders-value", 3).encode(orders)

    bad = [orjson.loads(order.archived or b"") for order in encoded if order.hour is None]
    kinds = Counter("no_time" if item["created_at"] is None else item["created_at"] for item in bad)
    assert kinds == {"yesterday": 4, "no_time": 2}
    assert "not_json" not in AVRO_MALFORMED_KINDS
    assert all(order.archived is not None for order in encoded)


def test_the_demo_stream_gets_the_local_registry_in_provisioned_mode():
    options = DemoOptions(REPO, EXAMPLE_CONFIG, avro=True)
    settings = {
        "kind": "confluent",
        "url": "http://127.0.0.1:41234",
        "auth": "basic",
        "secret_arn": SECRET_ARN,
        "record_format": "json",
    }

    data, _config, stream = demo_config(options, schema_registry=settings)

    registry = stream.source.schema_registry
    assert registry is not None
    assert (registry.kind, registry.url, registry.secret_arn) == ("confluent", settings["url"], SECRET_ARN)
    assert (registry.record_format, registry.validate_parts) == ("json", ["value"])
    assert stream.archiver.provisioned_pollers is not None
    assert data["streams"][0]["source"]["schema_registry"] == settings  # what the handler's config holds
    _data, _config, plain = demo_config(options)  # before the registry runs: the file's stream
    assert plain.source.schema_registry is None


def test_avro_is_refused_where_it_cannot_run(tmp_path):
    with pytest.raises(ConfigError, match="--avro: a schema registry integration is for Kafka sources"):
        demo_config(DemoOptions(REPO, REPO / "config" / "kinesis.yaml", avro=True))
    data = example_config_data()
    data["streams"][0]["source"]["schema_registry"] = {
        "kind": "glue",
        "registry_arn": "arn:aws:glue:us-east-1:123456789012:registry/orders",
    }
    data["streams"][0]["archiver"]["provisioned_pollers"] = {"minimum": 1, "maximum": 2}
    configured = tmp_path / "tidemark.yaml"
    configured.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="run the demo with --avro"):
        demo_config(DemoOptions(REPO, configured))
    _data, _config, stream = demo_config(DemoOptions(REPO, configured, avro=True))
    assert stream.source.schema_registry is not None  # replaced once the local registry runs


def test_a_few_orders_bypass_the_serializer_and_are_expected_as_dead_letters_as_produced():
    orders = list(generate(WorkloadSpec(records=3000), NOW_MS, "UTC", AVRO_MALFORMED_KINDS))
    with LocalSchemaRegistry() as registry:
        schema_id = registry.client().register(value_subject("orders"), ORDER_SCHEMA)
        avro = AvroOrders(registry.url, SECRET_ARN, "orders-value", schema_id)
        encoded = avro.encode(orders)
        mixed = avro.bypassing(encoded)
        records = [Record("orders", 0, n, NOW_MS, order.value, order.key) for n, order in enumerate(mixed)]
        decoded = RegistryDecoder(registry.client()).decode(records)

    bypassed = [n for n, (before, after) in enumerate(zip(encoded, mixed, strict=True)) if before != after]
    assert bypassed == [125, 625, 1125, 1625, 2125, 2625]  # 1 in 500, spread over the run (its hours)
    assert [rejection.record.offset for rejection in decoded.rejected] == bypassed
    assert [rejection.reason for rejection in decoded.rejected] == [
        *(SCHEMA_NOT_FOUND, SCHEMA_NOT_FOUND, DESERIALIZATION_ERROR) * 2  # no header, another id, cut short
    ]
    assert len({encoded[n].hour for n in bypassed} - {None}) >= 3  # the hours the orders would have had
    for n in bypassed:
        order, original = mixed[n], encoded[n]
        # what the archive must hold: a dead letter, the value byte for byte as produced, no schema id
        assert (order.hour, order.archived, order.schemas, order.late) == (None, None, (), False)
        assert (order.key, order.headers) == (original.key, original.headers)
    not_wire, foreign, cut = (mixed[n].value or b"" for n in bypassed[:3])
    assert not_wire == encoded[bypassed[0]].archived  # the order's JSON
    assert parse_wire_format(foreign) == (FOREIGN_SCHEMA_ID, parse_wire_format(encoded[bypassed[1]].value or b"")[1])
    wire_id, payload = parse_wire_format(cut)
    whole = parse_wire_format(encoded[bypassed[2]].value or b"")[1]
    assert wire_id == schema_id and payload and len(payload) < len(whole) and whole.startswith(payload)


def test_short_runs_still_bypass_a_few_and_none_when_the_share_is_zero():
    orders = list(generate(WorkloadSpec(records=40), NOW_MS, "UTC", AVRO_MALFORMED_KINDS))
    avro = AvroOrders("http://127.0.0.1:1", SECRET_ARN, "orders-value", 3)
    encoded = avro.encode(orders)

    short = avro.bypassing(encoded)
    assert [n for n, order in enumerate(short) if order.archived is None] == [3, 16, 29]  # never the first order
    assert avro.bypassing(encoded, share=0) == encoded
    assert avro.bypassing(encoded[:1]) == encoded[:1]
