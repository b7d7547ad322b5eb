"""tidemark.embedded.workload: what the demo produces, and what each record must become."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import orjson
import pytest

from tidemark.embedded.workload import WorkloadSpec, generate

NOW_MS = 1_795_255_200_000  # 2026-11-21T10:00:00Z


def hour_of(value: bytes) -> str:
    created = datetime.strptime(orjson.loads(value)["created_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return created.strftime("%Y-%m-%dT%H")


def test_orders_carry_their_event_hour_and_span_the_requested_hours():
    orders = list(generate(WorkloadSpec(records=4000, hours=4, late_share=0.0, malformed_share=0.0), NOW_MS))
    assert len(orders) == 4000
    assert all(order.hour == hour_of(order.value) for order in orders)
    assert set(Counter(order.hour for order in orders)) >= {f"2026-11-21T{h:02d}" for h in (6, 7, 8, 9)}
    assert all(
        orjson.loads(o.value).keys() >= {"order_id", "customer_id", "product_id", "price", "quantity"} for o in orders
    )


def created_ms(value: bytes) -> int:
    created = datetime.strptime(orjson.loads(value)["created_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return int(created.timestamp() * 1000)


def test_late_records_are_hours_behind_their_neighbours():
    orders = list(generate(WorkloadSpec(records=5000, late_share=0.05, malformed_share=0.0, seed=3), NOW_MS))
    late = [index for index, order in enumerate(orders) if order.late]
    assert 150 < len(late) < 350
    lags = []
    for index in late:
        neighbour = next(orders[i] for i in range(index - 1, -1, -1) if not orders[i].late)
        lags.append(created_ms(neighbour.value) - created_ms(orders[index].value))
    assert min(lags) > 55 * 60_000  # at least about an hour late
    assert max(lags) > 5 * 3_600_000  # and up to six hours


def test_malformed_records_of_each_kind_must_be_dead_lettered():
    orders = list(generate(WorkloadSpec(records=3000, malformed_share=0.002), NOW_MS))
    bad = [o for o in orders if o.hour is None]
    assert len(bad) == 6
    kinds = Counter()
    for order in bad:
        try:
            data = orjson.loads(order.value)
        except orjson.JSONDecodeError:
            kinds["not_json"] += 1
            continue
        kinds["bad_time" if "created_at" in data else "no_time"] += 1
    assert kinds == {"not_json": 2, "no_time": 2, "bad_time": 2}


def test_a_few_malformed_records_even_in_a_tiny_run():
    assert sum(o.hour is None for o in generate(WorkloadSpec(records=30, malformed_share=0.002), NOW_MS)) == 3


def test_the_same_seed_gives_the_same_workload():
    spec = WorkloadSpec(records=200, seed=11)
    assert list(generate(spec, NOW_MS)) == list(generate(spec, NOW_MS))
    assert list(generate(spec, NOW_MS)) != list(generate(WorkloadSpec(records=200, seed=12), NOW_MS))


def test_hours_follow_the_stream_time_zone():
    (order,) = generate(WorkloadSpec(records=1, hours=1, late_share=0.0, malformed_share=0.0), NOW_MS, "Asia/Kolkata")
    utc_hour = hour_of(order.value)
    assert order.hour != utc_hour  # +05:30 moves the hour label


@pytest.mark.parametrize("bad", [{"records": 0}, {"hours": 0}, {"late_share": 1.5}, {"malformed_share": -0.1}])
def test_spec_is_validated(bad):
    with pytest.raises(ValueError):
        WorkloadSpec(**bad)
