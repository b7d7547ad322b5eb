"""bench/handler.py: the events it builds, its option parsing and its cold-start bookkeeping
(the benchmark itself is run by hand, not here)."""

from __future__ import annotations

import base64
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import orjson
import pytest

BENCH_PATH = Path(__file__).resolve().parents[2] / "bench" / "handler.py"
START_MS = 1_795_248_000_000  # 2026-11-21T08:00:00Z
TWO_HOURS_MS = 2 * 3_600_000


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_handler_under_test", BENCH_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def created_at(record: dict[str, object]) -> int:
    value = orjson.loads(base64.b64decode(str(record["value"])))
    return int(value["created_at"])


def test_ten_partitions_share_each_batch_equally_with_contiguous_offsets() -> None:
    workload = bench.Workload(batches=5, batch_size=1000, partitions=10, start_ms=START_MS)
    for index in range(workload.batches):
        groups = bench.build_event(workload, index)["records"]
        assert list(groups) == [f"orders-{partition}" for partition in range(10)]
        for partition in range(10):
            records = groups[f"orders-{partition}"]
            assert [record["partition"] for record in records] == [partition] * 100
            assert [record["offset"] for record in records] == list(range(index * 100, index * 100 + 100))


@pytest.mark.parametrize("partitions", [1, 10, 7])
def test_event_time_is_spread_evenly_over_the_two_hours_whatever_the_partitions(partitions: int) -> None:
    workload = bench.Workload(batches=20, batch_size=1000, partitions=partitions, start_ms=START_MS)
    slots: list[int] = []
    on_time = 0
    for index in range(workload.batches):
        batch_times: list[int] = []
        for records in bench.build_event(workload, index)["records"].values():
            count = len(records)
            for record in records:
                position = record["offset"] - index * count
                slot = index * workload.batch_size + position * partitions + record["partition"]
                ideal = START_MS + TWO_HOURS_MS * slot // workload.records
                event_ms = created_at(record)
                assert ideal - 3_600_000 - 30_000 <= event_ms < ideal + 30_000  # jitter, or late by <= 1 h
                on_time += abs(event_ms - ideal) <= 30_000
                slots.append(slot)
                batch_times.append(event_ms)
        # Each batch's bulk lies in its own twentieth of the two hours.
        median = sorted(batch_times)[len(batch_times) // 2]
        width = TWO_HOURS_MS // workload.batches
        assert START_MS + index * width - 30_000 <= median <= START_MS + (index + 1) * width + 30_000
    assert sorted(slots) == list(range(workload.records))  # every record its own, evenly spaced slot
    assert on_time >= 0.96 * workload.records  # 2% are late


def test_partitions_option_is_a_list_defaulting_to_one_and_ten() -> None:
    args = bench.parse_args([])
    assert args.partitions == [1, 10]
    assert args.cold_start_runs == 5
    assert bench.parse_args(["--partitions", "10"]).partitions == [10]
    assert bench.parse_args(["--partitions", "1,4,10", "--batch-size", "100"]).partitions == [1, 4, 10]
    for bad in (["--partitions", "1,1"], ["--partitions", "x"], ["--partitions", "0"], ["--cold-start-runs", "-1"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def test_median_run_keeps_import_and_first_invoke_adding_up() -> None:
    def run(import_ms: float, invoke_ms: float) -> dict[str, float]:
        return {"import_ms": import_ms, "first_invoke_ms": invoke_ms, "total_ms": import_ms + invoke_ms}

    odd = bench.median_run([run(500, 50), run(400, 20), run(450, 30)])
    assert odd == {"import_ms": 450, "first_invoke_ms": 30, "total_ms": 480}
    even = bench.median_run([run(500, 50), run(400, 20), run(450, 30), run(900, 10)])
    assert even == {"import_ms": 475, "first_invoke_ms": 40, "total_ms": 515}


def test_loading_the_bench_imports_no_tidemark_module() -> None:
    """The cold-start child runs this file: nothing of the core may be imported before its timer."""
    probe = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('bench_probe', {str(BENCH_PATH)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['bench_probe'] = module\n"
        "spec.loader.exec_module(module)\n"
        "print(sorted(n for n in sys.modules if n == 'tidemark' or n.startswith('tidemark.')))\n"
    )
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert output.stdout.strip() == "[]"
