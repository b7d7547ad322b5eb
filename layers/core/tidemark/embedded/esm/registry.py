"""The event source mapping's schema registry integration, for the local mapping.

With ``source.schema_registry`` a Lambda Kafka mapping (provisioned mode) validates each record's
``validate`` parts against the registry before the function sees them: it reads Confluent's wire
format (magic byte 0, the 4-byte schema id, the serialized payload), fetches the writer schema by
id, deserializes the payload, and delivers the part as ``record_format``

* ``json``: the registry-decoded value as JSON text;
* ``source``: the payload as produced, the 5-byte header removed;

adding ``keySchemaMetadata`` / ``valueSchemaMetadata`` (``{"dataFormat": "AVRO", "schemaId":
"<id>"}``) to the record -- here ``Record.schemas``, key before value, which
``tidemark.records.esm.encode_record`` renders. A record it cannot handle never reaches the
function: AWS discards it or sends it to the on-failure destination with a reason,
``SCHEMA_NOT_FOUND`` (no wire-format header, or an id the registry does not know) or
``DESERIALIZATION_ERROR`` (the payload does not decode with its schema). ``RegistryDecoder`` is
that step for one batch; the local mapping (``mapping.py``) delivers what it keeps and commits
the offsets of what it rejects along with the rest, as AWS moves past them.

Only Avro is emulated locally, against a Confluent-compatible registry
(``tidemark.embedded.schema_registry``) signed in with basic credentials from Secrets Manager;
a Protobuf or JSON Schema id is rejected as ``DESERIALIZATION_ERROR`` saying so, and a Glue
registry or client-certificate auth is refused when the decoder is built.

The JSON rendering (``json_value``) is fastavro's decoding dumped with orjson: a record becomes
an object with its fields in schema order, a union its branch's plain value (not Avro's JSON
encoding ``{"string": ...}``), an enum its symbol, ``bytes`` and ``fixed`` a string whose code
points are the byte values (ISO-8859-1, as Avro's JSON encoding writes them), a ``decimal`` its
text, dates and timestamps RFC 3339 text, a NaN or infinite float ``null``. The demo computes
what the archive must hold with the same function.

Decoding uses fastavro's ``schemaless_reader`` with the writer schema of each record's id.
Powertools' Kafka consumer deserializer is not used: it decodes with one schema fixed when the
function is deployed (the reader's view, for a function that consumes) and needs the ``avro``
package, while a mapping decodes each record with the schema its id names, whatever it is.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import orjson

from tidemark.config.model import SchemaRegistryConfig
from tidemark.embedded.schema_registry import AVRO, SchemaNotFoundError, SchemaRegistryClient, SchemaRegistryError
from tidemark.exceptions import TidemarkError
from tidemark.records.model import Record, SchemaRef
from tidemark.wireformat import NotWireFormatError, parse

#: the reasons AWS gives a record its registry integration could not validate
SCHEMA_NOT_FOUND = "SCHEMA_NOT_FOUND"
DESERIALIZATION_ERROR = "DESERIALIZATION_ERROR"
JSON, SOURCE = "json", "source"
#: the order ``Record.schemas`` keeps the parts in
PARTS = ("key", "value")


class RecordRejected(TidemarkError):
    """One record part the integration cannot deliver; ``reason`` is AWS's code for it."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record not delivered, with AWS's reason and what went wrong."""

    record: Record
    reason: str
    detail: str


@dataclass
class DecodedBatch:
    delivered: list[Record] = field(default_factory=list)  # in batch order
    rejected: list[Rejection] = field(default_factory=list)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_value(datum: Any) -> bytes:
    """A decoded Avro datum as the JSON text the integration delivers (module docstring)."""
    return orjson.dumps(datum, default=_json_default)


def read_secret_credentials(secrets: Any, secret_arn: str) -> tuple[str, str]:
    """``(username, password)`` from a Secrets Manager secret holding ``{"username", "password"}``
    (``secrets`` is a boto3 ``secretsmanager`` client)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        text = secrets.get_secret_value(SecretId=secret_arn)["SecretString"]
        data = json.loads(text)
        return str(data["username"]), str(data["password"])
    except (BotoCoreError, ClientError) as exc:
        raise SchemaRegistryError(f"cannot read the registry's credentials from {secret_arn}: {exc}") from None
    except (KeyError, TypeError, ValueError):
        raise SchemaRegistryError(
            f"secret {secret_arn}: basic auth needs a JSON SecretString with username and password"
        ) from None


