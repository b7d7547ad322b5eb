"""tidemark.flush: the rotation rules and the max_open_buffers guard."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tidemark.buffers import BufferKey
from tidemark.config.model import FlushPolicyConfig
from tidemark.flush import MAX_AGE, MAX_BYTES, MAX_OPEN_BUFFERS, MAX_RECORDS, MAX_SEGMENTS, FlushPolicy
from tidemark.ledger.model import OpenBuffer
from tidemark.staging.store import SegmentRef

T0 = 1_763_712_000_000  # 2025-11-21T08:00:00Z
MINUTE = 60_000


def policy(**limits: Any) -> FlushPolicy:
    return FlushPolicy(FlushPolicyConfig(**limits))


def buffer(
    hour: str = "2025-11-21T08",
    *,
    kind: str = "raw",
    seq: int = 1,
    opened_ms: int = T0,
    appended_ms: int | None = None,
    segments: list[tuple[int, int]] | None = None,
) -> OpenBuffer:
    """A buffer whose segments are given as (records, size) pairs with consecutive offsets."""
    refs = []
    offset = 0
    for index, (records, size) in enumerate(segments or [(1, 100)]):
        refs.append(SegmentRef(f"seg-{seq}-{index}", records, size, offset, offset + records - 1))
        offset += records
    return OpenBuffer(
        BufferKey(kind, hour), seq, opened_ms, opened_ms if appended_ms is None else appended_ms, tuple(refs)
    )


def keyed(*buffers: OpenBuffer) -> dict[str, OpenBuffer]:
    return {str(b.key): b for b in buffers}


# -- each rule on its own -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("segments", "expected"),
    [([(9, 10)], None), ([(10, 10)], MAX_RECORDS), ([(4, 1), (5, 1)], None), ([(4, 1), (6, 1)], MAX_RECORDS)],
)
def test_max_records(segments: list[tuple[int, int]], expected: str | None) -> None:
    assert policy(max_records=10).reason(buffer(segments=segments), T0) == expected


@pytest.mark.parametrize(
    ("segments", "expected"),
    [
        ([(1, 2047)], None),
        ([(1, 2048)], MAX_BYTES),
        ([(1, 1024), (1, 1023)], None),
        ([(1, 1024), (1, 1024)], MAX_BYTES),
        ([(1, 5000)], MAX_BYTES),
    ],
)
def test_max_bytes(segments: list[tuple[int, int]], expected: str | None) -> None:
    assert policy(max_bytes="2KiB").reason(buffer(segments=segments), T0) == expected


@pytest.mark.parametrize(
    ("now", "expected"),
    [(T0, None), (T0 + 15 * MINUTE - 1, None), (T0 + 15 * MINUTE, MAX_AGE), (T0 + 24 * 60 * MINUTE, MAX_AGE)],
)
def test_max_age_uses_the_explicit_now(now: int, expected: str | None) -> None:
    assert policy(max_age="15m").reason(buffer(opened_ms=T0), now) == expected


def test_max_age_counts_from_opening_not_from_the_last_append() -> None:
    fresh_append = buffer(opened_ms=T0, appended_ms=T0 + 89_999)
    assert policy(max_age="90s").reason(fresh_append, T0 + 89_999) is None
    assert policy(max_age="90s").reason(fresh_append, T0 + 90_000) == MAX_AGE


@pytest.mark.parametrize(("count", "expected"), [(1, None), (2, None), (3, MAX_SEGMENTS), (4, MAX_SEGMENTS)])
def test_max_segments(count: int, expected: str | None) -> None:
    assert policy(max_segments=3).reason(buffer(segments=[(1, 1)] * count), T0) == expected


def test_rules_are_checked_in_a_fixed_order() -> None:
    everything = buffer(opened_ms=T0, segments=[(10, 4096)] * 3)
    limits = policy(max_records=10, max_bytes="1KiB", max_age="1s", max_segments=3)
    assert limits.reason(everything, T0 + 1000) == MAX_RECORDS
    assert [rule.reason for rule in limits.rules] == [MAX_RECORDS, MAX_BYTES, MAX_AGE, MAX_SEGMENTS]


def test_defaults_keep_a_buffer_just_under_every_limit_open() -> None:
    just_under = buffer(segments=[(99_801, 64 * 1024 * 1024 - 199)] + [(1, 1)] * 198)
    assert (just_under.records, just_under.size, len(just_under.segments)) == (99_999, 64 * 1024 * 1024 - 1, 199)
    assert policy().reason(just_under, T0 + 15 * MINUTE - 1) is None


# -- due() ------------------------------------------------------------------------------------------


def test_due_returns_each_triggered_buffer_with_its_reason() -> None:
    buffers = keyed(
        buffer("2025-11-21T05", seq=1, segments=[(10, 1)]),
        buffer("2025-11-21T06", seq=2, segments=[(1, 4096)]),
        buffer("2025-11-21T07", seq=3, opened_ms=T0 - 16 * MINUTE),
        buffer("2025-11-21T08", seq=4),
        buffer("2025-11-21T08", kind="errors", seq=5, segments=[(1, 1)] * 5),
    )
    due = policy(max_records=10, max_bytes="4KiB", max_age="15m", max_segments=5).due(buffers, T0)
    assert due == {
        "raw/2025-11-21T05": MAX_RECORDS,
        "raw/2025-11-21T06": MAX_BYTES,
        "raw/2025-11-21T07": MAX_AGE,
        "errors/2025-11-21T08": MAX_SEGMENTS,
    }


def test_due_with_nothing_open() -> None:
    assert policy().due({}, T0) == {}


def test_max_open_buffers_seals_the_least_recently_appended() -> None:
    buffers = keyed(
        buffer("2025-11-21T04", seq=1, appended_ms=T0 + 4),
        buffer("2025-11-21T05", seq=2, appended_ms=T0 + 1),
        buffer("2025-11-21T06", seq=3, appended_ms=T0 + 5),
        buffer("2025-11-21T07", seq=4, appended_ms=T0 + 2),
        buffer("2025-11-21T08", seq=5, appended_ms=T0 + 3),
    )
    due = policy(max_open_buffers=2).due(buffers, T0 + 10)
    assert due == {
        "raw/2025-11-21T05": MAX_OPEN_BUFFERS,
        "raw/2025-11-21T07": MAX_OPEN_BUFFERS,
        "raw/2025-11-21T08": MAX_OPEN_BUFFERS,
    }


def test_max_open_buffers_ties_break_on_seq() -> None:
    buffers = keyed(
        buffer("2025-11-21T08", seq=7, appended_ms=T0),
        buffer("2025-11-21T06", seq=9, appended_ms=T0),
        buffer("2025-11-21T07", seq=8, appended_ms=T0),
    )
    assert policy(max_open_buffers=1).due(buffers, T0) == {
        "raw/2025-11-21T08": MAX_OPEN_BUFFERS,
        "raw/2025-11-21T07": MAX_OPEN_BUFFERS,
    }


def test_max_open_buffers_counts_only_buffers_not_already_due() -> None:
    buffers = keyed(
        buffer("2025-11-21T05", seq=1, appended_ms=T0 + 1, segments=[(10, 1)]),  # due by records
        buffer("2025-11-21T06", seq=2, appended_ms=T0 + 2),
        buffer("2025-11-21T07", seq=3, appended_ms=T0 + 3),
    )
    assert policy(max_records=10, max_open_buffers=2).due(buffers, T0 + 3) == {"raw/2025-11-21T05": MAX_RECORDS}


def test_max_open_buffers_at_the_limit_seals_nothing() -> None:
    buffers = keyed(*(buffer(f"2025-11-21T0{h}", seq=h, appended_ms=T0 + h) for h in range(3)))
    assert policy(max_open_buffers=3).due(buffers, T0) == {}


# -- invariant 7: late data never rotates the current hour ----------------------------------------


def _grow(late: OpenBuffer, records: int, now: int) -> OpenBuffer:
    segment = SegmentRef(f"late-{records}", records, 10 * records, late.last + 1, late.last + records)
    return OpenBuffer(late.key, late.seq, late.opened_ms, now, (*late.segments, segment))


def test_a_growing_late_buffer_never_selects_the_current_hour() -> None:
    limits = policy(max_records=100, max_bytes="64KiB", max_age="15m", max_segments=10, max_open_buffers=2)
    current = buffer("2025-11-21T08", seq=1, opened_ms=T0, appended_ms=T0, segments=[(50, 500)])
    late = buffer("2025-11-20T23", seq=2, opened_ms=T0, appended_ms=T0, segments=[(1, 10)])
    now = T0
    history: list[Mapping[str, str]] = []
    while str(late.key) not in (due := limits.due(keyed(current, late), now)):
        history.append(due)
        now += 1000
        late = _grow(late, 9, now)
    assert all(due == {} for due in history)
    assert due == {"raw/2025-11-20T23": MAX_SEGMENTS}
    assert len(history) == 9


def test_a_late_buffer_hitting_its_limit_seals_only_itself() -> None:
    limits = policy(max_records=100, max_open_buffers=2)
    current = buffer("2025-11-21T08", seq=1, appended_ms=T0, segments=[(99, 990)])
    late = buffer("2025-11-20T23", seq=2, appended_ms=T0 + 5, segments=[(60, 600), (40, 400)])
    older_late = buffer("2025-11-19T12", seq=3, appended_ms=T0 + 6, segments=[(1, 10)])
    assert limits.due(keyed(current, late, older_late), T0 + 6) == {"raw/2025-11-20T23": MAX_RECORDS}
