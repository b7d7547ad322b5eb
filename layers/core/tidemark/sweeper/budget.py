"""Time budgets: each sweeper step stops starting new work at its share of the interval.

A sweeper execution runs its steps one after the other (ListPartitions, the Map of
SweepPartition, Reconcile, CompleteHours), every ``sweeper.interval``. Without a budget, one
slow partition (a backlog of sealed flushes after an S3 outage, a few 64 MiB Parquet flushes)
keeps its SweepPartition busy for the whole interval, and Reconcile and CompleteHours never get
to run while the backlog lasts. So every step gets a deadline, measured from the execution's
start (``$$.Execution.StartTime``, which the state machine passes in each task's payload)::

    SweepPartition  starts no new flush     past 50 % of the interval
    Reconcile       starts no new hour      past 75 %
    CompleteHours   starts no new manifest  past 95 %

and never later than its own Lambda timeout minus ``MARGIN_MS``
(``context.get_remaining_time_in_millis()``). Reconcile and CompleteHours still do one unit per
stream past their deadline, so a backlog in the steps before them never stalls them. A step that
reaches its deadline returns what it did and counts what it left (``deferred``); the next
execution continues, since every unit of work is idempotent and recorded only once done: a flush
stays SEALED until committed, an hour is recorded as reconciled only once checked clean, a
manifest is recorded per hour.

What a deadline cannot do is interrupt a unit already started: a flush (or an hour's check, or
a manifest) started just before its step's deadline runs to its end, at worst to the function's
timeout. The state machine's own ``TimeoutSeconds`` leaves room for that (``stacks/sweeper.py``);
the next execution may then start while this one still runs, which the ledger's version fence
makes safe (DESIGN.md, "The sweeper").
"""

from __future__ import annotations

from datetime import datetime

#: the share of the interval, from the execution's start, after which a step starts no new work
SWEEP_SHARE = 0.50
RECONCILE_SHARE = 0.75
COMPLETE_SHARE = 0.95
#: what a step keeps of its function's remaining time for its last unit of work and its reply
MARGIN_MS = 15_000


def started_ms(event: dict[str, object]) -> int | None:
    """The execution's start time in the task's payload (``execution_started``: ISO 8601, as
    ``$$.Execution.StartTime`` renders it), or ``None`` when absent (a direct invocation, or a
    task of a state machine deployed before it passed one)."""
    value = event.get("execution_started")
    if not isinstance(value, str) or not value:
        return None
    return int(datetime.fromisoformat(value).timestamp() * 1000)


def deadline_ms(
    now_ms: int, remaining_ms: int, *, execution_started_ms: int | None, interval_ms: int, share: float
) -> int:
    """When a step must stop starting new work: its function's remaining time less the margin,
    and, when the execution's start is known, its share of the interval from that start."""
    deadline = now_ms + remaining_ms - MARGIN_MS
    if execution_started_ms is not None:
        deadline = min(deadline, execution_started_ms + int(interval_ms * share))
    return deadline


def passed(now_ms: int, deadline: int | None) -> bool:
    return deadline is not None and now_ms >= deadline
