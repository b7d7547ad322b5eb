"""How ``tidemark recover`` cuts the withheld records into units, against a plain reference on
generated inputs: the greedy cut recomputed from scratch at every record, and each unit's ranges
as the missing positions between its first and last record."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.buffers import ERRORS_KIND, RAW_KIND, BufferKey
from tidemark.ledger.dynamodb import _deserialize, _serialize, recovery_from_item, recovery_to_item
from tidemark.ledger.model import Recovery, RecoveryUnit
from tidemark.records.model import Record
from tidemark.recover.plan import Limits, PlannedUnit, Withheld, clip, cut, size_of
from tidemark.routing import Routed

BUFFERS = [BufferKey(RAW_KIND, f"2026-11-21T{hour:02d}") for hour in range(6)] + [
    BufferKey(ERRORS_KIND, "2026-11-21T00")
]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[Withheld], Limits]:
    """Disjoint sorted missing ranges, records at some of their positions, and small limits."""
    missing: list[tuple[int, int]] = []
    position = draw(st.integers(0, 5))
    for _ in range(draw(st.integers(0, 12))):
        length = draw(st.integers(1, 6))
        missing.append((position, position + length - 1))
        position += length + draw(st.integers(1, 4))
    withheld = []
    for first, last in missing:
        for offset in range(first, last + 1):
            if draw(st.booleans()):
                value = b"x" * draw(st.integers(0, 40))
                record = Record("t", 0, offset, 1_000, value, b"k")
                withheld.append(Withheld(record, Routed(draw(st.sampled_from(BUFFERS)), "")))
    limits = Limits(
        objects=draw(st.integers(1, 4)),
        records=draw(st.integers(1, 8)),
        bytes=draw(st.integers(1, 200)),
        ranges=draw(st.integers(1, 4)),
    )
    return missing, withheld, limits


def fits(missing: list[tuple[int, int]], items: list[Withheld], limits: Limits) -> bool:
    """The reference: may these records be one unit? (One record always may.)"""
    if len(items) == 1:
        return True
    return (
        len({item.routed.buffer for item in items}) <= limits.objects
        and len(items) <= limits.records
        and sum(size_of(item.record) for item in items) <= limits.bytes
        and len(clip(missing, items[0].record.offset, items[-1].record.offset)) <= limits.ranges
    )


def reference_cut(missing: list[tuple[int, int]], withheld: list[Withheld], limits: Limits) -> list[list[Withheld]]:
    units: list[list[Withheld]] = []
    current: list[Withheld] = []
    for item in withheld:
        if current and not fits(missing, [*current, item], limits):
            units.append(current)
            current = []
        current.append(item)
    if current:
        units.append(current)
    return units


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_units_are_the_greedy_cut_and_their_ranges_read_back_exactly_their_records(scenario):
    missing, withheld, limits = scenario
    units = cut(missing, withheld, limits)
    assert [list(unit.records) for unit in units] == reference_cut(missing, withheld, limits)
    held = {item.record.offset for item in withheld}
    for unit in units:
        first, last = unit.records[0].record.offset, unit.records[-1].record.offset
        in_ranges = {offset for lo, hi in unit.ranges for offset in range(lo, hi + 1)}
        # the ranges cover exactly the missing positions from its first record to its last ...
        assert in_ranges == {offset for lo, hi in missing for offset in range(lo, hi + 1) if first <= offset <= last}
        # ... so reading the log over them again gives exactly its records
        assert sorted(in_ranges & held) == [item.record.offset for item in unit.records]
    for earlier, later in pairwise(units):
        assert earlier.ranges[-1][1] < later.ranges[0][0]


def test_a_unit_groups_its_records_by_the_object_they_go_to_in_first_seen_order():
    records = [Withheld(Record("t", 0, n, 1, b"v"), Routed(BUFFERS[n % 2], "")) for n in range(5)]
    unit = PlannedUnit(((0, 4),), tuple(records))
    assert list(unit.buffers) == [BUFFERS[0], BUFFERS[1]]
    assert [item.record.offset for item in unit.buffers[BUFFERS[0]]] == [0, 2, 4]


def test_a_recovery_item_reads_back_as_written():
    unit = RecoveryUnit(2, ((3, 3), (17, 19)), (("raw/orders/a", 3), ("errors/orders/b", 1)), 1_795_248_000_000)
    for recovery in (Recovery("orders", 4, 7, unit), Recovery("orders", "shardId-0", 1, None)):
        assert recovery_from_item(_deserialize(_serialize(recovery_to_item(recovery)))) == recovery  # as stored
    assert unit.records == 4
