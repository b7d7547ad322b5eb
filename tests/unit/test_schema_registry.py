"""The local Confluent-compatible schema registry (real HTTP on loopback), its client, Confluent's
wire format, and the mapping's registry integration (``RegistryDecoder``) on single batches."""

from __future__ import annotations

import base64
import io
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import fastavro
import orjson
import pytest

from tidemark.config.model import SchemaRegistryConfig
from tidemark.embedded.esm.invokers import Invocation
from tidemark.embedded.esm.mapping import EventSourceMapping, MappingConfig, MappingStats
from tidemark.embedded.esm.registry import (
    DESERIALIZATION_ERROR,
    SCHEMA_NOT_FOUND,
    RegistryDecoder,
    json_value,
)
from tidemark.embedded.schema_registry import (
    CONTENT_TYPE,
    InvalidSchemaError,
    LocalSchemaRegistry,
    SchemaNotFoundError,
    SchemaRegistryAuthError,
    SchemaRegistryClient,
    SchemaRegistryError,
)
from tidemark.exceptions import TidemarkError
from tidemark.records.model import Record, SchemaRef
from tidemark.wireformat import NotWireFormatError
from tidemark.wireformat import encode as wire_format
from tidemark.wireformat import parse as parse_wire_format

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "created_at", "type": ["null", "string"], "default": None},
    ],
}
CREDENTIALS = ("registry-user", "s3cret")
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:registry-AbCdEf"


@pytest.fixture
def registry() -> Iterator[LocalSchemaRegistry]:
    with LocalSchemaRegistry() as running:
        yield running


@pytest.fixture
def secured() -> Iterator[LocalSchemaRegistry]:
    with LocalSchemaRegistry(credentials=CREDENTIALS) as running:
        yield running


