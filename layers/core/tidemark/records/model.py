"""The source-independent record every adapter produces."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class Record:
    """One record of one partition, with its bytes decoded exactly as the broker stored them."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = field(default=())
