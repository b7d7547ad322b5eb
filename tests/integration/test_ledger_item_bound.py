"""A batch whose every record lies in another event hour must never grow the partition's ledger
item past ``archive.ledger_item_budget``: the writer accepts it in chunks (at most
``max_open_buffers`` new buffers each), rotating and flushing between them -- and it stays
exactly-once through crashes and S3 outages while it does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from boto3.dynamodb.types import Binary, TypeDeserializer
from botocore.exceptions import EndpointConnectionError

from tests.conftest import Archive, make_archive
from tests.support.events import msk_event
from tests.support.harness import (
    EsmModel,
    assert_exactly_once,
    example_config_data,
    finish,
    staged_files,
)
from tests.support.workload import HOUR_MS, Workload, utc_hour
from tidemark.archiver import Archiver
from tidemark.config import TidemarkConfig, parse_config
from tidemark.exceptions import LedgerFullError
from tidemark.faults import AFTER_ACCEPT, ALL_CRASH_POINTS, CrashAt
from tidemark.ledger.dynamodb import STATE_SK, item_size
from tidemark.records.model import Record
from tidemark.verify import ExpectedRecord

START_S = 1_767_225_600  # 2026-01-01T00:00:00Z, well before the ManualClock's 2026-11-21T08
SMALL_BUDGET = 4 * 1024  # the smallest budget the config accepts; one chunk of 8 buffers fits it
OPEN_LIMIT = 8
WIDE = 120  # records, each in an hour of its own: 15 chunks of OPEN_LIMIT, many 4 KiB items' worth


def wide_workload(count: int, *, step_hours: int = 2) -> Workload:
    """``count`` orders on partition 0, each ``created_at`` (epoch seconds) ``step_hours`` after
    the previous one: every record in an event hour of its own."""
    records: list[Record] = []
    expected: list[ExpectedRecord] = []
    for offset in range(count):
        created_s = START_S + offset * step_hours * HOUR_MS // 1000 + offset  # distinct seconds, too
        value = orjson.dumps({"order_id": f"o-{offset}", "price": 1.5, "quantity": 2, "created_at": created_s})
        records.append(Record("orders", 0, offset, created_s * 1000, value, f"o-{offset}".encode()))
        expected.append(ExpectedRecord(0, offset, value, utc_hour(created_s * 1000)))
    assert len({item.hour for item in expected}) == count
    return Workload({0: records}, expected)


def wide_config(budget: str | None = None, max_open_buffers: int = OPEN_LIMIT) -> TidemarkConfig:
    data = example_config_data()
    if budget is not None:
        data["archive"]["ledger_item_budget"] = budget
    data["streams"][0]["flush"] = {
        "max_records": 100_000,
        "max_bytes": "64MiB",
        "max_age": "15m",
        "max_open_buffers": max_open_buffers,
        "max_segments": min(200, 4800 // max_open_buffers),
    }
    return parse_config(data)


class StateItemSizes:
    """Sizes (as the ledger counts them, ``item_size``) of every partition STATE item sent in a
    PutItem or TransactWriteItems request of one DynamoDB client."""

    def __init__(self, client: Any) -> None:
        self.sizes: list[int] = []
        self._deserializer = TypeDeserializer()
        for operation in ("PutItem", "TransactWriteItems"):
            client.meta.events.register(f"before-parameter-build.dynamodb.{operation}", self._record)

    def _record(self, params: dict[str, Any], **_kwargs: Any) -> None:
        items = [params["Item"]] if "Item" in params else []
        items += [action["Put"]["Item"] for action in params.get("TransactItems", ()) if "Put" in action]
        for wire in items:
            if wire["sk"] == {"S": STATE_SK}:
                self.sizes.append(item_size({name: self._plain(value) for name, value in wire.items()}))

    def _plain(self, value: Any) -> Any:
        plain = self._deserializer.deserialize(value)
        return bytes(plain) if isinstance(plain, Binary) else plain  # type: ignore[call-overload]

    @property
    def largest(self) -> int:
        assert self.sizes, "no STATE item was written"
        return max(self.sizes)


def committed_object_count(archive: Archive) -> int:
    return sum(
        len(page.get("Contents", []))
        for prefix in ("raw/", "errors/")
        for page in archive.s3.get_paginator("list_objects_v2").paginate(Bucket=archive.bucket, Prefix=prefix)
    )


def test_when_the_budget_binds_before_max_open_buffers_the_oldest_buffers_make_room(archive: Archive) -> None:
    """max_open_buffers 200 lets a chunk open far more buffers than a 4 KiB item holds: the
    budget limits the chunk, and the writer seals the least recently appended buffers
    (``ledger_budget``) to make room, instead of failing the batch with nothing waiting on S3."""
    config = wide_config("4KiB", max_open_buffers=200)
    workload = wide_workload(WIDE)
    sizes = StateItemSizes(archive.dynamodb)
    outcome = Archiver(archive.runtime(config)).handle(msk_event(workload.records[0]))["orders"]
    assert outcome.staged == WIDE and outcome.chunks > 0
    assert {flush.reason for flush in outcome.flushes} == {"ledger_budget"}
    assert sizes.largest <= SMALL_BUDGET
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    esm.committed[0] = WIDE
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)
    assert sizes.largest <= SMALL_BUDGET


def test_wide_batch_is_accepted_in_chunks_within_the_item_budget(archive: Archive) -> None:
    config = wide_config("4KiB")
    workload = wide_workload(WIDE)
    sizes = StateItemSizes(archive.dynamodb)
    runtime = archive.runtime(config)
    outcome = Archiver(runtime).handle(msk_event(workload.records[0]))["orders"]
    assert outcome.staged == WIDE
    assert outcome.chunks >= WIDE // (2 * OPEN_LIMIT)  # never more than twice the limit open at once
    assert len(outcome.flushes) >= WIDE - 2 * OPEN_LIMIT  # flushed between chunks, not all at the end
    assert len(runtime.ledger.load("orders", 0).buffers) <= 2 * OPEN_LIMIT
    assert sizes.largest <= SMALL_BUDGET
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    esm.committed[0] = WIDE  # the invocation succeeded: the ESM committed the batch
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)  # each record in its own hour's folder, once
    assert committed_object_count(archive) == WIDE
    assert staged_files(archive) == set()
    assert sizes.largest <= SMALL_BUDGET


def test_wide_batch_crashing_between_chunks_is_redelivered_exactly_once(archive: Archive) -> None:
    config = wide_config("4KiB")
    workload = wide_workload(WIDE)
    sizes = StateItemSizes(archive.dynamodb)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    injector = CrashAt(AFTER_ACCEPT, nth=3)
    assert not esm.deliver(esm.batch(0, WIDE), injector)
    assert injector.fired and esm.crashes == 1
    staged = archive.runtime(config).ledger.load("orders", 0).staged_offset
    assert 0 < staged < WIDE - 1  # the crash hit after the third chunk: part of the batch is accepted
    assert esm.deliver(esm.batch(0, WIDE))  # the ESM redelivers the whole batch, without faults
    finish(archive, config, esm, batch=WIDE)
    assert_exactly_once(archive, config, esm)
    assert staged_files(archive) == set()
    assert sizes.largest <= SMALL_BUDGET


def test_wide_batch_during_an_s3_outage_loses_nothing_and_stays_within_budget(archive: Archive) -> None:
    config = wide_config("4KiB")
    workload = wide_workload(WIDE)
    sizes = StateItemSizes(archive.dynamodb)
    down = {"on": True}

    def s3_down(**_kwargs: Any) -> None:
        if down["on"]:
            raise EndpointConnectionError(endpoint_url="https://s3.us-east-1.amazonaws.com")

    for operation in ("PutObject", "CreateMultipartUpload"):
        archive.s3.meta.events.register(f"before-call.s3.{operation}", s3_down)
    runtime = archive.runtime(config)
    # Sealed flushes pile up in the item while S3 is down, until not one more record fits.
    with pytest.raises(LedgerFullError, match="no record fits in the ledger item"):
        Archiver(runtime).handle(msk_event(workload.records[0]))
    state = runtime.ledger.load("orders", 0)
    assert state.sealed and 0 < state.staged_offset < WIDE - 1
    assert state.referenced_segments() <= staged_files(archive)
    assert committed_object_count(archive) == 0
    assert sizes.largest <= SMALL_BUDGET
    down["on"] = False
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    finish(archive, config, esm, batch=WIDE)  # the ESM redelivers the whole batch
    assert_exactly_once(archive, config, esm)
    assert staged_files(archive) == set()
    assert sizes.largest <= SMALL_BUDGET


def state_bytes_per_object(archive: Archive, hours: int) -> tuple[float, int]:
    """Archive one batch of ``hours`` consecutive event hours under the default item budget;
    the STATE bytes written per committed object, and the largest STATE item."""
    config = wide_config(max_open_buffers=OPEN_LIMIT)
    workload = wide_workload(hours, step_hours=1)
    sizes = StateItemSizes(archive.dynamodb)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    finish(archive, config, esm, batch=hours)
    assert_exactly_once(archive, config, esm)
    objects = committed_object_count(archive)
    assert objects == hours
    return sum(sizes.sizes) / objects, sizes.largest


def test_ledger_cost_is_proportional_to_the_work_not_to_the_width_of_the_batch(
    moto_endpoint: str, tmp_path: Path
) -> None:
    narrow_cost, narrow_largest = state_bytes_per_object(make_archive(moto_endpoint, tmp_path / "narrow"), 40)
    wide_cost, wide_largest = state_bytes_per_object(make_archive(moto_endpoint, tmp_path / "wide"), 200)
    # Accepting the 200 hours in one item (max_open_buffers 200) writes a ~9 KB item and ~4.9 KB
    # of STATE per object, as every commit rewrites what is still sealed: the cost grows with the
    # width of the batch. In chunks of 8 buffers it is flat: ~1.7 KB at most, ~1.6 KB per object
    # (the narrow run's figures are a little lower only because the fingerprint window, 64
    # offsets, has not filled yet).
    assert wide_largest < 3 * 1024
    assert wide_cost < 2.5 * 1024
    assert wide_largest <= narrow_largest * 1.5
    assert wide_cost <= narrow_cost * 1.5


@pytest.mark.parametrize("point", ALL_CRASH_POINTS)
def test_a_crash_at_any_point_between_chunks_is_recovered(archive: Archive, point: str) -> None:
    """The fault-injection suite over the chunked accept: 40 hours, at most 4 new buffers per
    chunk, so every crash point falls between chunks (the 2nd time it is hit), with rotations and
    flushes of the earlier chunks around it. The redelivery stages the rest, exactly once."""
    config = wide_config("4KiB", max_open_buffers=4)
    workload = wide_workload(40)
    sizes = StateItemSizes(archive.dynamodb)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    injector = CrashAt(point, 2)
    assert not esm.deliver(workload.records[0], injector)
    assert injector.fired and esm.crashes == 1
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)
    assert staged_files(archive) == set()
    assert sizes.largest <= SMALL_BUDGET
