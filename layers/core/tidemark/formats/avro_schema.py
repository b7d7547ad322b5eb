"""The writer schema of Avro objects (``tidemark.formats.avro``), without fastavro: the Glue
table's ``avro.schema.literal`` (``tidemark.catalog``) is this same schema, built at synth,
where the formats layer's libraries need not be installed."""

from __future__ import annotations

from typing import Any

from tidemark.formats.base import RenderContext, ValueColumn


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
    header = {
        "type": "record",
        "name": "Header",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "value", "type": _string_or_bytes(context.header_encoding)},
        ],
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "tidemark",
        "fields": [
            {"name": "topic", "type": "string"},
            {"name": "partition", "type": "int"},
            {"name": "offset", "type": "long"},
            {"name": "timestamp", "type": "long"},
            {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "key", "type": ["null", _string_or_bytes(context.key_encoding)], "default": None},
            {"name": "value", "type": value},
            {"name": "headers", "type": {"type": "array", "items": header}},
        ],
    }


def _value_field(column: ValueColumn) -> dict[str, Any]:
    if column.nullable:
        return {"name": column.name, "type": ["null", column.type], "default": None}
    return {"name": column.name, "type": column.type}
