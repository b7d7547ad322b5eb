"""Confluent's wire format: the schema id a producer's serializer puts in front of the payload.

Confluent's serializers (Avro, Protobuf, JSON Schema) write ``0x00 | schema id (u32, big-endian)
| payload``. A stream that reads such a topic without the mapping's schema registry integration
(``encoding.wire_format: confluent``) keeps every byte as produced and records the id in the
envelope (``value_schema.id``, ``key_schema.id``), so a reader can fetch the writer's schema from
the registry later. The format (Avro, Protobuf, JSON Schema) is not in the bytes: it is left
empty. A value that does not start with the magic byte (a tombstone, a plain string) is archived
as it is, without an id: nothing is lost, and nothing is made up.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from tidemark.exceptions import TidemarkError
from tidemark.records.model import SchemaRef, Schemas

MAGIC = 0
_HEADER = struct.Struct(">BI")  # magic byte, schema id (big-endian)
HEADER_BYTES = _HEADER.size


class NotWireFormatError(TidemarkError, ValueError):
    """Bytes that do not start with Confluent's wire-format header (magic byte 0 + schema id)."""


def encode(schema_id: int, payload: bytes) -> bytes:
    """``payload`` as a Confluent serializer writes it: magic byte 0, the schema id, the payload."""
    return _HEADER.pack(MAGIC, schema_id) + payload


def parse(data: bytes) -> tuple[int, bytes]:
    """The schema id and the payload of Confluent's wire format; ``NotWireFormatError`` otherwise."""
    if len(data) < HEADER_BYTES:
        raise NotWireFormatError(f"{len(data)} bytes: shorter than the {HEADER_BYTES}-byte wire-format header")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise NotWireFormatError(f"magic byte {data[0]:#04x}, not {MAGIC:#04x}")
    return schema_id, data[HEADER_BYTES:]


#: a record's key and value (either may be null: a tombstone has no value) -> the schema
#: references their bytes carry
Detector = Callable[[bytes | None, bytes | None], Schemas]


def schema_id(data: bytes | None) -> str | None:
    """The schema id ``data`` starts with in Confluent's wire format, or ``None``."""
    if data is None or len(data) < HEADER_BYTES or data[0] != MAGIC:  # checked first: no exception per record
        return None
    return str(parse(data)[0])


def detector(wire_format: str, *, key: bool, value: bool) -> Detector | None:
    """What ``encoding.wire_format`` reads from each record (``None``: nothing to read).
    ``key``/``value``: which parts are kept as bytes, the only ones a wire format can be in."""
    if wire_format != "confluent" or not (key or value):
        return None

    def detect(record_key: bytes | None, record_value: bytes | None) -> Schemas:
        found: list[SchemaRef] = []
        if key and (key_id := schema_id(record_key)) is not None:
            found.append(SchemaRef("key", "", key_id))
        if value and (value_id := schema_id(record_value)) is not None:
            found.append(SchemaRef("value", "", value_id))
        return tuple(found)

    return detect
