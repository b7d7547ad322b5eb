"""Position epochs, reset detection and the ledger item bound: the pure parts (no I/O)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tidemark.buffers import BufferKey
from tidemark.exceptions import InvalidTransitionError, PositionResetError
from tidemark.ledger.dynamodb import (
    DynamoDBLedger,
    _deserialize,
    _serialize,
    epoch_from_item,
    epoch_to_item,
    item_size,
    object_from_item,
    object_to_item,
    state_from_item,
    state_to_item,
)
from tidemark.ledger.model import FINGERPRINT_WINDOW, CommittedObject, OpenBuffer, PartitionState
from tidemark.objects.keys import epoch_of_key, object_key
from tidemark.records.kafka import source_identity
from tidemark.records.model import Record
from tidemark.resets import (
    BELOW_WINDOW,
    BYTES_DIFFER,
    MARK_GRID,
    SOURCE_CHANGED,
    check_positions,
    fingerprint,
    marks_of,
)
from tidemark.staging.store import SegmentRef, SegmentStore
from tidemark.writer.budget import ItemBudget, upper_bound

T0 = 1_763_712_000_000
HOUR = BufferKey("raw", "2025-11-21T08")
SOURCE = "tidemark-demo/4f3e/orders"


def record(offset: int, value: bytes = b"{}", timestamp: int = T0) -> Record:
    return Record("orders", 0, offset, timestamp, value, b"k")


def seg(first: int, last: int) -> SegmentRef:
    return SegmentStore.planned_ref(HOUR, first, last, last - first + 1, 100, T0)


def key_of(buffer: OpenBuffer) -> str:
    return object_key("raw", "orders", buffer.key.hour, 0, buffer.first, buffer.last, "jsonl.gz")


def staged(*batches: tuple[int, int]) -> PartitionState:
    """A state that accepted these (first, last) batches from SOURCE, fingerprinting as the writer does."""
    state = PartitionState("orders", 0)
    for first, last in batches:
        marks = [(offset, fingerprint(record(offset))) for offset in sorted({first, last})]
        state = state.accept([(HOUR, seg(first, last))], last, T0, source=SOURCE, fingerprints=marks)
    return state


# -- keys -------------------------------------------------------------------------------------


def test_epoch_zero_keys_keep_their_form_and_later_epochs_add_one_part():
    plain = object_key("raw", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz")
    later = object_key("raw", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz", epoch=2)
    assert plain == "raw/orders/2026/11/21/07/orders+3+00000000000000000100-00000000000000000199.jsonl.gz"
    assert later == "raw/orders/2026/11/21/07/orders+3+e2+00000000000000000100-00000000000000000199.jsonl.gz"
    assert (epoch_of_key(plain), epoch_of_key(later)) == (0, 2)


# -- detection ----------------------------------------------------------------------------------


def test_a_redelivery_inside_the_window_passes():
    state = staged((0, 9), (10, 19), (20, 29))
    check_positions(state, [record(offset) for offset in range(5, 35)], SOURCE)


@pytest.mark.parametrize(
    ("records", "source", "kind"),
    [
        ([record(5)], "other-cluster/uuid/orders", SOURCE_CHANGED),
        ([record(10, b'{"other": 1}')], SOURCE, BYTES_DIFFER),  # 10 is fingerprinted
        ([record(10, timestamp=T0 + 1)], SOURCE, BYTES_DIFFER),  # same bytes, produced again
    ],
)
def test_what_no_redelivery_explains_is_refused(records, source, kind):
    state = staged((0, 9), (10, 19), (20, 29))
    with pytest.raises(PositionResetError) as refused:
        check_positions(state, records, source)
    assert refused.value.kind == kind


def test_a_record_older_than_the_window_is_refused():
    state = staged(*[(n * 10, n * 10 + 9) for n in range(40)])  # 40 accepts, the window keeps 32
    assert len(state.fingerprints) == FINGERPRINT_WINDOW
    window_start = state.fingerprints[0][0]
    assert window_start == 80
    check_positions(state, [record(window_start)], SOURCE)
    with pytest.raises(PositionResetError) as refused:
        check_positions(state, [record(window_start - 1)], SOURCE)
    assert refused.value.kind == BELOW_WINDOW


class Marks:
    """The ledger's marks of an epoch, as ``check_positions`` looks them up (and how often):
    ``records`` marked as one accept, or ``accepts`` each marked as its own."""

    def __init__(self, records: list[Record] = (), accepts: list[list[Record]] = ()) -> None:  # type: ignore[assignment]
        self.kept: dict[int, frozenset[int]] = {}
        for accepted in [list(records), *accepts]:
            for offset, crc in marks_of(accepted):
                self.kept[offset] = self.kept.get(offset, frozenset()) | {crc}
        self.lookups = 0

    def __call__(self, offsets):
        self.lookups += 1
        return {offset: self.kept[offset] for offset in offsets if offset in self.kept}


def test_a_redelivery_from_far_below_the_window_is_told_by_the_marks():
    """The group's offsets expired: the mapping starts again at TRIM_HORIZON, 300 offsets back."""
    state = staged(*[(n * 10, n * 10 + 9) for n in range(40)])  # window 80..399
    marks = Marks([record(offset) for offset in range(400)])
    check_positions(state, [record(offset) for offset in range(0, 25)], SOURCE, marks=marks)  # marks 0, 16
    check_positions(state, [record(offset) for offset in range(60, 100)], SOURCE, marks=marks)  # 64 (and the window)
    with pytest.raises(PositionResetError) as refused:  # another log at those offsets: refused by its bytes
        check_positions(state, [record(offset, b'{"new": 1}') for offset in range(0, 25)], SOURCE, marks=marks)
    assert (refused.value.kind, refused.value.offset) == (BYTES_DIFFER, 0)


