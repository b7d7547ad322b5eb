"""The writer schema of Avro objects (``tidemark.formats.avro``), without fastavro: the Glue
table's ``avro.schema.literal`` (``tidemark.catalog``) is this same schema, built at synth,
where the formats layer's libraries need not be installed.

The record is ``tidemark.Envelope`` for every source kind (a table reads one stream, so the
name needs to tell nothing apart); its fields are named and typed by the source kind's
envelope (``RenderContext.envelope``): positions and partition ids are strings when
``position_is_text`` (Kinesis: a sequence number overflows a long), the record timestamp a
``timestamp-millis`` long when the source writes it as an instant (``timestamp_in_seconds``;
Kafka's may be -1, a plain long), and there is a headers field when the source has headers.

For Kafka (``SourceShape.tombstones``) the value and a header's value are unions with ``null``
(a tombstone's value, a null header value), ``"null"`` first with a ``null`` default as for the
key. A Glue table reading with this schema reads objects written before (plain
``string``/``bytes``/record) as well: Avro's schema resolution takes a writer's non-union type
for a reader union holding it. Kinesis and RabbitMQ records are never null: theirs stay plain.
"""

from __future__ import annotations

from typing import Any

from tidemark.formats.base import RenderContext, ValueColumn
from tidemark.sources import shape_of

_TIMESTAMP = {"type": "long", "logicalType": "timestamp-millis"}


def _string_or_bytes(encoding: str) -> str:
    return "bytes" if encoding == "bytes" else "string"


def avro_schema(context: RenderContext) -> dict[str, Any]:
    """The writer schema of a stream's Avro objects."""
    value: Any
    if context.value_schema:
        if context.value_encoding != "json":
            raise ValueError("a value schema needs value_encoding json")
        value = {"type": "record", "name": "Value", "fields": [_value_field(column) for column in context.value_schema]}
    else:
        value = _string_or_bytes(context.value_encoding)
    names = context.envelope
    nulls = shape_of(context.source).tombstones
    fields: list[dict[str, Any]] = [
        {"name": names.source, "type": "string"},
        {"name": names.partition, "type": "string" if names.position_is_text else "int"},
        {"name": names.position, "type": "string" if names.position_is_text else "long"},
        {"name": names.timestamp, "type": dict(_TIMESTAMP) if names.timestamp_in_seconds else "long"},
        {"name": "event_time", "type": dict(_TIMESTAMP)},
        {"name": names.key, "type": ["null", _string_or_bytes(context.key_encoding)], "default": None},
        _nullable("value", value) if nulls else {"name": "value", "type": value},
    ]
    if names.headers is not None:
        header_value = _string_or_bytes(context.header_encoding)
        header = {
            "type": "record",
            "name": "Header",
            "fields": [
                {"name": "key", "type": "string"},
                _nullable("value", header_value) if nulls else {"name": "value", "type": header_value},
            ],
        }
        fields.append({"name": names.headers, "type": {"type": "array", "items": header}})
    if context.schema_refs:  # tidemark.formats.schema_refs: the key's and the value's schema
        ref: Any = {
            "type": "record",
            "name": "SchemaRef",
            "fields": [
                {"name": "format", "type": ["null", "string"], "default": None},
                {"name": "id", "type": "string"},
            ],
        }
        for name in ("key_schema", "value_schema"):
            fields.append({"name": name, "type": ["null", ref], "default": None})
            ref = "SchemaRef"  # a named type is defined once
    return {"type": "record", "name": "Envelope", "namespace": "tidemark", "fields": fields}


def _nullable(name: str, kind: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", kind], "default": None}


def _value_field(column: ValueColumn) -> dict[str, Any]:
    if column.nullable:
        return {"name": column.name, "type": ["null", column.type], "default": None}
    return {"name": column.name, "type": column.type}
