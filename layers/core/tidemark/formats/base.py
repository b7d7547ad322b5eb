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


class ObjectFormat(Protocol):
    extension: str
    content_type: str

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        """Write every frame to ``out`` deterministically (same frames -> same bytes); return the count."""
        ...
