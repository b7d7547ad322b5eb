"""Which records a recovery takes, and how they are cut into units (pure: no I/O).

A partition's *missing* positions are those of its epoch's committed range that no recorded
object holds; the records the source log holds there are the ones the event source mapping never
delivered. They are taken in position order and cut into units, each small enough for one
DynamoDB transaction (its objects and their hours' marks) and for memory: a unit closes before
the record that would take it past ``Limits``. A unit's ``ranges`` are the missing ranges it
covers, clipped to its first and last record: reading the source over them again gives exactly
its records, or the log has changed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tidemark.buffers import BufferKey
from tidemark.records.model import Record
from tidemark.routing import Routed


class Withheld(NamedTuple):
    """A record the source holds at a missing position, and where it is archived."""

    record: Record
    routed: Routed


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one unit may take. 40 objects keep its transaction (the recovery item, each
    object's item, each hour's mark) within DynamoDB's 100 actions."""

    objects: int = 40
    records: int = 50_000
    bytes: int = 64 * 1024 * 1024
    ranges: int = 1_000


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class PlannedUnit:
    ranges: tuple[tuple[int, int], ...]
    records: tuple[Withheld, ...]  # ascending positions

    @property
    def buffers(self) -> dict[BufferKey, list[Withheld]]:
        """The unit's records by the buffer (object) they go to, in the order buffers first appear."""
        grouped: dict[BufferKey, list[Withheld]] = {}
        for item in self.records:
            grouped.setdefault(item.routed.buffer, []).append(item)
        return grouped


def size_of(record: Record) -> int:
    return len(record.value or b"") + len(record.key or b"") + sum(len(k) + len(v or b"") for k, v in record.headers)


def clip(missing: Sequence[tuple[int, int]], first: int, last: int) -> tuple[tuple[int, int], ...]:
    """The parts of the (sorted, disjoint) ``missing`` ranges within ``first..last``."""
    return tuple((max(lo, first), min(hi, last)) for lo, hi in missing if hi >= first and lo <= last)


def cut(
    missing: Sequence[tuple[int, int]], withheld: Sequence[Withheld], limits: Limits | None = None
) -> list[PlannedUnit]:
    """``withheld`` (ascending, each within a ``missing`` range) cut into units, in order."""
    limits = limits or DEFAULT_LIMITS
    starts = [lo for lo, _hi in missing]
    within = [bisect_right(starts, item.record.offset) - 1 for item in withheld]  # each one's missing range
    units: list[PlannedUnit] = []
    start = 0
    buffers: set[BufferKey] = set()
    size = 0
    for index, item in enumerate(withheld):
        grows = item.routed.buffer not in buffers
        full = index > start and (
            (grows and len(buffers) >= limits.objects)
            or index - start >= limits.records
            or size + size_of(item.record) > limits.bytes
            or within[index] - within[start] + 1 > limits.ranges
        )
        if full:
            units.append(_unit(missing, withheld[start:index]))
            start, buffers, size = index, set(), 0
        buffers.add(item.routed.buffer)
        size += size_of(item.record)
    if start < len(withheld):
        units.append(_unit(missing, withheld[start:]))
    return units


def _unit(missing: Sequence[tuple[int, int]], items: Sequence[Withheld]) -> PlannedUnit:
    return PlannedUnit(clip(missing, items[0].record.offset, items[-1].record.offset), tuple(items))
