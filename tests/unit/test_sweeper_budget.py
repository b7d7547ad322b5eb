"""The sweeper steps' deadlines (tidemark.sweeper.budget): a share of the interval from the
execution's start, never past the function's own remaining time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tidemark.sweeper.budget import (
    COMPLETE_SHARE,
    MARGIN_MS,
    RECONCILE_SHARE,
    SWEEP_SHARE,
    deadline_ms,
    passed,
    started_ms,
)

START = int(datetime(2026, 11, 21, 8, 0, tzinfo=UTC).timestamp() * 1000)
INTERVAL = 300_000


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-21T08:00:00.000Z",  # as Step Functions renders $$.Execution.StartTime
        "2026-11-21T08:00:00+00:00",  # as moto does
        "2026-11-21T08:00:00.000000+00:00",
    ],
)
def test_the_execution_start_is_read_as_step_functions_and_moto_render_it(text: str) -> None:
    assert started_ms({"execution_started": text}) == START


def test_without_an_execution_start_only_the_function_timeout_counts() -> None:
    assert started_ms({"stream": "orders", "partition": 0}) is None
    assert deadline_ms(START, 270_000, execution_started_ms=None, interval_ms=INTERVAL, share=SWEEP_SHARE) == (
        START + 270_000 - MARGIN_MS
    )


def test_the_steps_end_in_order_within_the_interval() -> None:
    ends = [
        deadline_ms(START, 270_000, execution_started_ms=START, interval_ms=INTERVAL, share=share)
        for share in (SWEEP_SHARE, RECONCILE_SHARE, COMPLETE_SHARE)
    ]
    assert ends == sorted(ends) and ends[-1] < START + INTERVAL
    assert ends[0] == START + 150_000


def test_a_step_started_late_gets_what_its_function_has_left_at_most() -> None:
    now = START + 100_000
    assert deadline_ms(now, 20_000, execution_started_ms=START, interval_ms=INTERVAL, share=COMPLETE_SHARE) == (
        now + 20_000 - MARGIN_MS
    )


def test_a_deadline_is_passed_from_its_instant_on() -> None:
    assert not passed(START - 1, START) and passed(START, START) and not passed(START, None)
