"""Failures found in review: a write that landed but whose reply was lost, records whose bad
times or headers could make routing itself fail, and an accepted segment that disappears."""

from __future__ import annotations

import logging
from typing import Any

import boto3
import orjson
import pytest
from botocore.awsrequest import AWSPreparedRequest
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError
from botocore.httpsession import URLLib3Session

from tests.conftest import Archive
from tests.support.events import msk_event
from tests.support.harness import (
    EsmModel,
    assert_exactly_once,
    example_config_data,
    finish,
    small_config,
    staged_files,
)
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.config import parse_config
from tidemark.records.model import Record
from tidemark.verify import verify_archive

GOOD = b'{"order_id":"a","price":1.0,"quantity":1,"created_at":1795248000000}'


def test_accept_whose_reply_was_lost_is_recognised_as_ours(archive):
    """DynamoDB applies the conditional put but the reply never arrives; botocore retries the
    identical put, which then fails against our own result. The writer must see that the stored
    state references its segments (they carry a random nonce) and keep them."""
    config = small_config(max_records=1000)
    workload = make_orders(partitions=1, per_partition=30, hours=1, seed=5)
    client = boto3.client(
        "dynamodb", endpoint_url=archive.endpoint, config=Config(retries={"mode": "standard", "max_attempts": 8})
    )
    archive.dynamodb = client
    pending = {"lose": 1}
    http = URLLib3Session()

    def apply_then_lose_the_reply(request, **_kwargs):
        if pending["lose"] and b'"PART#orders#0"' in (request.body or b""):
            pending["lose"] -= 1
            http.send(request)  # the server applies the write ...
            raise ReadTimeoutError(endpoint_url=request.url)  # ... and the reply is lost

    client.meta.events.register("before-send.dynamodb.PutItem", apply_then_lose_the_reply)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert esm.deliver(esm.batch(0, 30))
    assert pending["lose"] == 0
    referenced = archive.runtime(config).ledger.load("orders", 0).referenced_segments()
    assert referenced and referenced <= staged_files(archive)
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)


@pytest.mark.parametrize(
    ("timezone", "value", "reason"),
    [
        ("UTC", b'{"order_id":"x","created_at":"1.5e400"}', "invalid_event_time"),
        ("UTC", b'{"order_id":"x","created_at":1.8e306}', "invalid_event_time"),
        ("Asia/Tokyo", b'{"order_id":"x","created_at":"9999-12-31T23:30:00+00:00"}', "invalid_event_time"),
    ],
)
def test_unrepresentable_event_times_are_dead_lettered_not_blocking(archive, timezone, value, reason):
    data = example_config_data()
    data["streams"][0]["event_time"]["timezone"] = timezone
    config = parse_config(data)
    records = [
        Record("orders", 0, 0, 1_795_248_000_000, GOOD, b"k"),
        Record("orders", 0, 1, 1_795_248_000_000, value, b"k"),
    ]
    outcome = Archiver(archive.runtime(config)).handle(msk_event(records))["orders"]
    assert (outcome.staged, dict(outcome.dead_lettered)) == (2, {reason: 1})


@pytest.mark.parametrize("timestamp", [-1, 253_402_300_800_000, 1_795_248_000_000_000])  # none, > 9999, microseconds
def test_dead_letter_with_an_unusable_kafka_timestamp_is_filed_by_processing_time(archive, timestamp):
    config = small_config()
    records = [Record("orders", 0, 0, timestamp, b"not json", b"k")]
    runtime = archive.runtime(config)
    outcome = Archiver(runtime).handle(msk_event(records))["orders"]
    assert dict(outcome.dead_lettered) == {"invalid_value_encoding": 1}
    assert list(runtime.ledger.load("orders", 0).buffers) == ["errors/2026-11-21T08"]  # the ManualClock's hour


def test_huge_headers_are_staged_and_archived(archive):
    """Header counts and lengths beyond 16 bits (a 70 KB header name, 70k headers) frame fine."""
    config = small_config(max_records=2)
    many = tuple((f"h{i}", b"v") for i in range(70_000))
    records = [
        Record("orders", 0, 0, 1_795_248_000_000, GOOD, b"k", (("n" * 70_000, b"long name"),)),
        Record("orders", 0, 1, 1_795_248_000_000, GOOD, b"k", many),
    ]
    runtime = archive.runtime(config)
    outcome = Archiver(runtime).handle(msk_event(records))["orders"]
    assert (outcome.staged, len(outcome.flushes)) == (2, 1)


