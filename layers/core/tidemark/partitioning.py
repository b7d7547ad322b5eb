"""Content partitioning (``partition_by``): the folders a record's object goes under.

A record's partition values come from its key, a header, its topic or partition, or a dotted
path into its JSON value. Each value becomes one folder level, made safe for any path:

* bytes outside ``[A-Za-z0-9._-]`` are percent-encoded (``a/b`` -> ``a%2Fb``, ``../../x`` ->
  ``..%2F..%2Fx``), and a value that is only dots is encoded whole, so no level is ``.`` or ``..``;
* an empty value is ``__empty__``, a missing (or JSON null) one ``__missing__``; a real value
  starting with ``__`` gets its first ``_`` encoded, so it can never pose as either marker;
* a value longer than ``max_value_length`` once encoded is cut and given ``~`` plus 16 hex digits
  of its SHA-256 (``~`` is never part of an encoded value, so a cut value never equals a whole one).

``style: keys_and_values`` writes ``<name>=<value>`` (Hive) levels. The result is a pure function
of the record, so a redelivered record always lands in the same buffer and object.

A tombstone (a Kafka record whose value is null) has no value to read a ``_value.<path>`` from:
those levels are ``__missing__`` whatever ``missing`` says (a delete is a record, not a record
lacking a field: ``missing: dead_letter`` would dead-letter every tombstone). Its key, header,
topic and partition levels are read as any record's, ``missing`` included. So a stream
partitioned by a value field files its tombstones under that field's ``__missing__`` folder,
in the hour of their event time (their record timestamp, ``tidemark.eventtime``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

from tidemark.config.model import PartitionByConfig, PartitionField
from tidemark.records.model import Record
from tidemark.valuepath import cell

MISSING = "__missing__"
EMPTY = "__empty__"
#: one folder level: encoded characters, ``%XX`` escapes, ``~`` (hash suffix) and ``=`` (Hive)
FOLDER_LEVEL = re.compile(r"^[A-Za-z0-9._%~=-]{1,400}$")
_CACHED = 10_000  # folders remembered per writer (a warm container keeps them across batches)
_CACHED_VALUE_BYTES = 256  # longer values are encoded each time: the cache stays under ~5 MB
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_ENCODED = {byte: chr(byte) if byte in _SAFE else f"%{byte:02X}" for byte in range(256)}


class MissingPartitionValue(Exception):
    """The record lacks a partition-by field and ``missing: dead_letter`` is configured."""

    def __init__(self, field: str) -> None:
        super().__init__(f"partition_by field {field} is missing")
        self.field = field


def safe_level(value: bytes, max_length: int = 64) -> str:
    """One path-safe folder level for a partition value (see the module docstring)."""
    if not value:
        return EMPTY
    encoded = "".join(_ENCODED[byte] for byte in value)
    if encoded.strip(".") == "":
        encoded = "%2E" * len(value)
    elif encoded.startswith("__"):
        encoded = "%5F" + encoded[1:]
    if len(encoded) > max_length:
        cut = encoded[: max(1, max_length - 17)]
        if "%" in cut[-2:]:  # never split an escape
            cut = cut[: cut.rindex("%")]
        encoded = f"{cut}~{hashlib.sha256(value).hexdigest()[:16]}"
    return encoded


def valid_folders(folders: str) -> bool:
    """Whether ``folders`` is what a ``Partitioner`` makes: safe levels joined by ``/``."""
    if folders == "":
        return True
    return all(FOLDER_LEVEL.fullmatch(level) and level.strip(".") for level in folders.split("/"))


Getter = Callable[[Record, Any], bytes | None]


def _getter(field: PartitionField) -> Getter:
    selector = field.field
    if selector == "_key":
        return lambda record, _parsed: record.key
    if selector == "_topic":
        return lambda record, _parsed: record.topic.encode("utf-8") if record.topic else None
    if selector == "_partition":
        return lambda record, _parsed: str(record.partition).encode("ascii")
    if selector.startswith("_header."):
        name = selector.removeprefix("_header.")

        def header(record: Record, _parsed: Any) -> bytes | None:
            for header_name, data in reversed(record.headers):  # the last one wins, as in Kafka clients
                if header_name == name:
                    return data
            return None

        return header
    path = selector.removeprefix("_value.").split(".")

    def value(_record: Record, parsed: Any) -> bytes | None:
        text = cell(parsed, path)  # raises UnrenderableField for a node orjson cannot write
        return None if text is None else text.encode("utf-8")

    return value


class Partitioner:
    """The folders of a record under ``partition_by`` ('' when the stream is not partitioned)."""

    def __init__(self, config: PartitionByConfig) -> None:
        self.enabled = bool(config.fields)
        self.needs_value = any(field.field.startswith("_value.") for field in config.fields)
        self._fields = [(field, _getter(field)) for field in config.fields]
        self._from_value = [field.field.startswith("_value.") for field in config.fields]
        self._hive = config.style == "keys_and_values"
        self._dead_letter_missing = config.missing == "dead_letter"
        self._max = config.max_value_length
        self._cache: dict[tuple[bytes | None, ...], str] = {}

    def folders(self, record: Record, parsed: Any) -> str:
        """Raises ``MissingPartitionValue`` for a missing field under ``missing: dead_letter``."""
        if not self.enabled:
            return ""
        values = tuple(get(record, parsed) for _field, get in self._fields)
        if self._dead_letter_missing and None in values:  # (before the cache: it holds __missing__)
            tombstone = record.value is None
            for (field, _get), from_value, value in zip(self._fields, self._from_value, values, strict=True):
                if value is None and not (tombstone and from_value):
                    raise MissingPartitionValue(field.field)
        cacheable = sum(len(value) for value in values if value is not None) <= _CACHED_VALUE_BYTES
        folders = self._cache.get(values) if cacheable else None
        if folders is not None:
            return folders
        levels = []
        for (field, _get), value in zip(self._fields, values, strict=True):
            level = MISSING if value is None else safe_level(value, self._max)
            levels.append(f"{field.name}={level}" if self._hive else level)
        folders = "/".join(levels)
        if cacheable:  # bounded: at most _CACHED entries of at most _CACHED_VALUE_BYTES each
            if len(self._cache) >= _CACHED:
                self._cache.clear()
            self._cache[values] = folders
        return folders
