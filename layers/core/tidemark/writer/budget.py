"""The ledger item budget: every partition state a writer writes fits in one item.

DynamoDB refuses an item over 400 KB, and a partition whose state outgrew it could never be
written again -- not by the archiver, not by the sweeper. A bad producer (every record of a
batch in another event hour) must not be able to do that, so the writer checks each state it is
about to write against ``archive.ledger_item_budget`` and splits its work when it would not fit
(see ``PartitionWriter.stage``).

Checking costs a serialisation and a zlib compression of the state, so a cheap upper bound of
the uncompressed body is tried first; only a state near the budget is measured exactly.
"""

from __future__ import annotations

from tidemark.ledger.base import Ledger
from tidemark.ledger.model import EPOCH_REASON, ObjectKeyFn, OpenBuffer, PartitionState

_BUFFER_OVERHEAD = 160  # JSON punctuation, field names and numbers of one buffer
_SEGMENT_OVERHEAD = 110  # numbers and punctuation of one segment reference, besides its name
_SEAL_OVERHEAD = 80  # reason and time of a sealed flush, besides its object key
_FINGERPRINT = 48
_ITEM_OVERHEAD = 700  # top-level attributes and their names


_NARROW = 10**19  # positions below this fit the overheads above (a JSON number of up to 19 digits)
_BASE36_DIGITS = 83  # a wide segment name's positions (tidemark.staging.store)


def _position_extra(position: int) -> int:
    """Characters a position takes in the body beyond what the overheads allow: a wide one (a
    Kinesis sequence number) is stored as a quoted decimal string."""
    return 0 if position < _NARROW else len(str(position)) + 2 - 19


# OPEN buffers outlive many accepts unchanged (an accept replaces only the buffers it appends
# to), so their bounds are remembered by identity: each accept measures what it changed.
_BOUNDS: dict[int, tuple[OpenBuffer, int]] = {}
_REMEMBERED = 128


def _buffer_bound(buffer: OpenBuffer) -> int:
    known = _BOUNDS.get(id(buffer))
    if known is not None and known[0] is buffer:
        return known[1]
    if len(_BOUNDS) >= _REMEMBERED:  # replaced buffers are kept alive here until the next clear
        _BOUNDS.clear()
    bound = _measure(buffer)
    _BOUNDS[id(buffer)] = (buffer, bound)
    return bound


def _measure(buffer: OpenBuffer) -> int:
    # the buffer key is written twice: as the map's key (or in a flush id) and in the buffer
    return (
        _BUFFER_OVERHEAD
        + len(buffer.spec)
        + 2 * len(str(buffer.key))
        + sum(
            len(segment.name) + _SEGMENT_OVERHEAD + _position_extra(segment.first) + _position_extra(segment.last)
            for segment in buffer.segments
        )
    )


def upper_bound(state: PartitionState) -> int:
    """At least the stored item's size: the uncompressed body plus the top-level attributes
    (zlib adds at most a few bytes to incompressible input)."""
    body = sum(_buffer_bound(buffer) for buffer in state.buffers.values())
    body += sum(_buffer_bound(f.buffer) + len(f.object_key) + _SEAL_OVERHEAD for f in state.sealed.values())
    body += sum(
        _buffer_bound(q.flush.buffer) + len(q.flush.object_key) + _SEAL_OVERHEAD + len(q.error) + 40
        for q in state.quarantined.values()
    )
    body += sum(_FINGERPRINT + _position_extra(offset) for offset, _crc in state.fingerprints)
    return int(body * 1.01) + 64 + _ITEM_OVERHEAD + len(state.stream) * 2 + len(state.source)


_SEGMENT_NAME = 96  # errors_<hour>_<first>-<last>_<created>_<nonce>.seg is 93 characters


class ItemBudget:
    def __init__(self, ledger: Ledger, budget_bytes: int, position_digits: int = 20) -> None:
        """``position_digits``: the widest position of the source (``SourceShape``), which sizes
        the segment references and fingerprints an accept adds before they exist."""
        self._ledger = ledger
        self.budget = budget_bytes
        self._bound: tuple[PartitionState, int] | None = None  # the last state's upper bound
        wide = position_digits > 19
        extra = position_digits + 2 - 19 if wide else 0
        self._segment = _SEGMENT_NAME + (2 * (_BASE36_DIGITS - 20) if wide else 0) + _SEGMENT_OVERHEAD + 2 * extra
        self._fingerprint = _FINGERPRINT + extra

    def _upper_bound(self, state: PartitionState) -> int:
        if self._bound is None or self._bound[0] is not state:
            self._bound = (state, upper_bound(state))
        return self._bound[1]

    def cheap_fits(
        self, state: PartitionState, *, segments: int, new_buffers: int, buffer_extra: int, key_bound: int
    ) -> bool:
        """Without building anything: would ``state`` plus an accept of ``segments`` new segment
        references (``new_buffers`` of them opening buffers, each with at most ``buffer_extra`` bytes
        of spec and partition-by folders), with every OPEN buffer then sealed, surely fit?
        ``False`` means: measure it (``fits_sealed``)."""
        grown = (
            self._upper_bound(state)
            + segments * self._segment
            + new_buffers * (_BUFFER_OVERHEAD + 2 * buffer_extra + 64)
            + (len(state.buffers) + new_buffers) * (key_bound + _SEAL_OVERHEAD)
            + 2 * self._fingerprint
        )
        return int(grown * 1.01) + 64 <= self.budget

    def fits(self, state: PartitionState) -> bool:
        return upper_bound(state) <= self.budget or self._ledger.item_size(state) <= self.budget

    def fits_sealed(self, state: PartitionState, object_key: ObjectKeyFn, key_bound: int) -> bool:
        """``state`` fits, and so would the state with every OPEN buffer sealed: an accept never
        leaves a state that cannot rotate. ``key_bound`` bounds the length of an object key (for
        the cheap check); ``object_key`` names them for the exact one."""
        if not state.buffers:
            return self.fits(state)
        if upper_bound(state) + len(state.buffers) * (key_bound + _SEAL_OVERHEAD) <= self.budget:
            return True
        sealed = state.seal(dict.fromkeys(state.buffers, EPOCH_REASON), object_key, 0)
        # Sealing only some of the buffers compresses a little differently: keep a margin.
        limit = self.budget - max(256, self.budget // 50)
        return self._ledger.item_size(state) <= limit and self._ledger.item_size(sealed) <= limit