def http(
    url: str, method: str = "GET", body: Any = None, auth: tuple[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    """One raw request: status, headers and the parsed JSON body (errors included)."""
    request = urllib.request.Request(
        url, method=method, data=None if body is None else json.dumps(body).encode(), headers={"Accept": CONTENT_TYPE}
    )
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def avro(schema: dict[str, Any], datum: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


def record(value: bytes, key: bytes | None = b"k", offset: int = 0) -> Record:
    return Record("orders", 0, offset, 1_700_000_000_000, value, key, (("h", b"1"),))


# -- the server -------------------------------------------------------------------------------


def test_ids_are_global_and_a_known_schema_keeps_its_id(registry):
    client = registry.client()

    first = client.register("orders-value", ORDER)
    again = client.register("orders-value", json.dumps(ORDER, indent=4))  # other whitespace, same schema
    elsewhere = client.register("returns-value", ORDER)
    other = client.register("orders-value", {**ORDER, "name": "OrderV2"})

    assert (first, again, elsewhere, other) == (1, 1, 1, 2)
    assert client.subjects() == ["orders-value", "returns-value"]
    assert client.versions("orders-value") == [1, 2]  # re-registering added no version
    assert client.versions("returns-value") == [1]
    latest = client.latest("orders-value")
    assert {k: latest[k] for k in ("subject", "version", "id")} == {"subject": "orders-value", "version": 2, "id": 2}
    assert json.loads(latest["schema"])["name"] == "OrderV2"
    assert json.loads(client.schema_of(1)) == ORDER
    status, headers, body = http(f"{registry.url}/subjects/orders-value/versions/1")
    assert status == 200 and headers["Content-Type"] == CONTENT_TYPE
    assert (body["version"], body["id"], "schemaType" in body) == (1, 1, False)  # Avro: no schemaType


def test_a_json_schema_is_served_with_its_type_and_only_avro_is_parsed(registry):
    status, _, body = http(
        f"{registry.url}/subjects/s/versions", "POST", {"schema": '{"type": "object"}', "schemaType": "JSON"}
    )
    assert status == 200
    status, _, served = http(f"{registry.url}/schemas/ids/{body['id']}")
    assert (status, served) == (200, {"schema": '{"type":"object"}', "schemaType": "JSON"})
    assert registry.client().fetch(body["id"]).schema_type == "JSON"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/subjects/nope/versions", None, 404, 40401),
        ("GET", "/subjects/nope/versions/latest", None, 404, 40401),
        ("GET", "/subjects/orders-value/versions/7", None, 404, 40402),
        ("GET", "/schemas/ids/99", None, 404, 40403),
        ("POST", "/subjects/x/versions", {"schema": '{"type": "record", "name": "R", "fields": 3}'}, 422, 42201),
        ("POST", "/subjects/x/versions", {"schema": '{"type": "nope"}'}, 422, 42201),
        ("POST", "/subjects/x/versions", {"schema": "not json"}, 422, 42201),
        ("POST", "/subjects/x/versions", {"schema": '"int"', "schemaType": "XML"}, 422, 42201),
        ("POST", "/subjects", {"schema": '"int"'}, 405, 405),
        ("GET", "/config", None, 404, 404),
    ],
)
def test_errors_carry_confluents_status_and_error_code(registry, method, path, body, status, code):
    registry.client().register("orders-value", ORDER)

    got, headers, answer = http(registry.url + path, method, body)

    assert (got, answer["error_code"]) == (status, code)
    assert answer["message"] and headers["Content-Type"] == CONTENT_TYPE


def test_the_client_raises_typed_errors(registry):
    client = registry.client()
    with pytest.raises(SchemaNotFoundError) as missing:
        client.schema_of(42)
    assert (missing.value.status, missing.value.error_code) == (404, 40403)
    with pytest.raises(SchemaNotFoundError):
        client.versions("nope")
    with pytest.raises(InvalidSchemaError) as invalid:
        client.register("x", {"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]})
    assert invalid.value.error_code == 42201
    assert issubclass(SchemaRegistryError, TidemarkError)


def test_basic_auth_is_required_when_the_registry_has_credentials(secured):
    status, headers, body = http(f"{secured.url}/subjects")
    assert (status, body["error_code"]) == (401, 401)
    assert headers["WWW-Authenticate"].startswith("Basic")
    assert http(f"{secured.url}/subjects", auth=("registry-user", "wrong"))[0] == 401
    assert http(f"{secured.url}/subjects", auth=CREDENTIALS)[:3:2] == (200, [])

    with pytest.raises(SchemaRegistryAuthError) as refused:
        SchemaRegistryClient(secured.url, username="registry-user", password="wrong").register("s", ORDER)
    assert refused.value.status == 401
    with pytest.raises(SchemaRegistryAuthError):
        SchemaRegistryClient(secured.url).subjects()
    assert secured.client().register("s", ORDER) == 1  # the registry's own client signs in


def test_stopping_joins_every_thread_and_frees_the_port():
    before = set(threading.enumerate())
    registry = LocalSchemaRegistry(credentials=CREDENTIALS).start()
    client = registry.client()
    schema_id = client.register("s", ORDER)
    for _ in range(5):
        client.subjects()
    fetched = client.schema_of(schema_id)
    url = registry.url

    registry.stop()

    assert set(threading.enumerate()) == before
    with pytest.raises(SchemaRegistryError) as unreachable:
        SchemaRegistryClient(url).subjects()
    assert unreachable.value.status == 0 and "unreachable" in str(unreachable.value)
    assert client.schema_of(schema_id) == fetched and json.loads(fetched) == ORDER  # cached by id: asked once
    with pytest.raises(SchemaRegistryError):
        registry.url  # noqa: B018 -- not running any more


# -- Confluent's wire format --------------------------------------------------------------------


def test_wire_format_is_magic_zero_then_a_big_endian_id():
    data = wire_format(258, b"payload")
    assert data == b"\x00\x00\x00\x01\x02payload"
    assert parse_wire_format(data) == (258, b"payload")
    assert parse_wire_format(wire_format(7, b"")) == (7, b"")
    for bad in (b"", b"\x00\x00\x01", b'{"id": 1}', b"\x01\x00\x00\x00\x01x"):
        with pytest.raises(NotWireFormatError):
            parse_wire_format(bad)


# -- the mapping's registry integration ---------------------------------------------------------


def test_json_format_delivers_the_decoded_value_in_field_order_with_its_schema_id(registry):
    schema_id = registry.client().register("orders-value", ORDER)
    decoder = RegistryDecoder(registry.client())
    datum = {"id": "o-1", "price": 12.5, "created_at": None}
    source = record(wire_format(schema_id, avro(ORDER, datum)))

    [delivered] = decoder.decode([source]).delivered

    assert delivered.value == b'{"id":"o-1","price":12.5,"created_at":null}'
    assert delivered.value == json_value(datum)
    assert delivered.schemas == (SchemaRef("value", "AVRO", str(schema_id)),)
    assert (delivered.key, delivered.headers, delivered.offset) == (source.key, source.headers, source.offset)


def test_source_format_delivers_the_payload_without_the_header(registry):
    schema_id = registry.client().register("orders-value", ORDER)
    decoder = RegistryDecoder(registry.client(), record_format="source")
    payload = avro(ORDER, {"id": "o-1", "price": 1.0, "created_at": "2026-01-01T00:00:00Z"})

    [delivered] = decoder.decode([record(wire_format(schema_id, payload))]).delivered

    assert delivered.value == payload
    assert delivered.schemas == (SchemaRef("value", "AVRO", str(schema_id)),)


def test_keys_are_decoded_too_when_validated_and_come_first(registry):
    client = registry.client()
    key_id = client.register("orders-key", '"string"')  # a schema is JSON text
    value_id = client.register("orders-value", ORDER)
    decoder = RegistryDecoder(client, parts=["value", "key"])
    value = wire_format(value_id, avro(ORDER, {"id": "o-1", "price": 2.0, "created_at": None}))
    key = wire_format(key_id, b"\x06c-1")  # Avro string "c-1"

    keyed, keyless = decoder.decode([record(value, key), record(value, None, offset=1)]).delivered

    assert keyed.key == b'"c-1"'
    assert keyed.schemas == (SchemaRef("key", "AVRO", str(key_id)), SchemaRef("value", "AVRO", str(value_id)))
    assert keyless.key is None and keyless.schemas == (SchemaRef("value", "AVRO", str(value_id)),)


def test_rejections_carry_aws_reasons_and_the_rest_is_delivered_in_order(registry):
    client = registry.client()
    schema_id = client.register("orders-value", ORDER)
    json_id = client.register("other", '{"type": "object"}', schema_type="JSON")
    good = avro(ORDER, {"id": "o-1", "price": 2.0, "created_at": None})
    batch = [
        record(wire_format(schema_id, good), offset=0),
        record(b'{"id": "o-2"}', offset=1),  # plain JSON: no wire-format header
        record(wire_format(99, good), offset=2),  # an id the registry does not know
        record(wire_format(schema_id, good[:-3]), offset=3),  # truncated payload
        record(wire_format(schema_id, good + b"\x00"), offset=4),  # bytes left over
        record(wire_format(json_id, b'{"id": "o-5"}'), offset=5),  # JSON Schema: not emulated
        record(wire_format(schema_id, b"\x02\xff\xfe"), offset=6),  # not UTF-8 in a string
        record(wire_format(schema_id, good), offset=7),
    ]

    decoded = RegistryDecoder(client).decode(batch)

    assert [item.offset for item in decoded.delivered] == [0, 7]
    reasons = {item.record.offset: item.reason for item in decoded.rejected}
    assert reasons == {
        1: SCHEMA_NOT_FOUND,
        2: SCHEMA_NOT_FOUND,
        3: DESERIALIZATION_ERROR,
        4: DESERIALIZATION_ERROR,
        5: DESERIALIZATION_ERROR,
        6: DESERIALIZATION_ERROR,
    }
    details = {item.record.offset: item.detail for item in decoded.rejected}
    assert "only Avro is emulated locally" in details[5] and "99" in details[2]
    assert all(item.record is batch[item.record.offset] for item in decoded.rejected)  # as produced


def test_json_rendering_of_bytes_fixed_decimal_enum_and_unions(registry):
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "raw", "type": "bytes"},
            {"name": "hash", "type": {"type": "fixed", "name": "H", "size": 2}},
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}},
            {"name": "state", "type": {"type": "enum", "name": "S", "symbols": ["NEW", "PAID"]}},
            {"name": "note", "type": ["null", "string", "long"]},
            {"name": "tags", "type": {"type": "map", "values": {"type": "array", "items": "int"}}},
        ],
    }
    schema_id = registry.client().register("r", schema)
    datum = {
        "raw": b"\x00\xff",
        "hash": b"ab",
        "amount": Decimal("12.34"),
        "state": "PAID",
        "note": 5,
        "tags": {"a": [1, 2]},
    }

    value = wire_format(schema_id, avro(schema, datum))

    [delivered] = RegistryDecoder(registry.client()).decode([record(value)]).delivered

    assert orjson.loads(delivered.value) == {
        "raw": "\u0000\u00ff",  # byte values as code points (ISO-8859-1), as Avro's JSON encoding
        "hash": "ab",
        "amount": "12.34",
        "state": "PAID",
        "note": 5,  # a union's branch value, not {"long": 5}
        "tags": {"a": [1, 2]},
    }


