"""Which quarantined flushes an offset range names: each whole, or the range is refused."""

from __future__ import annotations

from tidemark.ledger.model import PartitionState, QuarantinedFlush
from tidemark.rearchive.exceptions import NothingToRearchiveError, RangeSplitsFlushError


def describe(held: QuarantinedFlush) -> str:
    buffer = held.flush.buffer
    return f"{held.flush.flush_id} (offsets {buffer.first}..{buffer.last}, {buffer.records} records)"


def flushes_in_range(state: PartitionState, first: int, last: int) -> list[QuarantinedFlush]:
    """The quarantined flushes of ``state`` whose offsets lie in ``first..last``, by first offset.

    A flush the range only partly covers is refused (``RangeSplitsFlushError``): its object
    holds every record of the flush or none. No flush in the range at all is refused too
    (``NothingToRearchiveError``), naming the partition's quarantined ranges, if any."""
    if first > last:
        raise RangeSplitsFlushError(f"--from-offset {first} is after --to-offset {last}")
    held = sorted(state.quarantined.values(), key=lambda item: (item.flush.buffer.first, item.flush.flush_id))
    chosen: list[QuarantinedFlush] = []
    for item in held:
        buffer = item.flush.buffer
        if buffer.last < first or buffer.first > last:
            continue
        if buffer.first < first or buffer.last > last:
            raise RangeSplitsFlushError(
                f"offsets {first}..{last} cut through quarantined flush {describe(item)}: "
                f"give --from-offset {min(first, buffer.first)} --to-offset {max(last, buffer.last)}"
            )
        chosen.append(item)
    if not chosen:
        where = f"{state.stream}/{state.partition}"
        listed = "; ".join(map(describe, held)) or "none"
        raise NothingToRearchiveError(
            f"{where}: no quarantined flush in offsets {first}..{last} (quarantined: {listed})"
        )
    return chosen
