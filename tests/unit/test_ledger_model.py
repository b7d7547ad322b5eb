"""tidemark.ledger.model: the partition state machine as pure values and transitions."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from tidemark.buffers import BufferKey
from tidemark.exceptions import InvalidTransitionError, LedgerError
from tidemark.ledger.model import HourMark, OpenBuffer, PartitionState, SealedFlush
from tidemark.staging.store import SegmentRef

T0 = 1_763_712_000_000
RAW_08 = BufferKey("raw", "2025-11-21T08")
RAW_07 = BufferKey("raw", "2025-11-21T07")
ERR_08 = BufferKey("errors", "2025-11-21T08")


def seg(first: int, last: int, *, name: str | None = None, size: int = 100) -> SegmentRef:
    return SegmentRef(name or f"s{first}-{last}", last - first + 1, size, first, last)


def key_of(buffer: OpenBuffer) -> str:
    return f"key-{buffer.key.kind}-{buffer.key.hour}-{buffer.first}-{buffer.last}"


def test_new_state_is_empty() -> None:
    state = PartitionState("orders", 3)
    assert (state.version, state.staged_offset, state.next_seq, state.updated_ms) == (0, -1, 1, 0)
    assert dict(state.buffers) == {}
    assert dict(state.sealed) == {}
    assert state.referenced_segments() == set()


def test_accept_opens_buffers_per_kind_and_hour() -> None:
    state = PartitionState("orders", 3).accept(
        [(RAW_08, seg(0, 4)), (RAW_07, seg(5, 5)), (ERR_08, seg(6, 6))], staged_offset=6, now_ms=T0
    )
    assert state == PartitionState(
        "orders",
        3,
        version=1,
        staged_offset=6,
        next_seq=4,
        updated_ms=T0,
        first_accepted=0,
        buffers={
            "raw/2025-11-21T08": OpenBuffer(RAW_08, 1, T0, T0, (seg(0, 4),)),
            "raw/2025-11-21T07": OpenBuffer(RAW_07, 2, T0, T0, (seg(5, 5),)),
            "errors/2025-11-21T08": OpenBuffer(ERR_08, 3, T0, T0, (seg(6, 6),)),
        },
    )


def test_accept_appends_to_an_open_buffer_keeping_its_seq_and_opened_time() -> None:
    first = PartitionState("orders", 0).accept([(RAW_08, seg(0, 9))], 9, T0)
    second = first.accept([(RAW_08, seg(10, 19)), (RAW_08, seg(20, 24))], 24, T0 + 500)
    assert second.version == 2
    assert second.staged_offset == 24
    assert second.next_seq == 2
    assert second.updated_ms == T0 + 500
    assert dict(second.buffers) == {
        "raw/2025-11-21T08": OpenBuffer(RAW_08, 1, T0, T0 + 500, (seg(0, 9), seg(10, 19), seg(20, 24)))
    }
    buffer = second.buffers["raw/2025-11-21T08"]
    assert (buffer.records, buffer.size, buffer.first, buffer.last) == (25, 300, 0, 24)
    assert buffer.flush_id == "raw/2025-11-21T08#1"


def test_accept_with_no_segments_only_advances_the_offset() -> None:
    # A batch made only of duplicates or skipped offsets still moves the staged offset.
    state = PartitionState("orders", 0).accept([], 41, T0)
    assert (state.version, state.staged_offset, state.next_seq, dict(state.buffers)) == (1, 41, 1, {})


def test_transitions_return_new_states_and_leave_the_old_one_alone() -> None:
    empty = PartitionState("orders", 0)
    accepted = empty.accept([(RAW_08, seg(0, 0))], 0, T0)
    assert empty == PartitionState("orders", 0)
    assert isinstance(accepted.buffers, MappingProxyType)
    with pytest.raises(TypeError):
        accepted.buffers["x"] = accepted.buffers["raw/2025-11-21T08"]  # type: ignore[index]


@pytest.mark.parametrize("staged_offset", [9, 5, -1])
def test_staged_offset_must_grow(staged_offset: int) -> None:
    state = PartitionState("orders", 0).accept([(RAW_08, seg(0, 9))], 9, T0)
    with pytest.raises(InvalidTransitionError, match=rf"^staged offset must grow: {staged_offset} <= 9$"):
        state.accept([], staged_offset, T0)


@pytest.mark.parametrize(
    ("segment", "staged_offset"),
    [
        (seg(9, 12), 12),  # starts at an offset already staged
        (seg(5, 15), 15),
        (seg(10, 13), 12),  # ends past the new staged offset
        (seg(13, 14), 12),
    ],
)
def test_segment_outside_the_new_range_is_refused(segment: SegmentRef, staged_offset: int) -> None:
    state = PartitionState("orders", 0).accept([(RAW_08, seg(0, 9))], 9, T0)
    with pytest.raises(InvalidTransitionError) as caught:
        state.accept([(RAW_08, segment)], staged_offset, T0 + 1)
    assert str(caught.value) == (
        f"segment {segment.name} ({segment.first}..{segment.last}) outside (9, {staged_offset}]"
    )


def test_seal_freezes_buffers_with_their_object_keys() -> None:
    state = PartitionState("orders", 3).accept([(RAW_08, seg(0, 4)), (ERR_08, seg(5, 5))], 5, T0)
    sealed = state.seal({"raw/2025-11-21T08": "max_records"}, key_of, T0 + 10)
    raw_buffer = OpenBuffer(RAW_08, 1, T0, T0, (seg(0, 4),))
    assert sealed == PartitionState(
        "orders",
        3,
        version=2,
        staged_offset=5,
        next_seq=3,
        updated_ms=T0 + 10,
        first_accepted=0,
        buffers={"errors/2025-11-21T08": OpenBuffer(ERR_08, 2, T0, T0, (seg(5, 5),))},
        sealed={"raw/2025-11-21T08#1": SealedFlush(raw_buffer, "key-raw-2025-11-21T08-0-4", "max_records", T0 + 10)},
    )
    assert sealed.sealed["raw/2025-11-21T08#1"].flush_id == "raw/2025-11-21T08#1"


def test_seal_several_buffers_at_once() -> None:
    state = PartitionState("orders", 3).accept([(RAW_08, seg(0, 4)), (ERR_08, seg(5, 5))], 5, T0)
    sealed = state.seal({"raw/2025-11-21T08": "max_age", "errors/2025-11-21T08": "max_open_buffers"}, key_of, T0)
    assert dict(sealed.buffers) == {}
    assert {fid: (f.reason, f.object_key) for fid, f in sealed.sealed.items()} == {
        "raw/2025-11-21T08#1": ("max_age", "key-raw-2025-11-21T08-0-4"),
        "errors/2025-11-21T08#2": ("max_open_buffers", "key-errors-2025-11-21T08-5-5"),
    }


def test_sealing_nothing_is_invalid() -> None:
    with pytest.raises(InvalidTransitionError, match=r"^nothing to seal$"):
        PartitionState("orders", 0).seal({}, key_of, T0)


def test_sealing_a_buffer_that_is_not_open_is_invalid() -> None:
    state = PartitionState("orders", 0).accept([(RAW_08, seg(0, 0))], 0, T0)
    with pytest.raises(InvalidTransitionError, match=r"^buffer raw/2025-11-21T07 is not open$"):
        state.seal({"raw/2025-11-21T07": "max_age"}, key_of, T0)
    sealed = state.seal({"raw/2025-11-21T08": "max_age"}, key_of, T0)
    with pytest.raises(InvalidTransitionError, match=r"^buffer raw/2025-11-21T08 is not open$"):
        sealed.seal({"raw/2025-11-21T08": "max_age"}, key_of, T0)


def test_a_failed_seal_changes_nothing() -> None:
    state = PartitionState("orders", 0).accept([(RAW_08, seg(0, 0))], 0, T0)
    with pytest.raises(InvalidTransitionError):
        state.seal({"raw/2025-11-21T08": "max_age", "raw/2025-11-21T07": "max_age"}, key_of, T0)
    assert list(state.buffers) == ["raw/2025-11-21T08"]
    assert dict(state.sealed) == {}
    assert state.version == 1


def test_new_buffer_for_an_hour_whose_previous_buffer_is_sealed_gets_a_new_seq() -> None:
    state = PartitionState("orders", 0).accept([(RAW_08, seg(0, 9))], 9, T0)
    state = state.seal({"raw/2025-11-21T08": "max_records"}, key_of, T0 + 1)
    state = state.accept([(RAW_08, seg(10, 14))], 14, T0 + 2)
    assert dict(state.buffers) == {"raw/2025-11-21T08": OpenBuffer(RAW_08, 2, T0 + 2, T0 + 2, (seg(10, 14),))}
    assert list(state.sealed) == ["raw/2025-11-21T08#1"]
    assert state.sealed["raw/2025-11-21T08#1"].buffer.segments == (seg(0, 9),)
    assert state.next_seq == 3
    assert state.version == 3
    # both flushes of the same hour can be sealed side by side
    state = state.seal({"raw/2025-11-21T08": "max_age"}, key_of, T0 + 3)
    assert sorted(state.sealed) == ["raw/2025-11-21T08#1", "raw/2025-11-21T08#2"]


def test_commit_forgets_the_sealed_flush() -> None:
    state = PartitionState("orders", 0).accept([(RAW_08, seg(0, 9)), (RAW_07, seg(10, 10))], 10, T0)
    state = state.seal({"raw/2025-11-21T08": "max_records", "raw/2025-11-21T07": "max_age"}, key_of, T0 + 1)
    committed = state.commit("raw/2025-11-21T08#1", T0 + 2)
    assert committed == PartitionState(
        "orders",
        0,
        version=state.version + 1,
        staged_offset=10,
        next_seq=3,
        updated_ms=T0 + 2,
        first_accepted=0,
        buffers={},
        sealed={"raw/2025-11-21T07#2": state.sealed["raw/2025-11-21T07#2"]},
    )


@pytest.mark.parametrize("flush_id", ["raw/2025-11-21T08#1", "raw/2025-11-21T08#2", "nonsense"])
def test_committing_a_flush_that_is_not_sealed_is_invalid(flush_id: str) -> None:
    open_only = PartitionState("orders", 0).accept([(RAW_08, seg(0, 9))], 9, T0)
    with pytest.raises(InvalidTransitionError, match=f"^flush {flush_id} is not sealed$"):
        open_only.commit(flush_id, T0)


def test_committing_twice_is_invalid() -> None:
    state = PartitionState("orders", 0).accept([(RAW_08, seg(0, 9))], 9, T0)
    state = state.seal({"raw/2025-11-21T08": "max_records"}, key_of, T0).commit("raw/2025-11-21T08#1", T0)
    with pytest.raises(InvalidTransitionError):
        state.commit("raw/2025-11-21T08#1", T0)
    assert isinstance(InvalidTransitionError("x"), LedgerError)


def test_referenced_segments_cover_open_and_sealed_buffers_until_commit() -> None:
    state = PartitionState("orders", 0).accept(
        [(RAW_08, seg(0, 4, name="a.seg")), (RAW_07, seg(5, 5, name="b.seg"))], 5, T0
    )
    state = state.accept([(RAW_08, seg(6, 8, name="c.seg"))], 8, T0)
    assert state.referenced_segments() == {"a.seg", "b.seg", "c.seg"}
    state = state.seal({"raw/2025-11-21T08": "max_records"}, key_of, T0)
    assert state.referenced_segments() == {"a.seg", "b.seg", "c.seg"}
    state = state.accept([(RAW_08, seg(9, 9, name="d.seg"))], 9, T0)
    assert state.referenced_segments() == {"a.seg", "b.seg", "c.seg", "d.seg"}
    state = state.commit("raw/2025-11-21T08#1", T0)
    assert state.referenced_segments() == {"b.seg", "d.seg"}


def test_versions_increase_by_one_per_transition() -> None:
    state = PartitionState("orders", 0)
    versions = [state.version]
    state = state.accept([(RAW_08, seg(0, 0))], 0, T0)
    versions.append(state.version)
    state = state.seal({"raw/2025-11-21T08": "max_age"}, key_of, T0)
    versions.append(state.version)
    state = state.commit("raw/2025-11-21T08#1", T0)
    versions.append(state.version)
    assert versions == [0, 1, 2, 3]


def test_quarantine_sets_a_sealed_flush_aside_and_keeps_its_segments_referenced() -> None:
    state = PartitionState("orders", 0).accept([(RAW_08, seg(0, 9, name="a.seg"))], 9, T0)
    state = state.seal({"raw/2025-11-21T08": "max_age"}, key_of, T0 + 1)
    (flush_id,) = state.sealed
    held = state.quarantine(flush_id, "checksum mismatch in a.seg", T0 + 2)
    assert (held.version, dict(held.sealed)) == (state.version + 1, {})
    assert held.quarantined[flush_id].flush == state.sealed[flush_id]
    assert (held.quarantined[flush_id].error, held.quarantined[flush_id].quarantined_ms) == (
        "checksum mismatch in a.seg",
        T0 + 2,
    )
    assert held.referenced_segments() == {"a.seg"}  # garbage collection keeps the evidence
    with pytest.raises(InvalidTransitionError):
        held.quarantine(flush_id, "again", T0 + 3)
    with pytest.raises(InvalidTransitionError):
        held.commit(flush_id, T0 + 3)
    with pytest.raises(InvalidTransitionError, match="not quarantined"):
        state.rearchived(flush_id, T0 + 3)  # a SEALED flush is committed, never "rearchived"
    rearchived = held.rearchived(flush_id, T0 + 4)  # tidemark rearchive: its object is in S3 now
    assert (rearchived.version, dict(rearchived.quarantined), rearchived.updated_ms) == (held.version + 1, {}, T0 + 4)
    assert rearchived.referenced_segments() == set() and not rearchived.holds_hour("2025-11-21T08")


def test_a_buffer_is_only_appended_to_under_the_format_it_was_opened_with() -> None:
    state = PartitionState("orders", 0).accept([(RAW_08, seg(0, 9))], 9, T0, "jsonl|gzip|6|orders|text|json|text")
    with pytest.raises(InvalidTransitionError, match="another format"):
        state.accept([(RAW_08, seg(10, 19))], 19, T0 + 1, "jsonl|none|6|orders|text|json|text")
    later = state.accept([(RAW_08, seg(10, 19))], 19, T0 + 1, "jsonl|gzip|6|orders|text|json|text")
    assert len(later.buffers["raw/2025-11-21T08"].segments) == 2


def test_watermark_is_the_latest_event_time_and_never_moves_back() -> None:
    state = PartitionState("orders", 0)
    assert state.watermark_ms == -1
    state = state.accept([(RAW_08, seg(0, 9))], 9, T0, event_ms=T0 - 100)
    state = state.accept([(RAW_07, seg(10, 19))], 19, T0 + 1, event_ms=T0 - 3_600_000)  # a late batch
    assert state.watermark_ms == T0 - 100
    state = state.accept([(RAW_08, seg(20, 29))], 29, T0 + 2)  # dead letters only: no event time
    assert state.watermark_ms == T0 - 100


def test_holds_hour_and_idle_see_open_and_sealed_buffers() -> None:
    state = PartitionState("orders", 0).accept([(RAW_08, seg(0, 9)), (RAW_07, seg(10, 19))], 19, T0)
    assert state.holds_hour("2025-11-21T08") and state.holds_hour("2025-11-21T07") and not state.idle
    state = state.seal({str(RAW_07): "max_age"}, lambda b: f"key-{b.seq}", T0 + 1)
    assert state.holds_hour("2025-11-21T07")  # sealed, not yet committed
    flush_id = next(iter(state.sealed))
    state = state.commit(flush_id, T0 + 2)
    assert not state.holds_hour("2025-11-21T07") and state.holds_hour("2025-11-21T08")
    state = state.seal({str(RAW_08): "max_age"}, lambda b: f"key-{b.seq}", T0 + 3)
    state = state.commit(next(iter(state.sealed)), T0 + 4)
    assert state.idle and not state.holds_hour("2025-11-21T08")


@pytest.mark.parametrize(
    ("commits", "manifest", "complete", "reopened"),
    [(0, 0, False, False), (3, 0, False, False), (3, 3, True, False), (4, 3, False, True)],
)
def test_hour_mark_states(commits: int, manifest: int, complete: bool, reopened: bool) -> None:
    mark = HourMark("orders", "2025-11-21T08", commits=commits, manifest_commits=manifest)
    assert (mark.complete, mark.reopened) == (complete, reopened)


def test_the_first_accept_of_epoch_0_keeps_where_the_archive_begins() -> None:
    """``first_accepted``: the lowest position of the first accept that staged a segment, in
    epoch 0 only, never moved after (the audit tiles epoch 0 from it); -1 until then."""
    nothing = PartitionState("orders", 0).accept([], 41, T0)
    assert nothing.first_accepted == -1  # no record staged: the archive has not begun
    state = nothing.accept([(RAW_08, seg(50, 59)), (RAW_07, seg(42, 49))], 59, T0)
    assert state.first_accepted == 42
    state = state.accept([(RAW_08, seg(60, 69))], 69, T0)
    started, _record = state.start_epoch(0, "", "topic recreated", key_of, T0)
    assert started.first_accepted == 42  # epoch 0's, kept: a later epoch begins at its EpochStart
    assert started.accept([(RAW_08, seg(0, 9))], 9, T0).first_accepted == 42
    fresh, _record = PartitionState("orders", 0).start_epoch(5, "", "moved", key_of, T0)
    assert fresh.accept([(RAW_08, seg(5, 9))], 9, T0).first_accepted == -1  # epoch 0 accepted nothing
    unknown = replace(state, first_accepted=None)  # a state item written before it was kept
    assert unknown.accept([(RAW_08, seg(70, 79))], 79, T0).first_accepted is None