def test_writer_schemas_are_fetched_once_per_id(registry):
    client = registry.client()
    schema_id = client.register("orders-value", ORDER)
    decoder = RegistryDecoder(SchemaRegistryClient(registry.url))
    value = wire_format(schema_id, avro(ORDER, {"id": "o-1", "price": 2.0, "created_at": None}))
    assert len(decoder.decode([record(value)]).delivered) == 1

    registry.stop()  # from now on every request would fail

    decoded = decoder.decode([record(value, offset=n) for n in range(3)])
    assert len(decoded.delivered) == 3 and not decoded.rejected
    with pytest.raises(SchemaRegistryError):  # an unknown id must ask: the registry's failure stops the mapping
        decoder.decode([record(wire_format(schema_id + 1, b""))])


class FakeSecrets:
    """A Secrets Manager client holding one secret."""

    def __init__(self, secret: dict[str, str]) -> None:
        self.secret = secret
        self.asked: list[str] = []

    def get_secret_value(self, SecretId: str) -> dict[str, str]:  # boto3's spelling
        self.asked.append(SecretId)
        return {"ARN": SecretId, "SecretString": json.dumps(self.secret)}


def confluent(url: str, **extra: Any) -> SchemaRegistryConfig:
    settings = {"kind": "confluent", "url": url, "auth": "basic", "secret_arn": SECRET_ARN, **extra}
    return SchemaRegistryConfig.model_validate(settings)