def test_below_the_window_with_nothing_to_compare_is_refused():
    state = staged(*[(n * 10, n * 10 + 9) for n in range(40)])
    marks = Marks([record(offset) for offset in range(400)])
    for batch, lookups in ([record(offset) for offset in range(1, MARK_GRID)], 1), ([record(32)], 1):
        unmarked = Marks([]) if lookups else marks  # no marked offset; a marked one the ledger never kept
        with pytest.raises(PositionResetError) as refused:
            check_positions(state, batch, SOURCE, marks=unmarked)
        assert refused.value.kind == BELOW_WINDOW
        assert unmarked.lookups == lookups
    with pytest.raises(PositionResetError):
        check_positions(state, [record(32)], SOURCE)  # no marks at all (a caller without a ledger)


def test_marks_are_read_only_for_a_batch_from_below_the_window():
    state = staged(*[(n * 10, n * 10 + 9) for n in range(40)])
    marks = Marks([record(offset) for offset in range(400)])
    check_positions(state, [record(offset) for offset in range(90, 500)], SOURCE, marks=marks)
    assert marks.lookups == 0


#: an unchanged log's accepts: sizes as the mapping's batches came, then a replay of any slice
accepts = st.lists(st.integers(1, 40), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(sizes=accepts, start=st.integers(0, 2000), length=st.integers(1, 120), other_log=st.booleans())
def test_a_replay_is_dropped_only_when_it_is_the_archived_log(sizes, start, length, other_log):
    """Whatever the accepts and the replayed slice: a record below the window is let through only
    in a batch of the archived log; a slice holding a whole run of MARK_GRID offsets always passes;
    any batch of another log that reaches below the window is refused."""
    bounds, first = [], 0
    for size in sizes:
        bounds.append((first, first + size - 1))
        first += size
    state = staged(*bounds)
    staged_offset, window_start = state.staged_offset, state.fingerprints[0][0]
    marks = Marks(accepts=[[record(offset) for offset in range(low, high + 1)] for low, high in bounds])
    start = min(start, staged_offset)
    batch = [record(offset, b'{"other": 1}' if other_log else b"{}") for offset in range(start, start + length)]
    below = [r for r in batch if r.offset < window_start]
    try:
        check_positions(state, batch, SOURCE, marks=marks)
    except PositionResetError as refused:
        # the archived log is refused only by a batch holding no whole run of MARK_GRID offsets
        assert other_log or (refused.kind == BELOW_WINDOW and len(below) < 2 * MARK_GRID - 1)
    else:
        assert not (other_log and below), "a record of another log below the window was let through"


def test_a_state_without_fingerprints_drops_old_offsets_as_before():
    legacy = replace(staged((0, 99)), fingerprints=(), source="")
    check_positions(legacy, [record(0), record(50)], SOURCE)  # nothing to compare: duplicates


def test_source_identity_names_the_msk_cluster_and_not_self_managed_brokers():
    arn = "arn:aws:kafka:us-east-1:123456789012:cluster/tidemark-demo/4f3e2d1c-1"
    assert source_identity({"eventSourceArn": arn}, "orders") == "tidemark-demo/4f3e2d1c-1/orders"
    assert source_identity({"bootstrapServers": "a:9092,b:9092"}, "orders") == "/orders"


# -- transitions and items ---------------------------------------------------------------------


def test_start_epoch_seals_open_buffers_under_the_old_keys_and_resets_the_window():
    state = staged((0, 9), (10, 19))
    started, record_ = state.start_epoch(5, "", "topic recreated", key_of, T0 + 1)
    assert (started.epoch, started.staged_offset, started.fingerprints, started.buffers) == (1, 4, (), {})
    [flush] = started.sealed.values()
    assert (flush.reason, flush.object_key) == ("epoch", key_of(state.buffers["raw/2025-11-21T08"]))
    assert started.version == state.version + 1
    assert (record_.epoch, record_.first_offset, record_.previous_staged_offset, record_.previous_source) == (
        1,
        5,
        19,
        SOURCE,
    )
    with pytest.raises(InvalidTransitionError):
        state.start_epoch(-1, "", "", key_of, T0)


def test_accept_refuses_another_source_and_adopts_one_when_it_has_none():
    state = staged((0, 9))
    with pytest.raises(InvalidTransitionError):
        state.accept([(HOUR, seg(10, 10))], 10, T0, source="else/orders")
    fresh = replace(state, source="")
    assert fresh.accept([(HOUR, seg(10, 10))], 10, T0, source="else/orders").source == "else/orders"


def test_epoch_state_objects_and_starts_survive_the_item_mapping():
    state = staged((0, 9), (10, 19))
    started, start = state.start_epoch(3, "b/orders", "migrated", key_of, T0)
    assert state_from_item(_deserialize(_serialize(state_to_item(started)))) == started
    assert epoch_from_item(_deserialize(_serialize(epoch_to_item("orders", 0, start)))) == start
    committed = CommittedObject("orders", 0, "raw", "2025-11-21T08", "k", 3, 9, 7, 10, "a" * 64, T0, 1, "c" * 64)
    item = object_to_item(committed)
    assert item["sk"] == "OBJ#raw#00000#e0001#00000000000000000003"
    assert object_from_item(item) == committed
    assert object_to_item(replace(committed, epoch=0))["sk"] == "OBJ#raw#00000#00000000000000000003"


#: a Kinesis shard's positions: 56-digit sequence numbers with wide gaps (stored as strings)
WIDE_START, WIDE_GAP = 49590338271490256608559692538361571095921575989136588898, 10**25


@settings(max_examples=40, deadline=None)
@given(hours=st.integers(1, 300), segments=st.integers(1, 4), seed=st.integers(0, 1000), wide=st.booleans())
def test_the_cheap_bound_never_underestimates_the_item(hours, segments, seed, wide):
    rng = random.Random(seed)
    state = PartitionState("orders", "shardId-000000000001" if wide else 0)
    offset, gap = (WIDE_START, WIDE_GAP) if wide else (0, 10**6)
    for hour in range(hours):
        key = BufferKey(rng.choice(["raw", "errors"]), f"2025-{1 + hour % 12:02d}-{1 + hour % 28:02d}T{hour % 24:02d}")
        for _ in range(segments):
            last = offset + rng.randint(0, gap)
            fingerprints = [(offset, 2**32 - 1), (last, 2**32 - 1)]
            state = state.accept(
                [(key, SegmentStore.planned_ref(key, offset, last, 3, 999, T0))], last, T0, fingerprints=fingerprints
            )
            offset = last + 1

    def wide_key_of(buffer: OpenBuffer) -> str:
        shard = "shardId-000000000001"
        return object_key("raw", "orders", buffer.key.hour, shard, buffer.first, buffer.last, "jsonl.gz", digits=129)

    sealed = state.seal(
        dict.fromkeys(list(state.buffers)[: hours // 2 or 1], "max_age"), wide_key_of if wide else key_of, T0
    )
    for candidate in (state, sealed):
        assert upper_bound(candidate) >= item_size(state_to_item(candidate))


class _SizingLedger(DynamoDBLedger):
    """Only ``item_size`` is used here: no client, no I/O."""

    def __init__(self) -> None:
        pass


@settings(max_examples=60, deadline=None)
@given(
    existing=st.integers(0, 60),
    new_hours=st.integers(1, 60),
    budget_kib=st.integers(4, 64),
    seed=st.integers(0, 1000),
    wide=st.booleans(),
)
def test_an_accept_the_cheap_check_lets_through_always_fits_sealed(existing, new_hours, budget_kib, seed, wide):
    rng = random.Random(seed)
    digits = 129 if wide else 20
    budget = ItemBudget(_SizingLedger(), budget_kib * 1024, position_digits=digits)
    spec = "jsonl|gzip|6|orders|text|json|text" + ("|||kinesis" if wide else "")
    state = PartitionState("orders", "shardId-000000000001" if wide else 0)
    offset = WIDE_START if wide else 0

    def key(hour: int) -> BufferKey:
        return BufferKey(rng.choice(["raw", "errors"]), f"2025-01-{1 + hour // 24:02d}T{hour % 24:02d}")

    for hour in range(existing):
        last = offset + rng.randint(0, 10**9)
        state = state.accept([(key(hour), SegmentStore.planned_ref(key(hour), offset, last, 1, 9, T0))], last, T0, spec)
        offset = last + 1
    planned = []
    for hour in range(existing, existing + new_hours):
        last = offset + rng.randint(0, 10**9)
        planned.append((key(hour), SegmentStore.planned_ref(key(hour), offset, last, 1, 9, T0)))
        offset = last + 1
    opened = len({str(k) for k, _ref in planned} - set(state.buffers))
    key_bound = 120 + 2 * (digits - 20)
    if budget.cheap_fits(state, segments=len(planned), new_buffers=opened, buffer_extra=len(spec), key_bound=key_bound):
        accepted = state.accept(planned, offset - 1, T0, spec, fingerprints=[(1, 2**32 - 1), (offset, 2**32 - 1)])
        sealed = accepted.seal(dict.fromkeys(accepted.buffers, "max_age"), lambda b: "k" * key_bound, T0)
        assert item_size(state_to_item(sealed)) <= budget.budget


@settings(max_examples=150, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 6), min_size=300, max_size=400),
    size=st.integers(1, 6),
    start=st.integers(0, 150),
    length=st.integers(1, 60),
)
def test_a_log_with_gaps_in_its_offsets_stays_marked(gaps, size, start, length):
    """A transactional topic's commit markers (or compaction) take offsets the archiver never sees:
    an accept marks the first record it has in each run of MARK_GRID offsets, so a replay from
    below the fingerprint window holding a whole run is still told, whichever offsets the log
    lacks; one holding none may be refused, never let through as another log."""
    offsets, offset = [], 0
    for gap in gaps:
        offsets.append(offset)
        offset += gap
    accepts = [offsets[i : i + size] for i in range(0, len(offsets), size)]
    state = staged(*[(accepted[0], accepted[-1]) for accepted in accepts])
    marks = Marks(accepts=[[record(o) for o in accepted] for accepted in accepts])
    replay = offsets[start : start + length]
    assume(replay[0] < state.fingerprints[0][0])  # from below the window
    runs = {o // MARK_GRID for o in replay}
    present = {o // MARK_GRID for o in offsets}
    whole = any(run in present and {o for o in offsets if o // MARK_GRID == run} <= set(replay) for run in runs)
    try:
        check_positions(state, [record(o) for o in replay], SOURCE, marks=marks)
    except PositionResetError as refused:
        assert refused.kind == BELOW_WINDOW and not whole, (replay, refused)
