"""Every bench in ``bench/`` runs in its smoke mode, so none can rot unnoticed.

``bench/<script> --smoke`` runs the bench's own code path on a tiny input, in a process group
of its own (its moto servers, broker, CLI runs and JVM included). Each must exit 0 having
stopped every process it started, and print as its last stdout line the JSON it reports, with
its figures and its same-run ratios: the keys are there and the numbers finite and positive
where they must be. No timing bound and no ratio threshold: the figures of a tiny run on a busy
machine mean nothing. The seeded benches (``bench/*_interleavings.py``) are run by their own
tests (``tests/support/benches.py``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cdk import REPO

#: a smoke run takes seconds (Spark's about half a minute); a fresh clone's first layer_imports
#: also downloads the layers' wheels into .cache/layer
TIMEOUT_S = 480
#: how long the processes a bench started may take to go once it has exited
STOPPED_WITHIN_S = 30

Report = dict[str, Any]


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def positive(report: Report, *keys: str) -> None:
    for key in keys:
        assert finite(report[key]) and report[key] > 0, (key, report[key])


def non_negative(report: Report, *keys: str) -> None:
    """Figures that a tiny run may round to 0 (a ratio of a fast step to a slow one, a difference)."""
    for key in keys:
        assert finite(report[key]) and report[key] >= 0, (key, report[key])


def optional(report: Report, *keys: str) -> None:
    """Figures a bench reports as null when the run had nothing to measure them on."""
    for key in keys:
        assert report[key] is None or finite(report[key]), (key, report[key])


def check_dedupe(report: Report) -> None:
    positive(report, "batches", "batch_size", "rabbitmq_over_kafka")
    non_negative(report, "redelivery_over_first")
    positive(report["kafka"], "handler_s")
    rabbitmq = report["rabbitmq"]
    positive(rabbitmq, "handler_s", "redelivery_s", "index_ms_per_batch_first_tenth", "index_ms_per_batch_last_tenth")
    non_negative(rabbitmq, "index_growth_ratio")
    positive(rabbitmq, "index_bytes")
    assert rabbitmq["index_rows"] == report["batches"] * report["batch_size"]  # every message's id, once


def check_formats(report: Report) -> None:
    positive(report, "records", "value_bytes_avg", "runs")
    assert set(report["cases"]) == {
        "jsonl+gzip",
        "jsonl+zstd",
        "parquet+snappy",
        "parquet+zstd",
        "parquet+snappy typed",
        "avro+deflate",
        "csv+gzip",
        "text+gzip",
        "bytes+gzip",
    }
    for case in report["cases"].values():
        positive(case, "records_per_s", "seconds", "object_bytes")
        non_negative(case, "ratio_vs_jsonl_gzip")
    assert report["cases"]["jsonl+gzip"]["ratio_vs_jsonl_gzip"] == 1.0  # the baseline


def check_flush(report: Report) -> None:
    positive(report, "records", "value_bytes_per_record", "line_bytes_per_record", "baseline_us", "runs")
    non_negative(report, "render_us", "digest_us")
    assert set(report["codecs"]) == {"none", "gzip-6", "gzip-1", "zstd-1", "zstd-3"}
    for codec in report["codecs"].values():
        positive(codec, "flush_us", "object_bytes", "size_vs_gzip6")
        non_negative(
            codec,
            "render_us",
            "compress_us",
            "render_compress_us",
            "digest_us",
            "flush_render_us",
            "upload_us",
            "flush_ratio",
            "render_compress_ratio",
        )


def check_layer_imports(report: Report) -> None:
    positive(report, "runs")
    assert report["host_platform"].startswith("manylinux2014_")
    assert set(report["cases"]) == {"baseline", "+pyarrow", "+fastavro", "+zstandard", "+all"}
    for case in report["cases"].values():
        positive(case, "import_s", "import_cpu_s", "process_s", "ratio")
        non_negative(case, "added_import_s")
    sizes = report["sizes_bytes"]
    positive(
        sizes,
        "core_layer",
        "formats_layer_installed",
        "formats_layer_slimmed",
        "archiver_code",
        "sweeper_code",
        "limit",
        "largest_function",
    )
    assert finite(sizes["headroom"])  # the layers' own tests hold it above its floor


HANDLER_FIGURES = (
    "records_per_s",
    "mb_per_s",
    "peak_rss_mb",
    "baseline_ratio",
    "records",
    "batches",
    "batch_size",
    "partitions",
    "value_mb",
    "handler_seconds",
    "baseline_seconds",
    "baseline_records_per_s",
    "moto_seconds",
    "moto_requests",
    "records_per_s_excl_moto",
    "objects_committed",
    "records_committed",
    "rss_mb_start",
    "rss_mb_after_warmup",
    "rss_mb_end",
    "ledger_state_item_kb_max",
    "ledger_state_item_bytes_mean",
    "ledger_state_item_bytes_max",
    "flushing_batches",
)


def check_handler(report: Report) -> None:
    assert report["workloads"] and report["workloads"][0] == {key: report[key] for key in report["workloads"][0]}
    for workload in report["workloads"]:
        positive(workload, *HANDLER_FIGURES)  # the smoke config flushes: objects are committed
        non_negative(workload, "records_buffered", "s3_object_mb")
        assert finite(workload["baseline_ratio_excl_moto"]) and finite(workload["rss_growth_mb"])  # either sign
        optional(workload, "staging_records_per_s", "staging_baseline_ratio", "flush_records_per_s")
        optional(workload, "flush_seconds_est")
        assert workload["records_committed"] + workload["records_buffered"] == workload["records"]
        assert len(workload["rss_mb_samples"]) >= 1
    assert [workload["partitions"] for workload in report["workloads"]] == [1, 2]
    positive(report, "max_baseline_ratio", "process_peak_rss_mb", "flush_max_records")
    positive(report, "cold_start_ms", "cold_start_import_ms", "cold_start_first_invoke_ms", "cold_start_runs")
    positive(report, "cold_start_median_ms", "cold_start_warmup_ms", "cold_start_boto3_import_ms")
    assert len(report["cold_start_samples_ms"]) == report["cold_start_runs"]
    assert isinstance(report["source_changed_during_run"], bool)


def check_replay(report: Report) -> None:
    positive(report, "records", "objects", "partitions", "replay_s", "replay_records_per_s", "baseline_s")
    positive(report, "baseline_records_per_s", "baseline_ratio", "read_s", "rerun_s")
    non_negative(report, "read_share")
    assert report["exactly_once"] is True, report
    assert (report["rerun_skipped"], report["rerun_produced"]) == (report["records"], 0)
    assert report["replay_topic_holds"] == report["baseline_topic_holds"] == report["records"]
    assert len(report["runs"]) == 1


def check_wide_batch(report: Report) -> None:
    positive(report, "records", "distinct_event_hours", "elapsed_s", "objects", "hours_archived")
    positive(report, "state_item_bytes_final", "state_item_bytes_largest_written", "ledger_item_budget_bytes")
    positive(report, "baseline_one_hour_elapsed_s", "ratio_wide_to_one_hour")
    assert report["exactly_once"] is True and report["records_found"] == report["records"], report
    assert report["within_budget"] is True
    for run in (report["wide"], report["baseline_one_hour"]):
        assert run["exit_code"] == 0 and run["exactly_once"] is True, run


def check_spark_aggregate(report: Report) -> None:
    positive(report, "records", "records_per_s", "baseline_ratio", "job_seconds", "baseline_seconds", "objects")
    non_negative(report, "duplicates")


BENCHES: dict[str, Callable[[Report], None]] = {
    "dedupe.py": check_dedupe,
    "formats.py": check_formats,
    "flush.py": check_flush,
    "layer_imports.py": check_layer_imports,
    "handler.py": check_handler,
    "replay.py": check_replay,
    "wide_batch.py": check_wide_batch,
    "spark_aggregate.py": check_spark_aggregate,
}
#: the benches that start a SparkSession: on the worker of the session's Spark tests, one JVM at a time
SPARK = {"spark_aggregate.py"}


def live_members(group: int) -> list[str]:
    """The processes of a process group that are still running (zombies are gone already)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        name_end = text.rfind(")")
        state, _parent, member_of = text[name_end + 2 :].split()[:3]
        if int(member_of) == group and state != "Z":
            found.append(f"{stat.parent.name} {text[text.find('(') + 1 : name_end]}")
    return found


