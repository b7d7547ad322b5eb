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

from collections.abc import Callable

from tidemark.records.model import SchemaRef, Schemas

MAGIC = 0
HEADER_BYTES = 5  # magic byte + 4-byte schema id

#: a record's key and value -> the schema references their bytes carry
Detector = Callable[[bytes | None, bytes], Schemas]


def schema_id(data: bytes | None) -> str | None:
    """The schema id ``data`` starts with in Confluent's wire format, or ``None``."""
    if data is None or len(data) < HEADER_BYTES or data[0] != MAGIC:
        return None
    return str(int.from_bytes(data[1:HEADER_BYTES], "big"))


def detector(wire_format: str, *, key: bool, value: bool) -> Detector | None:
    """What ``encoding.wire_format`` reads from each record (``None``: nothing to read).
    ``key``/``value``: which parts are kept as bytes, the only ones a wire format can be in."""
    if wire_format != "confluent" or not (key or value):
        return None

    def detect(record_key: bytes | None, record_value: bytes) -> Schemas:
        found: list[SchemaRef] = []
        if key and (key_id := schema_id(record_key)) is not None:
            found.append(SchemaRef("key", "", key_id))
        if value and (value_id := schema_id(record_value)) is not None:
            found.append(SchemaRef("value", "", value_id))
        return tuple(found)

    return detect
