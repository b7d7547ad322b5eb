"""Hour marks and the partition registry in DynamoDB (moto server)."""

from __future__ import annotations

from dataclasses import replace

from tests.support.events import msk_event
from tests.support.harness import small_config
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.ledger.dynamodb import DynamoDBLedger


def test_partition_registry_is_a_growing_set(archive):
    ledger = DynamoDBLedger(archive.table, client=archive.dynamodb)
    assert ledger.partitions("orders") == set()
    ledger.register_partitions("orders", [3, 1])
    ledger.register_partitions("orders", {3, 5})
    ledger.register_partitions("orders", [])
    assert ledger.partitions("orders") == {1, 3, 5}
    assert ledger.partitions("clicks") == set()


def test_every_commit_counts_in_its_hour_mark_and_consumers_record_conditionally(archive):
    config = small_config(max_records=20)
    runtime = archive.runtime(config)
    orders = make_orders(partitions=1, per_partition=100, hours=1, bad_share=0.0, late_share=0.0)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    ledger = runtime.ledger
    marks = {mark.hour: mark for mark in ledger.hour_marks("orders")}
    for hour, mark in marks.items():
        assert mark.commits == len(ledger.committed_objects("orders", hour)) > 0
        assert mark.last_commit_ms == archive.clock.now_ms() and not mark.complete
    mark = marks["2026-11-21T08"]

    stale = replace(mark, commits=mark.commits - 1)
    assert not ledger.record_manifest(stale, "manifests/x", 1)  # a commit came since: refused
    assert ledger.record_manifest(mark, "manifests/orders/2026/11/21/08/manifest.json", 5)
    assert ledger.record_reconciled(mark)
    (stored,) = ledger.hour_marks("orders", since_hour="2026-11-21T08")
    assert (stored.complete, stored.manifest_key, stored.completed_ms, stored.reconciled_commits) == (
        True,
        "manifests/orders/2026/11/21/08/manifest.json",
        5,
        mark.commits,
    )
    assert [m.hour for m in ledger.hour_marks("orders", since_hour="2026-11-21T09")] == []


def test_recording_an_object_twice_is_a_double_commit_and_changes_nothing(archive):
    import pytest

    from tidemark.exceptions import DoubleCommitError

    config = small_config(max_records=20)
    runtime = archive.runtime(config)
    orders = make_orders(partitions=1, per_partition=30, hours=1, bad_share=0.0, late_share=0.0)
    Archiver(runtime).handle(msk_event(orders.all_records()))
    ledger = runtime.ledger
    (committed, *_rest) = ledger.committed_objects("orders", "2026-11-21T08")
    before = {mark.hour: mark.commits for mark in ledger.hour_marks("orders")}
    state = ledger.load("orders", 0)
    successor = replace(state, version=state.version + 1)

    with pytest.raises(DoubleCommitError, match="already recorded"):
        ledger.commit(successor, state, committed)

    assert ledger.load("orders", 0).version == state.version  # the transaction wrote nothing
    assert {mark.hour: mark.commits for mark in ledger.hour_marks("orders")} == before
