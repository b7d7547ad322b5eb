"""Fields of a parsed JSON value by dotted path, as text: what a csv ``value.<path>`` column and
a ``partition_by`` ``_value.<path>`` level hold. One definition, used by the router (which
refuses a value whose field cannot be rendered, before it is staged), the csv format and the
archive checker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson


class UnrenderableField(ValueError):
    """A field orjson cannot serialise again (nested deeper than it writes, 254 levels)."""


def node(value: Any, path: Sequence[str]) -> Any:
    """The node at ``path`` (``None`` when missing or not under an object)."""
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def text_of(item: Any) -> str | None:
    """A field as text: strings as they are, anything else as its JSON; ``None`` for null."""
    if item is None:
        return None
    if isinstance(item, str):
        return item
    try:
        return orjson.dumps(item).decode()
    except TypeError as exc:  # orjson parses deeper nesting than it writes
        raise UnrenderableField(str(exc)) from None


def cell(value: Any, path: Sequence[str]) -> str | None:
    return text_of(node(value, path))
