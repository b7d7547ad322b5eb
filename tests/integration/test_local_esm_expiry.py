"""Expired consumer-group offsets, end to end: the local mapping models Kafka's expiry (the group's
offsets deleted on the broker, delivery restarting at ``TRIM_HORIZON``) in front of the real
archiver handler, and the redelivered log settles as duplicates, with no operator and nothing
archived twice."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import pytest

from tests.conftest import REPO, Archive
from tests.support.harness import small_config_data
from tests.support.kafka import committed_offsets, new_topic, produce_round_robin
from tests.support.workload import utc_hour
from tidemark.config import parse_config
from tidemark.config.loader import ENV_JSON
from tidemark.embedded.esm.batching import BatchLimits
from tidemark.embedded.esm.invokers import InProcessInvoker, Invocation
from tidemark.embedded.esm.mapping import EventSourceMapping, MappingConfig
from tidemark.embedded.lambda_runtime import HandlerRef
from tidemark.records.esm import EventSource
from tidemark.verify import ExpectedRecord, verify_archive

PARTITIONS = 1
#: 700 records in batches of 16: 44 accepts, more than the 32 the ledger fingerprints, so the
#: redelivery from TRIM_HORIZON reaches below that window (where only the marks can tell), and
#: every batch of 16 consecutive offsets holds a marked one (a multiple of 16)
RECORDS, BATCH = 700, 16


class Archiver:
    """The real archiver handler in process (one warm container); every invocation's result."""

    def __init__(self) -> None:
        self.handler = InProcessInvoker(HandlerRef.for_function(REPO, "archiver"), io.StringIO())
        self.results: list[Invocation] = []

    def invoke(self, event: dict[str, Any]) -> Invocation:
        result = self.handler.invoke(event)
        self.results.append(result)
        return result


def test_after_the_groups_offsets_expire_the_retained_log_comes_again_and_settles(
    kafka_bootstrap: str, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = new_topic(kafka_bootstrap, PARTITIONS)
    data = small_config_data(max_records=10_000, topic=topic)  # no flush: the window is all accepts
    stream = data["streams"][0]
    stream.update(event_time={"source": "record_timestamp"}, aggregations=[])
    for name, value in {**archive.env(), ENV_JSON: json.dumps(data)}.items():
        monkeypatch.setenv(name, value)
    config = parse_config(data)
    cluster = config.streams[0].source.cluster_arn
    assert cluster is not None
    produced = produce_round_robin(kafka_bootstrap, topic, RECORDS, PARTITIONS)
    ends = {p: 1 + max(r.offset for r in produced if r.partition == p) for p in range(PARTITIONS)}
    group = f"tidemark-{uuid.uuid4().hex[:8]}"
    mapping_config = MappingConfig(
        kafka_bootstrap,
        topic,
        group,
        limits=BatchLimits(batch_size=BATCH, window_ms=200),
        event_source=EventSource(kafka_bootstrap, event_source_arn=cluster),
    )
    archiver = Archiver()
    mapping = EventSourceMapping(mapping_config, archiver)

    def delivered_to_the_end() -> bool:
        return all(mapping.committed.get(p, 0) >= end for p, end in ends.items())

    with mapping:
        mapping.run(delivered_to_the_end, idle_timeout_s=30)
        first_pass = len(archiver.results)
        mapping.expire_offsets()  # the group sat empty past offsets.retention.minutes
        assert committed_offsets(kafka_bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), -1001)
        mapping.run(delivered_to_the_end, idle_timeout_s=30)

    again = archiver.results[first_pass:]
    assert mapping.stats.offset_expiries == 1
    assert again and all(result.ok for result in again), [r.error for r in again if not r.ok]  # no operator
    assert sum(count(r, "records_in") for r in again) == RECORDS  # the whole retained log came again
    assert sum(count(r, "duplicates") for r in again) == RECORDS  # ... and was dropped as redelivered
    assert sum(count(r, "staged") for r in again) == 0
    assert committed_offsets(kafka_bootstrap, group, topic, PARTITIONS) == ends

    runtime = archive.runtime(config)
    for partition in range(PARTITIONS):
        runtime.writer(config.streams[0], partition).drain()
    expected = [ExpectedRecord(r.partition, r.offset, r.value, utc_hour(r.timestamp_ms)) for r in produced]
    report = verify_archive(archive.s3, archive.bucket, "orders", expected, config=config.streams[0])
    assert report.ok and report.archived == RECORDS and report.summary()["duplicated"] == 0, report.summary()


def count(result: Invocation, field: str) -> int:
    """A figure the archiver reported for an invocation (its response has one summary per stream)."""
    response = result.response if isinstance(result.response, dict) else {}
    return sum(int(stream.get(field, 0)) for stream in response.get("streams", {}).values())
