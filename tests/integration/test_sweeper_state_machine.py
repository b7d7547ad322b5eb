"""The sweeper state machine exactly as ``cdk synth`` defines it, run by moto's Step Functions
interpreter (moto server), each Lambda task running the real handler from functions/sweeper.

The archiver side runs on a clock set in the past, so that -- for the sweeper, on the real clock
-- buffers are past their max age and orphans past their grace period without any waiting.
The sweeper's clock is the proxy's (``tests.support.stepfunctions``): the real clock plus the
time a test says work took, against which each execution's ``TimeoutSeconds`` is enforced.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import boto3
import pytest

from tests.conftest import EXAMPLE_CONFIG, REPO, Archive, make_archive
from tests.support.events import msk_event
from tests.support.harness import assert_objects_describe_themselves, small_config, staged_files
from tests.support.legacy_segments import encode_frame
from tests.support.stepfunctions import (
    LambdaProxy,
    SynthesizedSweeper,
    Took,
    lambda_proxy,
    run_execution,
    synthesized_sweeper,
)
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.buffers import BufferKey
from tidemark.clock import ManualClock
from tidemark.config.loader import ENV_JSON
from tidemark.embedded.moto_server import moto_server
from tidemark.faults import (
    AFTER_SEGMENT_WRITE,
    AFTER_UPLOAD,
    ALL_CRASH_POINTS,
    BEFORE_SEGMENT_WRITE,
    DURING_SEGMENT_WRITE,
    CrashAt,
    SimulatedCrash,
)
from tidemark.runtime import ENV_BUCKET, ENV_LEDGER_TABLE, ENV_STAGING_ROOT
from tidemark.staging.frames import RAW
from tidemark.verify import verify_archive

MINUTE_MS = 60_000
BEFORE_ACCEPT = (BEFORE_SEGMENT_WRITE, DURING_SEGMENT_WRITE, AFTER_SEGMENT_WRITE)
CONFIG = small_config(max_records=50)


@pytest.fixture(scope="module")
def proxy() -> Iterator[LambdaProxy]:
    with lambda_proxy() as running:
        yield running


@pytest.fixture(scope="module")
def sfn_endpoint(proxy: LambdaProxy) -> Iterator[str]:
    with moto_server(lambda_proxy=proxy.url, execute_state_machines=True) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def synthesized() -> SynthesizedSweeper:
    return synthesized_sweeper(EXAMPLE_CONFIG)


def real_now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def sweeper(sfn_endpoint, proxy, synthesized, tmp_path, monkeypatch):
    """A fresh archive (past clock) and a function to run one sweeper execution over it."""
    archive = replace(make_archive(sfn_endpoint, tmp_path), clock=ManualClock(real_now_ms() - 45 * MINUTE_MS))
    for name, value in {
        ENV_BUCKET: archive.bucket,
        ENV_LEDGER_TABLE: archive.table,
        ENV_STAGING_ROOT: str(archive.staging_root),
        ENV_JSON: CONFIG.model_dump_json(),
        "AWS_ENDPOINT_URL": sfn_endpoint,
    }.items():
        monkeypatch.setenv(name, value)
    proxy.load(synthesized.handlers, REPO / "functions" / "sweeper", synthesized.timeouts_s)
    sfn = boto3.client("stepfunctions", endpoint_url=sfn_endpoint)
    machine = sfn.create_state_machine(
        name=f"tidemark-sweeper-{uuid.uuid4().hex[:8]}",
        definition=synthesized.definition,
        roleArn="arn:aws:iam::123456789012:role/tidemark-sweeper",
    )["stateMachineArn"]

    def run(expect: str = "SUCCEEDED") -> dict:
        done = run_execution(sfn, machine, proxy=proxy)
        if done["status"] == expect and expect in ("FAILED", "TIMED_OUT"):
            return done
        if done["status"] != expect:
            events = sfn.get_execution_history(executionArn=done["executionArn"])["events"]
            failures = [e for e in events if "Failed" in e["type"]]
            raise AssertionError(f"{done['status']}: {done.get('error')} {done.get('cause')} {failures[-3:]}")
        return json.loads(done["output"])

    return archive, run


def test_the_definition_is_the_synthesized_one(synthesized):
    states = json.loads(synthesized.definition)["States"]
    assert list(states) == [
        "ListPartitions",
        "SweepEachPartition",
        "Reconcile",
        "CompleteHours",
        "TallySweeps",
        "AnySweepFailed",
        "SweptEveryPartition",
        "PartitionSweepFailed",
    ]
    assert states["SweepEachPartition"]["ItemsPath"] == "$.partitions"
    assert states["PartitionSweepFailed"]["Type"] == "Fail"
    assert sorted(synthesized.handlers.values()) == [
        "handler.complete_hours",
        "handler.list_partitions",
        "handler.reconcile",
        "handler.sweep_partition",
    ]


def test_idle_buffers_are_flushed_after_max_age_with_no_new_records(sweeper, proxy):
    archive, run = sweeper
    orders = make_orders(partitions=3, per_partition=30, hours=1)  # below max_records: nothing rotates
    runtime = archive.runtime(CONFIG)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    assert archive.s3.list_objects_v2(Bucket=archive.bucket).get("KeyCount", 0) == 0

    output = run()  # the buffers opened 45 minutes ago (archive clock); max age is 15 minutes

    report = verify_archive(archive.s3, archive.bucket, "orders", orders.expected)
    assert report.ok and report.archived + report.dead_lettered == 90, report.summary()
    assert sorted(p["partition"] for p in output["partitions"]) == [0, 1, 2]
    swept = [event for name, event in proxy.invocations if "SweepPartition" in name]
    assert sorted(event["partition"] for event in swept) == [0, 1, 2]  # the Map ran once per partition
    assert output["reconcile"]["findings"] == {}
    assert staged_files(archive) == set()


def test_a_crash_at_every_archiver_crash_point_is_recovered(sweeper):
    """Partition i's delivery dies at crash point i. Before the ledger accepted the batch, the
    ESM redelivers it; from the accept on, the records are the archive's and nothing but the
    sweeper touches the partition again: it resumes the sealed flush, flushes what is open and
    deletes what is left. Every record exactly once, nothing left on staging."""
    archive, run = sweeper
    orders = make_orders(partitions=len(ALL_CRASH_POINTS), per_partition=120, hours=1)
    crashed = []
    for partition, point in enumerate(ALL_CRASH_POINTS):
        records = orders.records[partition]
        try:
            Archiver(archive.runtime(CONFIG, CrashAt(point))).handle(msk_event(records))
        except SimulatedCrash:
            crashed.append(point)
        if point in BEFORE_ACCEPT:
            Archiver(archive.runtime(CONFIG)).handle(msk_event(records))  # redelivery, a new container
    assert crashed == list(ALL_CRASH_POINTS)
    assert staged_files(archive)  # work left behind for the sweeper

    output = run()

    report = verify_archive(archive.s3, archive.bucket, "orders", orders.expected)
    assert report.summary() == {**report.summary(), "lost": 0, "duplicated": 0, "misfiled": 0, "corrupted": 0}
    assert report.archived + report.dead_lettered == len(orders.expected)
    assert staged_files(archive) == set()
    assert output["reconcile"]["findings"] == {}
    assert_objects_describe_themselves(archive, CONFIG)


def orphan(archive: Archive, partition: int, offset: int, created_ms: int) -> str:
    frame = encode_frame(RAW, offset, created_ms, created_ms, None, b"{}", ())
    ref = archive.runtime(CONFIG).staging.write(
        "orders", partition, BufferKey("raw", "2026-11-21T08"), [frame], offset, offset, created_ms
    )
    return ref.name


def test_an_orphan_segment_is_removed_only_after_the_grace_period(sweeper):
    archive, run = sweeper
    young = orphan(archive, 4, offset=10, created_ms=real_now_ms() - 10 * MINUTE_MS)
    old = orphan(archive, 4, offset=20, created_ms=real_now_ms() - 40 * MINUTE_MS)  # grace is 30 minutes

    output = run()

    assert staged_files(archive) == {young}
    assert old not in staged_files(archive)
    assert [p["partition"] for p in output["partitions"]] == [4]  # found through its staging directory


def test_reconciliation_flags_an_object_deleted_behind_its_back(sweeper):
    archive, run = sweeper
    # Event times an hour ago: inside the reconciliation lookback, whatever day the test runs.
    hour_ago = (real_now_ms() // 3_600_000 - 1) * 3_600_000
    orders = make_orders(partitions=1, per_partition=60, hours=1, base_ms=hour_ago)
    Archiver(archive.runtime(CONFIG)).handle(msk_event(orders.all_records()))
    assert run()["reconcile"]["findings"] == {}
    keys = [o["Key"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"]]
    archive.s3.delete_object(Bucket=archive.bucket, Key=keys[0])

    reconcile = run()["reconcile"]

    assert reconcile["findings"] == {"missing_object": 1}
    assert [d["key"] for d in reconcile["details"]] == [keys[0]]
    remaining = {o["Key"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"]}
    assert remaining == set(keys[1:])  # the sweeper reports; it never deletes or re-creates


def test_a_partition_that_keeps_failing_does_not_stop_the_others_or_the_later_steps(sweeper, proxy, synthesized):
    archive, run = sweeper
    orders = make_orders(partitions=3, per_partition=30, hours=1)
    Archiver(archive.runtime(CONFIG)).handle(msk_event(orders.all_records()))
    (sweep_name,) = [name for name, handler in synthesized.handlers.items() if handler == "handler.sweep_partition"]
    real_sweep = proxy.functions[sweep_name]

    def broken_for_partition_1(event, context):
        if event["partition"] == 1:
            raise OSError("EFS went away")
        return real_sweep(event, context)

    proxy.functions[sweep_name] = broken_for_partition_1

    failed = run(expect="FAILED")  # the failure is the execution's, not buried in its output
    assert (failed["error"], failed["status"]) == ("PartitionSweepFailed", "FAILED")

    attempts = [event["partition"] for name, event in proxy.invocations if name == sweep_name]
    assert attempts.count(1) == 3  # the first try and two retries
    swept = {
        key.split("+")[1]
        for key in (o["Key"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"])
    }
    assert swept == {"0", "2"}  # the other partitions were flushed
    ran = {synthesized.handlers[name] for name, _event in proxy.invocations}
    assert {"handler.reconcile", "handler.complete_hours"} <= ran  # and the later steps ran


def sweep_function(synthesized: SynthesizedSweeper) -> str:
    (name,) = [name for name, handler in synthesized.handlers.items() if handler == "handler.sweep_partition"]
    return name


def test_a_slow_partition_leaves_time_for_reconciliation_and_completeness(sweeper, proxy, synthesized):
    """Issue 27, finding 5: one partition with a backlog of slow flushes (every upload takes 100 s
    on the sweeper's clock, several flushes due) used to keep its SweepPartition busy past the
    execution's TimeoutSeconds (one interval, 300 s): the execution timed out before Reconcile
    and CompleteHours ran, every interval while the backlog lasted. Now the sweep starts no flush
    past half the interval from the execution's start and says what it deferred; each execution
    ends in time with every step run, and the next one continues the backlog."""
    archive, run = sweeper
    orders = make_orders(partitions=1, per_partition=40, hours=4, late_share=0.0, bad_share=0.0)
    Archiver(archive.runtime(CONFIG)).handle(msk_event(orders.all_records()))  # OPEN buffers, past max age
    due = len(archive.runtime(CONFIG).ledger.load("orders", 0).buffers)
    assert due >= 4
    sweep_name = sweep_function(synthesized)
    slow = Took(AFTER_UPLOAD, proxy.clock, seconds=100)
    proxy.runtime(sweep_name).crash_points = slow
    timeout_s = json.loads(synthesized.definition)["TimeoutSeconds"]

    outputs, sweeps = [], []
    while len(outputs) < due and slow.hits < due:
        outputs.append(run())  # TIMED_OUT before the fix
        sweeps.append([result for name, result in proxy.results if name == sweep_name][-1])
        assert proxy.execution is not None and proxy.execution.took_s <= timeout_s

    # each execution: two flushes (starting at 0 s and 100 s), none started past 150 s ...
    assert [sweep["flushed"] for sweep in sweeps[:-1]] == [{"max_age": 2}] * (len(sweeps) - 1)
    assert [sweep["deferred"] for sweep in sweeps] == [due - 2 * (i + 1) for i in range(len(sweeps) - 1)] + [0]
    assert sum(sum(sweep["flushed"].values()) for sweep in sweeps) == slow.hits == due
    # ... and reconciliation and completeness ran every time
    assert all(output["reconcile"]["findings"] == {} for output in outputs)
    assert all("completeness" in output for output in outputs)
    assert outputs[0]["completeness"]["manifests"]  # an hour wholly flushed is complete already
    report = verify_archive(archive.s3, archive.bucket, "orders", orders.expected)
    assert report.ok and report.archived == len(orders.expected), report.summary()
    assert staged_files(archive) == set()


def test_an_execution_that_outlasts_its_timeout_is_timed_out_and_the_next_one_recovers(sweeper, proxy, synthesized):
    """The rule the model enforces (Step Functions'): an execution running longer than its
    TimeoutSeconds fails with States.Timeout and no later state starts. A deadline cannot
    interrupt a flush already started: one that takes longer than the whole TimeoutSeconds
    still times the execution out; the next execution finishes what it left."""
    archive, run = sweeper
    orders = make_orders(partitions=1, per_partition=40, hours=2, late_share=0.0, bad_share=0.0)
    Archiver(archive.runtime(CONFIG)).handle(msk_event(orders.all_records()))
    sweep_name = sweep_function(synthesized)
    timeout_s = json.loads(synthesized.definition)["TimeoutSeconds"]
    proxy.runtime(sweep_name).crash_points = Took(AFTER_UPLOAD, proxy.clock, seconds=timeout_s + 60)

    timed_out = run(expect="TIMED_OUT")

    assert timed_out["error"] == "States.Timeout"
    ran = {synthesized.handlers[name] for name, result in proxy.results if "errorType" not in result}
    assert ran == {"handler.list_partitions"}  # the sweep outlasted its function; nothing after it started

    proxy.runtime(sweep_name).crash_points = Took(AFTER_UPLOAD, proxy.clock, seconds=1)
    run()

    report = verify_archive(archive.s3, archive.bucket, "orders", orders.expected)
    assert report.ok and report.archived == len(orders.expected), report.summary()
    assert staged_files(archive) == set()
