"""The writer interface every object format implements."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from tidemark.staging.frames import Frame


@dataclass(frozen=True, slots=True)
class RenderContext:
    """What a format needs besides the frames: the envelope fields that are not per record."""

    topic: str
    partition: int
    key_encoding: str = "text"  # text | bytes
    value_encoding: str = "json"  # json | text | bytes
    header_encoding: str = "text"  # text | bytes


@dataclass(frozen=True, slots=True)
class RenderSpec:
    """Everything an object's bytes depend on besides its records, fixed when a buffer opens.

    A buffer is rendered with the spec it was staged under, whoever resumes its flush and
    whatever the configuration says by then; a buffer whose spec no longer matches the
    configuration is sealed rather than appended to (rotation reason ``format_changed``).
    """

    format: str
    compression: str
    gzip_level: int
    topic: str
    key_encoding: str
    value_encoding: str
    header_encoding: str

    def encode(self) -> str:
        return "|".join(
            (
                self.format,
                self.compression,
                str(self.gzip_level),
                self.topic,
                self.key_encoding,
                self.value_encoding,
                self.header_encoding,
            )
        )

    @classmethod
    def decode(cls, text: str) -> RenderSpec:
        fmt, compression, level, topic, key, value, headers = text.split("|")
        return cls(fmt, compression, int(level), topic, key, value, headers)

    def context(self, partition: int) -> RenderContext:
        return RenderContext(self.topic, partition, self.key_encoding, self.value_encoding, self.header_encoding)


class ObjectFormat(Protocol):
    extension: str
    content_type: str

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        """Write every frame to ``out`` deterministically (same frames -> same bytes); return the count."""
        ...
