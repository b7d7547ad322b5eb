"""The demo's orders as Avro, for ``tidemark demo --avro``: a local Confluent-compatible registry,
the mapping's registry integration configured against it, and values in Confluent's wire format.

``avro_registry`` starts the registry (``embedded/schema_registry.py``) on loopback with basic
auth, keeps its credentials in a Secrets Manager secret on the local AWS endpoint (where the
mapping's integration reads them, as in AWS), and registers the order schema under
``<topic>-value`` (Confluent's default subject name strategy). ``AvroOrders.encode`` writes each
order as magic byte 0 + the schema id + the Avro binary, and records what the archive must hold:
the JSON text the integration delivers (``record_format: json``), computed with the integration's
own ``json_value`` from the datum written, and the value's schema id.

Malformed orders are those Avro can represent: no event time (``created_at`` null, which the
archiver dead-letters as ``invalid_event_time``) and an unreadable one (``"yesterday"``); a value
that is not JSON cannot come out of a registry-decoded Avro record, so ``AVRO_MALFORMED_KINDS``
has a second unreadable event time in its place.

``AvroOrders.bypassing`` then makes a small fixed share of the orders (``BYPASS_SHARE``, at
least ``BYPASS_AT_LEAST`` even in short runs, at fixed positions spread over the run, so over
partitions and hours) values a producer wrote past the serializer -- ``BYPASS_KINDS`` in turn:
the order's JSON text without the wire-format header, the Avro payload behind an id the registry
does not know (both ``SCHEMA_NOT_FOUND`` to the integration), and the payload cut short behind
the right id (``DESERIALIZATION_ERROR``). The mapping never delivers them; ``tidemark recover``
archives them from Kafka as dead letters holding the bytes as produced, which is what such an
order expects: no hour, ``archived`` the produced value, no schema reference.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import boto3
import orjson

from tidemark import wireformat
from tidemark.embedded.aws import LocalAws
from tidemark.embedded.esm.registry import json_value
from tidemark.embedded.schema_registry import AVRO, LocalSchemaRegistry
from tidemark.embedded.workload import Order
from tidemark.records.model import SchemaRef

#: the kinds malformed Avro orders take in turn (``not_json`` has no Avro form)
AVRO_MALFORMED_KINDS = ("bad_event_time", "no_event_time", "bad_event_time")
#: the orders ``workload.generate`` writes as JSON, as an Avro record
ORDER_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "tidemark.demo",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer_id", "type": "string"},
        {"name": "product_id", "type": "string"},
        {"name": "price", "type": "double"},
        {"name": "quantity", "type": "int"},
        {"name": "currency", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "created_at", "type": ["null", "string"], "default": None},
    ],
}
REGISTRY_USER = "tidemark-demo"
#: the values a producer that bypassed the serializer writes, in turn (``AvroOrders.bypassing``)
NOT_WIRE_FORMAT, UNKNOWN_SCHEMA_ID, TRUNCATED = "not_wire_format", "unknown_schema_id", "truncated_payload"
BYPASS_KINDS = (NOT_WIRE_FORMAT, UNKNOWN_SCHEMA_ID, TRUNCATED)
#: the share of the orders produced so (1 in 500), and at least this many even in short runs
BYPASS_SHARE = 0.002
BYPASS_AT_LEAST = 3
#: a schema id the demo's registry does not know (it numbers its schemas from 1, and holds one)
FOREIGN_SCHEMA_ID = 999_999


def value_subject(topic: str) -> str:
    """The subject a topic's value schemas are registered under (TopicNameStrategy)."""
    return f"{topic}-value"