def wait_stopped(group: int) -> list[str]:
    deadline = time.monotonic() + STOPPED_WITHIN_S
    while (left := live_members(group)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def smoke_environment() -> dict[str, str]:
    """This process's environment without a session's AWS endpoint (a bench emulating AWS in
    process must not reach the session's moto server), with fake credentials, and Spark kept on
    loopback."""
    skipped = ("AWS_ENDPOINT_URL", "AWS_PROFILE")
    return {
        **{name: value for name, value in os.environ.items() if not name.startswith(skipped)},
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


def run_smoke(script: str) -> tuple[int, str, str]:
    """``bench/<script> --smoke`` in a process group of its own: (exit code, stdout, stderr).
    Whatever of the group is left running afterwards (or at the timeout) is killed, and fails."""
    process = subprocess.Popen(
        [sys.executable, f"bench/{script}", "--smoke"],
        cwd=REPO,
        env=smoke_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    group = process.pid
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(group, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"bench/{script} --smoke still running after {TIMEOUT_S} s:\n{stderr[-4000:]}")
    left = wait_stopped(group)
    if left:
        os.killpg(group, signal.SIGKILL)
    assert not left, f"bench/{script} --smoke left processes running: {left}"
    return process.returncode, stdout, stderr


def params(names: Iterable[str]) -> list[Any]:
    return [
        pytest.param(
            name, id=name.removesuffix(".py"), marks=[pytest.mark.xdist_group("spark")] if name in SPARK else []
        )
        for name in names
    ]


@pytest.mark.parametrize("script", params(BENCHES))
def test_the_bench_runs_in_smoke_mode_and_reports_its_figures(script: str) -> None:
    code, stdout, stderr = run_smoke(script)
    assert code == 0, f"exit code {code}:\n{stderr[-4000:]}"
    lines = stdout.strip().splitlines()
    assert lines, f"nothing on stdout:\n{stderr[-4000:]}"
    report = json.loads(lines[-1])
    assert isinstance(report, dict), lines[-1]
    BENCHES[script](report)


def test_every_bench_has_a_smoke_test() -> None:
    seeded = {path.name for path in (REPO / "bench").glob("*_interleavings.py")} | {"aggregation_properties.py"}
    helpers = {"seeded.py"}
    assert {path.name for path in (REPO / "bench").glob("*.py")} - seeded - helpers == set(BENCHES)
