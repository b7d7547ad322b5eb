"""High-cardinality partitioning: one batch whose every record has its own ``partition_by``
value must neither grow memory nor the partition's ledger item past its bounds -- the writer
seals the least recently used buffers (rotation reasons ``max_open_buffers``/``ledger_budget``)
and the archive stays exactly once, every record under its own folder."""

from __future__ import annotations

import orjson

from tests.conftest import Archive
from tests.integration.test_ledger_item_bound import SMALL_BUDGET, StateItemSizes, committed_object_count
from tests.support.events import msk_event
from tests.support.harness import EsmModel, assert_exactly_once, example_config_data, finish, staged_files
from tests.support.workload import Workload, utc_hour
from tidemark.archiver import Archiver
from tidemark.config import TidemarkConfig, parse_config
from tidemark.records.model import Record
from tidemark.verify import ExpectedRecord, verify_archive

CREATED_S = 1_795_244_400  # 2026-11-21T07:00:00Z: one event hour for every record
DISTINCT = 150
OPEN_LIMIT = 6


def tenants_workload(count: int) -> Workload:
    """``count`` orders in one hour, each of another tenant -- some hostile, one without any."""
    records, expected = [], []
    for offset in range(count):
        tenant: object = f"tenant-{offset:05d}"
        if offset == 7:
            tenant = "../../x"
        elif offset == 8:
            tenant = "t" * 10_000
        order = {"order_id": f"o-{offset}", "price": 2.5, "quantity": 1, "created_at": CREATED_S + offset}
        if offset != 9:
            order["tenant"] = tenant
        value = orjson.dumps(order)
        records.append(Record("orders", 0, offset, CREATED_S * 1000, value, f"o-{offset}".encode()))
        expected.append(ExpectedRecord(0, offset, value, utc_hour((CREATED_S + offset) * 1000)))
    return Workload({0: records}, expected)


def tenants_config(fmt: str = "parquet") -> TidemarkConfig:
    data = example_config_data()
    data["archive"]["ledger_item_budget"] = f"{SMALL_BUDGET // 1024}KiB"
    stream = data["streams"][0]
    stream["flush"] = {"max_records": 1000, "max_bytes": "64MiB", "max_age": "15m", "max_open_buffers": OPEN_LIMIT}
    stream["format"] = {"type": fmt}
    stream["partition_by"] = {"fields": ["_value.tenant"], "style": "keys_and_values"}
    return parse_config(data)


def test_every_record_of_its_own_value_stays_within_the_item_budget(archive: Archive) -> None:
    config = tenants_config()
    workload = tenants_workload(DISTINCT)
    sizes = StateItemSizes(archive.dynamodb)
    runtime = archive.runtime(config)
    outcome = Archiver(runtime).handle(msk_event(workload.records[0]))["orders"]
    assert outcome.staged == DISTINCT and outcome.chunks > 0
    reasons = {flush.reason for flush in outcome.flushes}
    assert reasons <= {"max_open_buffers", "ledger_budget"} and reasons, reasons
    assert len(runtime.ledger.load("orders", 0).buffers) <= 2 * OPEN_LIMIT
    assert sizes.largest <= SMALL_BUDGET
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    esm.committed[0] = DISTINCT
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)  # folders checked: each record under its own value
    assert committed_object_count(archive) == DISTINCT
    assert staged_files(archive) == set()
    keys = [
        item["Key"]
        for page in archive.s3.get_paginator("list_objects_v2").paginate(Bucket=archive.bucket, Prefix="raw/")
        for item in page.get("Contents", [])
    ]
    assert all(key.startswith("raw/orders/tenant=") for key in keys)
    assert any("/tenant=..%2F..%2Fx/2026/11/21/07/" in key for key in keys)  # never outside the prefix
    assert any("/tenant=__missing__/" in key for key in keys)
    long_level = next(key.split("/")[2] for key in keys if key.split("/")[2].startswith("tenant=ttt"))
    assert len(long_level) == len("tenant=") + 64 and "~" in long_level


def test_values_breaking_the_declared_schema_are_dead_lettered_and_nothing_is_lost(archive: Archive) -> None:
    """Avro with a declared value schema: orders whose ``price`` is text, or that carry an
    undeclared field, go to the dead-letter objects with ``schema_mismatch`` and every byte;
    the rest are archived as typed records -- each record exactly once."""
    data = example_config_data()
    stream = data["streams"][0]
    stream["flush"] = {"max_records": 40, "max_bytes": "1MiB", "max_age": "15m"}
    stream["format"] = {
        "type": "avro",
        "value_schema": {
            "fields": [
                {"name": "order_id", "type": "string"},
                {"name": "price", "type": "double"},
                {"name": "quantity", "type": "long"},
                {"name": "created_at", "type": "long"},
                {"name": "tenant", "type": "string", "nullable": True},
            ]
        },
    }
    config = parse_config(data)
    records, expected = [], []
    for offset in range(120):
        order: dict[str, object] = {"order_id": f"o-{offset}", "price": 2.5, "quantity": 1, "created_at": CREATED_S}
        if offset % 10 == 3:
            order["price"] = "2.50"  # a string where the schema says double
        elif offset % 10 == 7:
            order["coupon"] = "X"  # a field the schema does not declare
        value = orjson.dumps(order)
        records.append(Record("orders", 0, offset, CREATED_S * 1000, value, f"o-{offset}".encode()))
        bad = offset % 10 in (3, 7)
        expected.append(ExpectedRecord(0, offset, value, None if bad else utc_hour(CREATED_S * 1000)))
    workload = Workload({0: records}, expected)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    esm.drain(40)
    finish(archive, config, esm)
    assert_exactly_once(archive, config, esm)
    report = verify_archive(archive.s3, archive.bucket, "orders", expected, config=config.streams[0])
    assert report.dead_letter_reasons == {"schema_mismatch": 24} and report.archived == 96