@dataclass(frozen=True)
class AvroOrders:
    """The registry the demo runs, and how its orders are written for it."""

    url: str
    secret_arn: str
    subject: str
    schema_id: int

    def schema_registry(self) -> dict[str, Any]:
        """The stream's ``source.schema_registry`` for this registry."""
        return {
            "kind": "confluent",
            "url": self.url,
            "auth": "basic",
            "secret_arn": self.secret_arn,
            "record_format": "json",
        }

    def encode(self, orders: Iterable[Order]) -> list[Order]:
        """Each (JSON) order as an Avro value in the wire format; what the archive must hold is
        the JSON the integration delivers for it, with the value's schema id."""
        import fastavro

        parsed = fastavro.parse_schema(ORDER_SCHEMA)
        names = [item["name"] for item in ORDER_SCHEMA["fields"]]
        refs = (SchemaRef("value", AVRO, str(self.schema_id)),)
        encoded = []
        for order in orders:
            fields = orjson.loads(order.payload)
            datum = {name: fields.get(name) for name in names}  # created_at None when absent
            payload = io.BytesIO()
            fastavro.schemaless_writer(payload, parsed, datum)
            value = wireformat.encode(self.schema_id, payload.getvalue())
            encoded.append(replace(order, value=value, archived=json_value(datum), schemas=refs))
        return encoded

    def bypassing(self, orders: list[Order], share: float = BYPASS_SHARE) -> list[Order]:
        """``orders`` (as ``encode`` made them) with about ``share`` of them, at least
        ``BYPASS_AT_LEAST``, as a producer that bypassed the serializer wrote them (module
        docstring): at fixed positions a quarter into every stride of the run, ``BYPASS_KINDS`` in
        turn. The integration rejects each; what the archive must hold is a dead letter (no hour)
        with the value as produced, byte for byte, and no schema reference."""
        every = _bypass_stride(share, len(orders))
        if every is None:
            return list(orders)
        found = []
        for index, order in enumerate(orders):
            if index % every != max(1, every // 4) or order.value is None:
                found.append(order)
                continue
            kind = BYPASS_KINDS[(index // every) % len(BYPASS_KINDS)]
            _schema_id, payload = wireformat.parse(order.value)
            if kind == NOT_WIRE_FORMAT:  # a plain JSON serializer: the text the integration would deliver
                value = order.archived or b""
            elif kind == UNKNOWN_SCHEMA_ID:  # serialized against another registry
                value = wireformat.encode(FOREIGN_SCHEMA_ID, payload)
            else:  # the right id, the payload cut short (every prefix of an Avro datum ends early)
                value = wireformat.encode(self.schema_id, payload[: len(payload) // 2])
            found.append(replace(order, value=value, hour=None, late=False, archived=None, schemas=()))
        return found

    def summary(self) -> dict[str, Any]:
        return {"url": self.url, "subject": self.subject, "schema_id": self.schema_id, "record_format": "json"}


def _bypass_stride(share: float, count: int) -> int | None:
    """Every how many orders one bypasses the serializer: about ``share`` of ``count``, at least
    ``BYPASS_AT_LEAST`` of them in short runs (``None``: none)."""
    if share <= 0 or count < 2:
        return None
    return max(2, min(round(1 / share), count // BYPASS_AT_LEAST))


@contextlib.contextmanager
def avro_registry(aws: LocalAws, topic: str) -> Iterator[AvroOrders]:
    """The registry on loopback (stopped on exit), its credentials' secret on ``aws`` (deleted on
    exit) and the order schema registered under ``<topic>-value``."""
    credentials = (REGISTRY_USER, secrets.token_urlsafe(16))
    manager = boto3.client("secretsmanager", **aws.settings())
    with LocalSchemaRegistry(credentials=credentials) as registry:
        secret = manager.create_secret(
            Name=f"tidemark-demo-schema-registry-{uuid.uuid4().hex[:8]}",
            SecretString=json.dumps({"username": credentials[0], "password": credentials[1]}),
        )
        try:
            subject = value_subject(topic)
            schema_id = registry.client().register(subject, ORDER_SCHEMA)
            yield AvroOrders(registry.url, secret["ARN"], subject, schema_id)
        finally:
            with contextlib.suppress(Exception):  # best effort: a stopped endpoint loses it anyway
                manager.delete_secret(SecretId=secret["ARN"], ForceDeleteWithoutRecovery=True)
