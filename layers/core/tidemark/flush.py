"""Rotation rules: each is a small predicate over one OPEN buffer; any one seals it.

Rules look only at the buffer itself (its records, bytes, age, segment count). A late record
therefore only ever grows its own hour's buffer and never forces the current hour's buffer to
rotate (invariant 7). The one cross-buffer guard, ``max_open_buffers``, seals the buffers that
have gone longest without an append, to bound the ledger item and the number of open files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tidemark.config.model import FlushPolicyConfig
from tidemark.ledger.model import OpenBuffer

MAX_RECORDS = "max_records"
MAX_BYTES = "max_bytes"
MAX_AGE = "max_age"
MAX_SEGMENTS = "max_segments"
MAX_OPEN_BUFFERS = "max_open_buffers"


@dataclass(frozen=True, slots=True)
class RotationRule:
    reason: str
    applies: Callable[[OpenBuffer, int], bool]


class FlushPolicy:
    def __init__(self, config: FlushPolicyConfig) -> None:
        max_records, max_bytes = config.max_records, int(config.max_bytes)
        max_age_ms, max_segments = config.max_age_ms, config.max_segments
        self.max_open_buffers = config.max_open_buffers
        self.rules: tuple[RotationRule, ...] = (
            RotationRule(MAX_RECORDS, lambda buffer, _now: buffer.records >= max_records),
            RotationRule(MAX_BYTES, lambda buffer, _now: buffer.size >= max_bytes),
            RotationRule(MAX_AGE, lambda buffer, now: now - buffer.opened_ms >= max_age_ms),
            RotationRule(MAX_SEGMENTS, lambda buffer, _now: len(buffer.segments) >= max_segments),
        )

    def reason(self, buffer: OpenBuffer, now_ms: int) -> str | None:
        """The first rule that applies to ``buffer``, or ``None`` if it stays open."""
        for rule in self.rules:
            if rule.applies(buffer, now_ms):
                return rule.reason
        return None

    def due(self, buffers: Mapping[str, OpenBuffer], now_ms: int) -> dict[str, str]:
        """Which buffers to seal now, each with its reason."""
        due = {key: reason for key, buffer in buffers.items() if (reason := self.reason(buffer, now_ms))}
        still_open = sorted((b.appended_ms, b.seq, key) for key, b in buffers.items() if key not in due)
        excess = len(still_open) - self.max_open_buffers
        for _appended, _seq, key in still_open[: max(excess, 0)]:
            due[key] = MAX_OPEN_BUFFERS
        return due