def test_missing_accepted_segment_is_quarantined_and_the_partition_flows_on(archive):
    config = small_config(max_records=1000)
    workload = make_orders(partitions=1, per_partition=40, hours=1, seed=8, bad_share=0, late_share=0)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    assert esm.deliver(esm.batch(0, 20))
    runtime = archive.runtime(config)
    open_buffers = runtime.ledger.load("orders", 0).buffers
    for segment in archive.staging_root.rglob("raw_*.seg"):
        segment.unlink()
    archive.clock.advance(minutes=16)
    outcome = runtime.writer(config.streams[0], 0).maintain()
    state = runtime.ledger.load("orders", 0)
    assert outcome.quarantined == len(open_buffers) == len(state.quarantined) > 0
    assert all("accepted segment is missing" in held.error for held in state.quarantined.values())
    assert sum(held.flush.buffer.records for held in state.quarantined.values()) == 20
    assert esm.deliver(esm.batch(0, 20))  # later records still archive, exactly once
    archive.clock.advance(minutes=16)
    runtime.writer(config.streams[0], 0).maintain()
    later = [item for item in workload.expected if item.offset >= 20]
    report = verify_archive(archive.s3, archive.bucket, "orders", later)
    assert (report.produced, report.lost, report.duplicated, report.unexpected) == (20, [], [], [])


def test_quarantine_whose_reply_was_lost_is_still_counted_and_reported(
    archive: Archive, caplog: pytest.LogCaptureFixture
) -> None:
    """The quarantine write lands but its reply is lost; botocore retries the identical put, which
    fails against our own result. The writer must still count the flush as quarantined and log
    it at CRITICAL: an operator has to replay its offsets before Kafka's retention expires."""
    config = small_config(max_records=1000)
    records = [Record("orders", 0, offset, 1_795_248_000_000, GOOD, b"k") for offset in range(20)]  # one hour
    client = boto3.client(
        "dynamodb", endpoint_url=archive.endpoint, config=Config(retries={"mode": "standard", "max_attempts": 8})
    )
    archive.dynamodb = client
    runtime = archive.runtime(config)
    assert Archiver(runtime).handle(msk_event(records))["orders"].staged == 20
    assert len(runtime.ledger.load("orders", 0).buffers) == 1
    for segment in archive.staging_root.rglob("raw_*.seg"):
        segment.unlink()
    lost: list[bytes] = []
    http = URLLib3Session()

    def lose_the_quarantine_reply(request: AWSPreparedRequest, **_kwargs: Any) -> None:
        body = request.body if isinstance(request.body, bytes) else b"{}"
        item = orjson.loads(body).get("Item", {})
        if not lost and item.get("quarantined_flushes", {}).get("N", "0") != "0":
            lost.append(body)
            http.send(request)  # the server applies the quarantine ...
            raise ReadTimeoutError(endpoint_url=request.url)  # ... and the reply is lost

    client.meta.events.register("before-send.dynamodb.PutItem", lose_the_quarantine_reply)
    archive.clock.advance(minutes=16)
    before = runtime.ledger.load("orders", 0)
    with caplog.at_level(logging.CRITICAL, logger="tidemark"):
        outcome = runtime.writer(config.streams[0], 0).maintain()
    assert len(lost) == 1  # the quarantine was the write whose reply was lost ...
    assert outcome.conflicts == 1  # ... and the retried put failed against it
    state = runtime.ledger.load("orders", 0)
    assert outcome.quarantined == 1 == len(state.quarantined)
    assert not state.sealed and not state.buffers
    assert state.version == before.version + 2  # the seal, then one quarantine: the retry changed nothing
    ((flush_id, held),) = state.quarantined.items()
    assert "accepted segment is missing" in held.error
    assert held.flush.buffer.records == 20
    reports = [
        r for r in caplog.records if r.levelno == logging.CRITICAL and r.getMessage().startswith("flush quarantined")
    ]
    assert [getattr(r, "flush", None) for r in reports] == [flush_id]
    assert outcome.flushes == []
