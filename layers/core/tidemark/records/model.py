"""The source-independent record every adapter produces."""

from __future__ import annotations

from typing import NamedTuple


class Record(NamedTuple):
    """One record of one partition, with its bytes decoded exactly as the broker stored them.

    A ``NamedTuple`` rather than a frozen dataclass: the archiver builds one per record on the
    hot path, and a tuple is built several times faster.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
