"""The local event source mapping against the real (embedded) broker: Lambda's delivery
contract -- grouping, encoding, batch limits, commit only after success, whole-batch retry."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from tests.support.kafka import committed_offsets, new_topic, produce_round_robin
from tidemark.embedded.esm.batching import BatchLimits
from tidemark.embedded.esm.invokers import Invocation
from tidemark.embedded.esm.mapping import DeliveryError, EventSourceMapping, MappingConfig
from tidemark.records.esm import EventSource
from tidemark.records.kafka import parse_kafka_event

PARTITIONS = 3


class ScriptedInvoker:
    """Records every event; fails the invocations whose numbers are in ``fail`` (1-based)."""

    def __init__(self, fail: set[int] | None = None, on_invoke=None) -> None:
        self.events: list[dict[str, Any]] = []
        self.fail = fail or set()
        self.on_invoke = on_invoke

    def invoke(self, event: dict[str, Any]) -> Invocation:
        self.events.append(event)
        if self.on_invoke is not None:
            self.on_invoke(event)
        if len(self.events) in self.fail:
            return Invocation(ok=False, error="RuntimeError: scripted failure")
        return Invocation(ok=True, response={"status": "ok"})


def mapping_for(bootstrap: str, topic: str, invoker, **kwargs: Any) -> tuple[EventSourceMapping, str]:
    group = f"g-{uuid.uuid4().hex[:8]}"
    limits = kwargs.pop("limits", BatchLimits(batch_size=100, window_ms=200))
    config = MappingConfig(
        bootstrap,
        topic,
        group,
        limits=limits,
        event_source=EventSource(bootstrap, event_source_arn="arn:aws:kafka:us-east-1:123456789012:cluster/c/u-1"),
        **kwargs.pop("config", {}),
    )
    return EventSourceMapping(config, invoker, **kwargs), group


def run_to_end(mapping: EventSourceMapping, produced) -> None:
    ends = Counter()
    for record in produced:
        ends[record.partition] = max(ends[record.partition], record.offset + 1)
    with mapping:
        mapping.run(lambda: all(mapping.committed.get(p, 0) >= end for p, end in ends.items()), idle_timeout_s=30)


def delivered(events) -> list:
    return [record for event in events for batch in parse_kafka_event(event) for record in batch.records]


def test_every_record_delivered_once_in_lambda_shape_and_committed(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap, PARTITIONS)
    produced = produce_round_robin(kafka_bootstrap, topic, 450, PARTITIONS)
    invoker = ScriptedInvoker()
    mapping, group = mapping_for(kafka_bootstrap, topic, invoker)

    run_to_end(mapping, produced)

    got = delivered(invoker.events)
    for partition in range(PARTITIONS):  # each partition in offset order, across batches too
        assert [r for r in got if r.partition == partition] == [r for r in produced if r.partition == partition]
    assert len(got) == len(produced)
    for event in invoker.events:
        assert event["eventSource"] == "aws:kafka" and event["bootstrapServers"] == kafka_bootstrap
        assert sum(len(group) for group in event["records"].values()) <= 100
        for key, group_records in event["records"].items():
            assert {f"{r['topic']}-{r['partition']}" for r in group_records} == {key}
            offsets = [r["offset"] for r in group_records]
            assert offsets == sorted(offsets)  # in partition order
            assert all(isinstance(r["headers"][0]["seq"], list) for r in group_records)  # byte arrays
    assert committed_offsets(kafka_bootstrap, group, topic, PARTITIONS) == {0: 150, 1: 150, 2: 150}
    assert mapping.stats.batches == len(invoker.events) and mapping.stats.records == 450


def test_a_failed_batch_is_retried_whole_and_committed_only_after_success(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap, PARTITIONS)
    produced = produce_round_robin(kafka_bootstrap, topic, 240, PARTITIONS)
    commits_seen_while_failing: list[dict[int, int]] = []
    group_holder: dict[str, str] = {}

    def look(_event) -> None:
        if len(invoker.events) <= 3:  # during the failing attempts of the first batch
            commits_seen_while_failing.append(committed_offsets(kafka_bootstrap, group_holder["g"], topic, PARTITIONS))

    invoker = ScriptedInvoker(fail={1, 2}, on_invoke=look)
    mapping, group = mapping_for(kafka_bootstrap, topic, invoker)
    group_holder["g"] = group

    run_to_end(mapping, produced)

    assert invoker.events[0] == invoker.events[1] == invoker.events[2]  # the same batch, unchanged
    assert len(commits_seen_while_failing) == 3
    assert all(set(c.values()) == {-1001} for c in commits_seen_while_failing)  # nothing committed yet
    assert mapping.stats.failed_invocations == 2
    assert mapping.stats.errors == ["RuntimeError: scripted failure"]
    once = delivered(invoker.events[2:])
    assert sorted(once, key=lambda r: (r.partition, r.offset)) == produced


def test_a_lost_commit_means_the_batch_comes_again_after_a_rebalance(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap, PARTITIONS)
    produced = produce_round_robin(kafka_bootstrap, topic, 120, PARTITIONS)
    losses = iter([True])
    invoker = ScriptedInvoker()
    mapping, _group = mapping_for(kafka_bootstrap, topic, invoker, lose_commit=lambda: next(losses, False))

    run_to_end(mapping, produced)

    first = {(r.partition, r.offset) for r in delivered(invoker.events[:1])}
    counts = Counter((r.partition, r.offset) for r in delivered(invoker.events))
    assert first and all(counts[ident] == 2 for ident in first)  # redelivered from the committed offsets
    assert all(counts[(r.partition, r.offset)] == 1 for r in produced if (r.partition, r.offset) not in first)
    assert mapping.stats.rebalances == 1


def test_batches_respect_the_payload_limit(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap, 1)
    produced = produce_round_robin(kafka_bootstrap, topic, 60, 1, size=2000)
    invoker = ScriptedInvoker()
    limit = 12_000
    mapping, _group = mapping_for(
        kafka_bootstrap, topic, invoker, limits=BatchLimits(batch_size=1000, window_ms=300, max_payload_bytes=limit)
    )

    run_to_end(mapping, produced)

    import json

    assert all(len(json.dumps(event)) <= limit for event in invoker.events)
    assert len(invoker.events) >= 60 * 2000 // limit
    assert sorted(delivered(invoker.events), key=lambda r: r.offset) == produced


def test_a_batch_that_keeps_failing_stops_the_mapping_with_nothing_committed(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap, 1)
    produced = produce_round_robin(kafka_bootstrap, topic, 10, 1)
    invoker = ScriptedInvoker(fail=set(range(1, 100)))
    mapping, group = mapping_for(kafka_bootstrap, topic, invoker, config={"max_attempts": 3})

    with pytest.raises(DeliveryError, match=r"batch of 10 records starting at .*-0@0 failed 3 times; last error: Runt"):
        run_to_end(mapping, produced)

    assert len(invoker.events) == 3
    assert committed_offsets(kafka_bootstrap, group, topic, 1) == {0: -1001}


def test_after_a_rebalance_latest_resumes_where_delivery_began_not_at_the_log_end(kafka_bootstrap):
    """LATEST only decides where the mapping starts; a rejoin before the first commit must not
    skip the records delivered but not committed (auto.offset.reset would, for LATEST)."""
    topic = new_topic(kafka_bootstrap, 1)
    losses = iter([True, True])
    invoker = ScriptedInvoker()
    mapping, _group = mapping_for(
        kafka_bootstrap,
        topic,
        invoker,
        lose_commit=lambda: next(losses, False),
        config={"starting_position": "LATEST"},
    )
    with mapping:
        mapping.join(timeout_s=30)
        produced = produce_round_robin(kafka_bootstrap, topic, 50, 1)
        mapping.run(lambda: mapping.committed.get(0, 0) >= 50, idle_timeout_s=30)

    counts = Counter(r.offset for r in delivered(invoker.events))
    assert set(counts) == {r.offset for r in produced}  # nothing skipped
    assert counts[0] == 3  # the first batch came three times: two lost commits
    assert mapping.stats.rebalances == 2


class RecordingDestination:
    def __init__(self) -> None:
        self.sent: list[tuple[list[int], str]] = []

    def send(self, records, reason: str, detail: str) -> None:
        self.sent.append(([record.offset for record in records], reason))


def test_with_a_destination_and_unbounded_retries_aws_gives_up_after_10_and_moves_on(kafka_bootstrap):
    """AWS: "When you configure both infinite retries and an on-failure destination, Lambda
    automatically applies a maximum of 10 retry attempts" (Kafka on-failure destinations): the
    batch goes to the destination and its offsets are committed -- it is not in the archive. The
    stack therefore gives a Kafka mapping a destination only with bounded retries."""
    topic = new_topic(kafka_bootstrap, 1)
    produced = produce_round_robin(kafka_bootstrap, topic, 10, 1)
    invoker = ScriptedInvoker(fail=set(range(1, 12)))  # the first attempt and 10 retries fail
    destination = RecordingDestination()
    mapping, group = mapping_for(kafka_bootstrap, topic, invoker, config={"on_failure": destination})

    run_to_end(mapping, produced)

    assert len(invoker.events) == 11
    assert destination.sent == [(list(range(10)), "RetryAttemptsExhausted")]
    assert (mapping.stats.abandoned_batches, mapping.stats.abandoned_records) == (1, 10)
    assert committed_offsets(kafka_bootstrap, group, topic, 1) == {0: 10}  # moved past the batch


def test_bounded_retries_send_the_batch_to_the_destination_after_that_many(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap, 1)
    produced = produce_round_robin(kafka_bootstrap, topic, 20, 1)
    invoker = ScriptedInvoker(fail={1, 2, 3})  # one attempt and two retries of the first batch
    destination = RecordingDestination()
    mapping, group = mapping_for(
        kafka_bootstrap,
        topic,
        invoker,
        config={"on_failure": destination, "retry_attempts": 2},
        limits=BatchLimits(batch_size=10, window_ms=200),
    )

    run_to_end(mapping, produced)

    assert destination.sent == [(list(range(10)), "RetryAttemptsExhausted")]
    assert delivered(invoker.events[3:]) == produced[10:]  # the next batch is delivered as usual
    assert committed_offsets(kafka_bootstrap, group, topic, 1) == {0: 20}


def test_without_a_destination_retries_are_unbounded(kafka_bootstrap):
    """The stack's default: a failing batch is retried, never given up (here until the local
    mapping's own safety stop, which AWS does not have)."""
    topic = new_topic(kafka_bootstrap, 1)
    produced = produce_round_robin(kafka_bootstrap, topic, 10, 1)
    invoker = ScriptedInvoker(fail=set(range(1, 40)))
    mapping, group = mapping_for(kafka_bootstrap, topic, invoker, config={"max_attempts": 30})
    assert mapping.config.retry_limit is None

    with pytest.raises(DeliveryError):
        run_to_end(mapping, produced)

    assert len(invoker.events) == 30  # past AWS's 10: no cap without a destination
    assert mapping.stats.abandoned_batches == 0
    assert committed_offsets(kafka_bootstrap, group, topic, 1) == {0: -1001}
