"""Buffer identity: a partition has one open buffer per (kind, event hour, partition-by folders).

``raw`` buffers hold archived records, ``errors`` buffers dead-lettered ones (filed under the
hour of their Kafka timestamp, since their event time may be what is wrong with them, and never
under partition-by folders, since a partition value may be what is wrong with them).
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.exceptions import UnsafePathError
from tidemark.names import HOUR, matches
from tidemark.partitioning import valid_folders

RAW_KIND = "raw"
ERRORS_KIND = "errors"
KINDS = (RAW_KIND, ERRORS_KIND)


@dataclass(frozen=True, order=True, slots=True)
class BufferKey:
    kind: str
    hour: str
    folders: str = ""  # the record's partition-by folders (tidemark.partitioning), '' if none

    def __post_init__(self) -> None:
        if (
            self.kind not in KINDS
            or not matches(HOUR, self.hour)
            or not valid_folders(self.folders)
            or (self.folders and self.kind != RAW_KIND)
        ):
            raise UnsafePathError(f"invalid buffer key {self.kind!r}/{self.hour!r}/{self.folders!r}")

    def __str__(self) -> str:
        # Buffers of unpartitioned streams keep the form ledgers already hold: kind/hour.
        return f"{self.kind}/{self.hour}/{self.folders}" if self.folders else f"{self.kind}/{self.hour}"

    @classmethod
    def parse(cls, text: str) -> BufferKey:
        kind, _, rest = text.partition("/")
        hour, _, folders = rest.partition("/")
        return cls(kind, hour, folders)
