"""Conformance of JSON values to a declared value schema (``format.value_schema``).

Checked when a record is routed, before it is staged: a value that does not conform is
dead-lettered (``schema_mismatch``) with its original bytes, so the typed renderers (Parquet,
Avro) can trust every value they meet -- a render that failed on a staged record would block
its flush for ever.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tidemark.config.model import ValueField

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _is_long(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and _LONG_MIN <= value <= _LONG_MAX


def _is_double(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda value: isinstance(value, str),
    "long": _is_long,
    "double": _is_double,
    "boolean": lambda value: isinstance(value, bool),
}


class ValueSchema:
    def __init__(self, fields: Sequence[ValueField]) -> None:
        self._fields = [(field.name, _CHECKS[field.type], field.type, field.nullable) for field in fields]
        self._names = frozenset(field.name for field in fields)

    def mismatch(self, value: Any) -> str | None:
        """Why ``value`` (parsed JSON) does not conform, or ``None`` when it does."""
        if not isinstance(value, dict):
            return f"value is a JSON {type(value).__name__}, the schema wants an object"
        for name, check, kind, nullable in self._fields:
            item = value.get(name)
            if item is None:
                if not nullable:
                    return f"field {name!r} is {'null' if name in value else 'missing'} and not nullable"
            elif not check(item):
                return f"field {name!r} is {_describe(item)}, the schema says {kind}"
        if len(value) > len(self._names) or not self._names.issuperset(value):
            undeclared = sorted(set(value) - self._names)
            return f"undeclared field(s) {', '.join(map(repr, undeclared[:5]))}"
        return None


def _describe(item: Any) -> str:
    """The type, and for a scalar its first characters (never a whole nested structure: str()
    of a deeply nested list would recurse past Python's limit)."""
    if isinstance(item, dict | list):
        return f"a JSON {'object' if isinstance(item, dict) else 'array'}"
    return f"{type(item).__name__} {str(item)[:40]!r}"
