"""A record's schema references in the archive's envelope, the same in every format that keeps them.

JSON Lines writes ``"key_schema"`` / ``"value_schema"`` after the headers, only on the records
that have them (``{"format": "AVRO", "id": "42"}``, ``format`` null when only the id is known:
Confluent's wire format). Parquet and Avro give every object of a stream whose records may
carry them (``RenderSpec.schema_refs``) two nullable columns of that shape; CSV two columns of
that JSON (an empty cell for none), which a stream's default columns include. Text and bytes
keep none (the configuration refuses a wire format with them).
"""

from __future__ import annotations

from typing import Any

from tidemark.records.model import SchemaRef, Schemas

#: envelope field (and column) -> the part of the record it names
FIELDS = {"key_schema": "key", "value_schema": "value"}
COLUMNS = tuple(FIELDS)


def envelope_fields(schemas: Schemas) -> dict[str, dict[str, str | None]]:
    """The envelope fields of a record's references (none for a record without)."""
    return {f"{ref.part}_schema": {"format": ref.format or None, "id": ref.id} for ref in schemas}


def columns(schemas: Schemas) -> tuple[dict[str, str | None] | None, dict[str, str | None] | None]:
    """``(key_schema, value_schema)`` cells of one record: a struct, or null."""
    fields = envelope_fields(schemas)
    return fields.get("key_schema"), fields.get("value_schema")


def from_envelope(envelope: dict[str, Any]) -> Schemas | None:
    """A record's references back from its envelope fields; ``None`` when it has none (the
    fields null or missing), as for a format that keeps none."""
    found = []
    for name, part in FIELDS.items():
        cell = envelope.get(name)
        if cell is not None:
            found.append(SchemaRef(part, cell.get("format") or "", cell["id"]))
    return tuple(found) or None
