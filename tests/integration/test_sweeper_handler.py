"""The sweeper's SweepPartition Lambda handler itself: its EMF metrics, a quarantine among them."""

from __future__ import annotations

from datetime import UTC, datetime
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.conftest import EXAMPLE_CONFIG, REPO, Archive
from tests.support.events import msk_event
from tests.support.handlers import emf_documents, lambda_context, load_handler
from tests.support.harness import damage_first_segment, small_config
from tests.support.workload import make_orders
from tidemark.archiver import Archiver

HANDLER = REPO / "functions" / "sweeper" / "handler.py"


def context() -> SimpleNamespace:
    return lambda_context("tidemark-sweeper-sweep-partition", request=2)


def metric_names(document: dict[str, Any]) -> set[str]:
    return {metric["Name"] for metric in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]}


@pytest.fixture
def handler(archive: Archive, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = load_handler(monkeypatch, HANDLER, {**archive.env(), "TIDEMARK_CONFIG": str(EXAMPLE_CONFIG)})
    # The cold start's runtime reads the wall clock; this one reads the test's, so max age can pass.
    monkeypatch.setattr(module, "RUNTIME", archive.runtime(small_config(max_records=25)))
    return module


def test_a_quarantined_flush_is_measured_for_the_quarantines_alarm(
    handler: ModuleType, archive: Archive, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime = handler.RUNTIME
    orders = make_orders(partitions=1, per_partition=12, hours=1, late_share=0.0, bad_share=0.0)
    Archiver(runtime).handle(msk_event(orders.all_records()))  # below max_records: stays OPEN
    damage_first_segment(archive, runtime)
    archive.clock.advance(minutes=16)
    capsys.readouterr()

    summary = handler.sweep_partition({"stream": "orders", "partition": 0}, context())

    assert summary["quarantined"] == 1
    (document,) = [doc for doc in emf_documents(capsys.readouterr().out) if "SweeperObjectsCommitted" in doc]
    assert {"FlushesQuarantined", "FlushErrors"} <= metric_names(document)
    assert document["FlushesQuarantined"] == [1.0]
    assert document["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Tidemark"
    assert (document["service"], document["stream"]) == ("tidemark-sweeper", "orders")


def test_a_clean_sweep_reports_zero_quarantines(
    handler: ModuleType, archive: Archive, capsys: pytest.CaptureFixture[str]
) -> None:
    """A counter on every invocation: the alarm sees 0, not missing data, when nothing is wrong."""
    handler.sweep_partition({"stream": "orders", "partition": 0}, context())
    (document,) = [doc for doc in emf_documents(capsys.readouterr().out) if "SweeperObjectsCommitted" in doc]
    assert document["FlushesQuarantined"] == [0.0]


def test_a_sweep_started_past_its_share_of_the_interval_defers_its_flushes(
    handler: ModuleType, archive: Archive, capsys: pytest.CaptureFixture[str]
) -> None:
    """The execution's start in the payload sets the sweep's deadline (half the interval after
    it): an execution that started an interval ago starts no flush; the flushes are counted."""
    runtime = handler.RUNTIME
    orders = make_orders(partitions=1, per_partition=12, hours=1, late_share=0.0, bad_share=0.0)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    archive.clock.advance(minutes=16)  # past max age: due
    started = datetime.fromtimestamp((archive.clock.now_ms() - 300_000) / 1000, tz=UTC).isoformat()
    capsys.readouterr()

    summary = handler.sweep_partition({"stream": "orders", "partition": 0, "execution_started": started}, context())

    due = len(runtime.ledger.load("orders", 0).sealed)
    assert (summary["flushed"], summary["deferred"]) == ({}, due) and due >= 1
    (document,) = [doc for doc in emf_documents(capsys.readouterr().out) if "SweeperObjectsCommitted" in doc]
    assert document["SweeperFlushesDeferred"] == [float(due)]
    # without a start (a direct invocation) only the function's own time counts
    assert handler.sweep_partition({"stream": "orders", "partition": 0}, context())["resumed"] == due