class RegistryDecoder:
    """Validates and decodes a batch's records as the mapping's registry integration does.

    ``parts``: which of ``key``/``value`` are validated (a null key is left as it is);
    ``record_format``: ``json`` or ``source``. Writer schemas are fetched once per id."""

    def __init__(
        self, client: SchemaRegistryClient, *, parts: Iterable[str] = ("value",), record_format: str = JSON
    ) -> None:
        wanted = set(parts)
        if not wanted or not wanted <= set(PARTS):
            raise ValueError(f"parts must be some of {PARTS}, got {sorted(wanted)}")
        if record_format not in (JSON, SOURCE):
            raise ValueError(f"record_format must be {JSON!r} or {SOURCE!r}, got {record_format!r}")
        self.client = client
        self.parts = tuple(part for part in PARTS if part in wanted)
        self.record_format = record_format
        self._readers: dict[int, Callable[[io.BytesIO], Any]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: SchemaRegistryConfig, secrets: Any) -> RegistryDecoder:
        """The integration ``source.schema_registry`` configures; ``secrets`` (a boto3
        ``secretsmanager`` client) reads the basic credentials its ``secret_arn`` names."""
        if config.kind != "confluent" or config.url is None:
            raise SchemaRegistryError("the local event source mapping emulates Confluent registries only, not Glue")
        if config.auth != "basic" or config.secret_arn is None:
            raise SchemaRegistryError(
                f"the local event source mapping signs in to a registry with basic auth only, not {config.auth}"
            )
        username, password = read_secret_credentials(secrets, config.secret_arn)
        client = SchemaRegistryClient(config.url, username=username, password=password)
        return cls(client, parts=config.validate_parts, record_format=config.record_format)

    def decode(self, records: Iterable[Record]) -> DecodedBatch:
        """Each record as the mapping delivers it, or rejected with AWS's reason. Errors reaching
        the registry itself (unreachable, credentials refused) are raised: the mapping stops."""
        batch = DecodedBatch()
        for record in records:
            try:
                batch.delivered.append(self.decode_record(record))
            except RecordRejected as rejected:
                batch.rejected.append(Rejection(record, rejected.reason, rejected.detail))
        return batch

    def decode_record(self, record: Record) -> Record:
        """``record`` as delivered (``RecordRejected`` if it cannot be)."""
        key, value = record.key, record.value
        schemas: list[SchemaRef] = []
        if "key" in self.parts and key is not None:
            key, ref = self._part("key", key)
            schemas.append(ref)
        if "value" in self.parts and value is not None:  # a tombstone has nothing to decode
            value, ref = self._part("value", value)
            schemas.append(ref)
        return record._replace(key=key, value=value, schemas=tuple(schemas))

    def _part(self, part: str, data: bytes) -> tuple[bytes, SchemaRef]:
        try:
            schema_id, payload = parse(data)
        except NotWireFormatError as exc:
            raise RecordRejected(SCHEMA_NOT_FOUND, f"{part}: no schema id ({exc})") from None
        reader = self._reader(part, schema_id)
        ref = SchemaRef(part, AVRO, str(schema_id))
        stream = io.BytesIO(payload)
        try:
            datum = reader(stream)
        except Exception as exc:  # noqa: BLE001 -- fastavro raises many types on bad bytes (EOF, index, unicode...)
            raise RecordRejected(
                DESERIALIZATION_ERROR, f"{part}: does not decode with schema {schema_id}: {type(exc).__name__}: {exc}"
            ) from None
        if stream.tell() != len(payload):
            raise RecordRejected(
                DESERIALIZATION_ERROR,
                f"{part}: {len(payload) - stream.tell()} bytes left over after decoding with schema {schema_id}",
            )
        if self.record_format == SOURCE:
            return payload, ref
        try:
            return json_value(datum), ref
        except TypeError as exc:
            raise RecordRejected(DESERIALIZATION_ERROR, f"{part}: no JSON rendering ({exc})") from None

    def _reader(self, part: str, schema_id: int) -> Callable[[io.BytesIO], Any]:
        """A decoder of payloads written with schema ``schema_id`` (cached per id)."""
        with self._lock:
            reader = self._readers.get(schema_id)
        if reader is not None:
            return reader
        import fastavro

        try:
            found = self.client.fetch(schema_id)
        except SchemaNotFoundError:
            raise RecordRejected(SCHEMA_NOT_FOUND, f"{part}: schema {schema_id} is not in the registry") from None
        if found.schema_type != AVRO:
            raise RecordRejected(
                DESERIALIZATION_ERROR,
                f"{part}: schema {schema_id} is {found.schema_type}; only Avro is emulated locally",
            )
        try:
            parsed = fastavro.parse_schema(json.loads(found.schema))
        except Exception as exc:  # noqa: BLE001 -- as above, for a schema the registry should have refused
            raise RecordRejected(DESERIALIZATION_ERROR, f"{part}: schema {schema_id} does not parse: {exc}") from None

        def read(stream: io.BytesIO) -> Any:
            return fastavro.schemaless_reader(stream, parsed, None)

        with self._lock:
            self._readers[schema_id] = read
        return read
