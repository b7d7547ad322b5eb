"""Buffer identity: a partition has one open buffer per (kind, event hour).

``raw`` buffers hold archived records, ``errors`` buffers dead-lettered ones (filed under the
hour of their Kafka timestamp, since their event time may be what is wrong with them).
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.exceptions import UnsafePathError
from tidemark.names import HOUR, matches

RAW_KIND = "raw"
ERRORS_KIND = "errors"
KINDS = (RAW_KIND, ERRORS_KIND)


@dataclass(frozen=True, order=True, slots=True)
class BufferKey:
    kind: str
    hour: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS or not matches(HOUR, self.hour):
            raise UnsafePathError(f"invalid buffer key {self.kind!r}/{self.hour!r}")

    def __str__(self) -> str:
        return f"{self.kind}/{self.hour}"

    @classmethod
    def parse(cls, text: str) -> BufferKey:
        kind, _, hour = text.partition("/")
        return cls(kind, hour)
