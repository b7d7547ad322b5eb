"""Buffer identity: a partition has one open buffer per (kind, event hour, partition-by folders).

``raw`` buffers hold archived records, ``errors`` buffers dead-lettered ones (filed under the
hour of their Kafka timestamp, since their event time may be what is wrong with them, and never
under partition-by folders, since a partition value may be what is wrong with them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from tidemark.exceptions import UnsafePathError
from tidemark.names import HOUR, matches
from tidemark.partitioning import valid_folders

RAW_KIND = "raw"
ERRORS_KIND = "errors"
KINDS = (RAW_KIND, ERRORS_KIND)


class _Key(NamedTuple):
    kind: str
    hour: str
    folders: str = ""  # the record's partition-by folders (tidemark.partitioning), '' if none


class BufferKey(_Key):
    """Which buffer of a partition: (kind, event hour, partition-by folders), validated.

    A tuple, so hashing and comparing it are C calls: the archiver groups every record of a
    batch by its buffer key.
    """

    __slots__ = ()

    def __new__(cls, kind: str, hour: str, folders: str = "") -> BufferKey:
        if kind not in KINDS or not matches(HOUR, hour) or not valid_folders(folders) or (folders and kind != RAW_KIND):
            raise UnsafePathError(f"invalid buffer key {kind!r}/{hour!r}/{folders!r}")
        return super().__new__(cls, kind, hour, folders)

    def _replace(self, **changes: str) -> BufferKey:
        return BufferKey(**{**self._asdict(), **changes})

    @classmethod
    def _make(cls, iterable: Iterable[str]) -> BufferKey:  # type: ignore[override]
        return cls(*iterable)

    def __str__(self) -> str:
        # Buffers of unpartitioned streams keep the form ledgers already hold: kind/hour.
        return f"{self.kind}/{self.hour}/{self.folders}" if self.folders else f"{self.kind}/{self.hour}"

    def __repr__(self) -> str:
        return f"BufferKey(kind={self.kind!r}, hour={self.hour!r}, folders={self.folders!r})"

    @classmethod
    def parse(cls, text: str) -> BufferKey:
        kind, _, rest = text.partition("/")
        hour, _, folders = rest.partition("/")
        return cls(kind, hour, folders)