def test_from_config_signs_in_with_the_secrets_credentials(secured):
    schema_id = secured.client().register("orders-value", ORDER)
    value = wire_format(schema_id, avro(ORDER, {"id": "o-1", "price": 2.0, "created_at": None}))
    secrets = FakeSecrets({"username": CREDENTIALS[0], "password": CREDENTIALS[1]})

    decoder = RegistryDecoder.from_config(confluent(secured.url, record_format="source", validate=["value"]), secrets)

    assert secrets.asked == [SECRET_ARN]
    assert decoder.record_format == "source" and decoder.parts == ("value",)
    assert len(decoder.decode([record(value)]).delivered) == 1
    wrong = RegistryDecoder.from_config(confluent(secured.url), FakeSecrets({"username": "x", "password": "y"}))
    with pytest.raises(SchemaRegistryAuthError):
        wrong.decode([record(value)])


def test_from_config_refuses_what_is_not_emulated():
    glue = SchemaRegistryConfig.model_validate(
        {"kind": "glue", "registry_arn": "arn:aws:glue:us-east-1:123456789012:registry/orders"}
    )
    with pytest.raises(SchemaRegistryError, match="Confluent"):
        RegistryDecoder.from_config(glue, FakeSecrets({}))
    with pytest.raises(SchemaRegistryError, match="basic"):
        RegistryDecoder.from_config(confluent("http://127.0.0.1:1", auth="client_certificate"), FakeSecrets({}))
    with pytest.raises(SchemaRegistryError, match="username and password"):
        RegistryDecoder.from_config(confluent("http://127.0.0.1:1"), FakeSecrets({"user": "x"}))


def test_mapping_stats_add_up_registry_rejections():
    one = MappingStats(
        registry_rejected=3,
        registry_reasons={"SCHEMA_NOT_FOUND": 2, "DESERIALIZATION_ERROR": 1},
        registry_rejected_records={"SCHEMA_NOT_FOUND": 1, "DESERIALIZATION_ERROR": 1},
    )
    two = MappingStats(
        registry_rejected=1, registry_reasons={"SCHEMA_NOT_FOUND": 1}, registry_rejected_records={"SCHEMA_NOT_FOUND": 1}
    )

    both = one.plus(two)

    assert both.registry_rejected == 4
    assert both.registry_reasons == {"DESERIALIZATION_ERROR": 1, "SCHEMA_NOT_FOUND": 3}
    assert both.registry_rejected_records == {"DESERIALIZATION_ERROR": 1, "SCHEMA_NOT_FOUND": 2}


class NoInvocations:
    def invoke(self, event: dict[str, Any]) -> Invocation:
        raise AssertionError("not invoked here")


def test_a_mapping_counts_each_rejected_record_once_however_often_it_comes_again(registry):
    schema_id = registry.client().register("orders-value", ORDER)
    config = MappingConfig("127.0.0.1:1", "orders", "group", registry=RegistryDecoder(registry.client()))
    mapping = EventSourceMapping(config, NoInvocations())
    batch = [
        record(wire_format(schema_id, avro(ORDER, {"id": "o-1", "price": 1.5})), offset=0),
        record(b'{"id": "o-2"}', offset=1),  # no wire-format header
        record(wire_format(schema_id, b"\x02"), offset=2),  # cut short
        record(b"plain", offset=1)._replace(partition=1),  # the same offset in another partition: another record
    ]

    for _delivery in range(3):  # a lost commit, then a rebalance: the batch comes again
        assert [record.offset for record in mapping._decoded(batch)] == [0]

    assert mapping.stats.registry_rejected == 9
    assert mapping.stats.registry_reasons == {SCHEMA_NOT_FOUND: 6, DESERIALIZATION_ERROR: 3}
    assert mapping.stats.registry_rejected_records == {SCHEMA_NOT_FOUND: 2, DESERIALIZATION_ERROR: 1}
