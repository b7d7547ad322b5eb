"""Running functions locally: fresh cold starts, function errors, and children that really die."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE_CONFIG, REPO
from tests.support.events import msk_event
from tests.support.workload import make_orders
from tidemark.config.loader import ENV_JSON
from tidemark.embedded.esm.invokers import ChildInvoker, InProcessInvoker
from tidemark.embedded.lambda_runtime import HandlerRef, LocalContext, load_handler
from tidemark.exceptions import ConfigError

COUNTER_HANDLER = """
import sys
COLD_STARTS = [1]
def handler(event, context):
    print("log line from the function")
    if event.get("fail"):
        raise ValueError("boom")
    return {"echo": event, "cold_starts": len(COLD_STARTS), "request": context.aws_request_id}
"""


@pytest.fixture
def function_dir(tmp_path: Path) -> Path:
    code = tmp_path / "functions" / "echo"
    code.mkdir(parents=True)
    (code / "app.py").write_text(COUNTER_HANDLER)
    return code


def test_each_load_is_a_fresh_cold_start(function_dir):
    ref = HandlerRef(function_dir, "app.handler")
    first, second = load_handler(ref), load_handler(ref)
    assert first is not second
    assert first.__module__ != second.__module__
    assert sys.modules[first.__module__].COLD_STARTS is not sys.modules[second.__module__].COLD_STARTS


def test_handler_refs_are_checked(function_dir):
    with pytest.raises(ConfigError, match=r"no handler module at .*missing\.py"):
        HandlerRef(function_dir, "missing.handler").check()
    with pytest.raises(ConfigError, match=r"must look like 'module\.function'"):
        HandlerRef(function_dir, "app").check()
    with pytest.raises(ConfigError, match="has no function 'nope'"):
        load_handler(HandlerRef(function_dir, "app.nope"))
    assert (
        HandlerRef.for_function(REPO, "archiver").check().module_file == REPO / "functions" / "archiver" / "handler.py"
    )


def test_in_process_invoker_reports_function_errors_and_keeps_logs_off_stdout(function_dir, capsys):
    log = io.StringIO()
    invoker = InProcessInvoker(HandlerRef(function_dir, "app.handler"), log)

    ok = invoker.invoke({"n": 1})
    failed = invoker.invoke({"fail": True})

    assert ok.ok and ok.response["echo"] == {"n": 1} and ok.response["cold_starts"] == 1
    assert (failed.ok, failed.crashed, failed.error) == (False, False, "ValueError: boom")
    assert "log line from the function" in log.getvalue() and "Traceback" in log.getvalue()
    assert capsys.readouterr().out == ""


def test_local_context_has_what_powertools_reads():
    context = LocalContext(function_name="tidemark-archiver-orders")
    assert context.invoked_function_arn.endswith(":function:tidemark-archiver-orders")
    assert context.get_remaining_time_in_millis() > 0 and context.memory_limit_in_mb > 0
    assert context.aws_request_id != LocalContext().aws_request_id


def test_a_child_killed_at_a_crash_point_really_dies_and_the_retry_recovers(archive, tmp_path):
    env = {
        **archive.env(),
        ENV_JSON: json.dumps(yaml.safe_load(EXAMPLE_CONFIG.read_text())),
        "POWERTOOLS_TRACE_DISABLED": "1",
    }
    ref = HandlerRef.for_function(REPO, "archiver")
    log_path = tmp_path / "children.log"
    workload = make_orders(partitions=1, per_partition=50)
    event = msk_event(workload.all_records())
    child = ChildInvoker(ref, env, log_path)

    crashed = child.invoke(event, crash_at="after_accept:1")
    retried = child.invoke(event)

    assert crashed.crashed and not crashed.ok and "after_accept:1" in (crashed.error or "")
    assert retried.ok
    summary = retried.response["streams"]["orders"]
    assert summary["records_in"] == 50 and summary["duplicates"] == 50  # accepted before the death


def test_a_child_that_fails_otherwise_is_an_error_not_a_crash(archive, tmp_path):
    env = {**archive.env(), ENV_JSON: json.dumps(yaml.safe_load(EXAMPLE_CONFIG.read_text()))}
    log_path = tmp_path / "children.log"
    child = ChildInvoker(HandlerRef.for_function(REPO, "archiver"), env, log_path)

    result = child.invoke(msk_event(make_orders(partitions=1, per_partition=3).all_records()), crash_at="nowhere:1")

    assert (result.ok, result.crashed) == (False, False)
    assert "exit code 1" in (result.error or "") and str(log_path) in (result.error or "")
    assert "unknown crash point 'nowhere'" in log_path.read_text()
