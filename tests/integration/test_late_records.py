"""Late records go to their own event hour and never force the current hour to rotate."""

from __future__ import annotations

import orjson

from tests.support.events import msk_event
from tests.support.harness import small_config
from tests.support.workload import BASE_MS, HOUR_MS
from tidemark.archiver import Archiver
from tidemark.records.model import Record

CURRENT = BASE_MS + 30 * 60_000  # 08:30
LATE = BASE_MS - 5 * HOUR_MS + 10 * 60_000  # 03:10, five hours late


def order(offset: int, event_ms: int) -> Record:
    value = orjson.dumps({"order_id": f"o-{offset}", "price": 1.0, "quantity": 1, "created_at": event_ms})
    return Record("orders", 0, offset, CURRENT + offset, value, f"o-{offset}".encode())


def test_late_records_join_their_own_hour_without_rotating_the_current_one(archive):
    config = small_config(max_records=50)
    runtime = archive.runtime(config)
    archiver = Archiver(runtime)
    current = [order(offset, CURRENT + offset) for offset in range(30)]
    archiver.handle(msk_event(current))
    before = runtime.ledger.load("orders", 0).buffers["raw/2026-11-21T08"]

    # 60 late records trickle in: enough to fill *their* buffer past max_records once.
    late = [order(offset, LATE + offset) for offset in range(30, 90)]
    for start in range(0, 60, 20):
        archiver.handle(msk_event(late[start : start + 20]))

    state = runtime.ledger.load("orders", 0)
    after = state.buffers["raw/2026-11-21T08"]
    # The current hour's buffer is still the same open buffer, untouched by the late data.
    assert (after.seq, after.segments, after.records) == (before.seq, before.segments, 30)
    # The late hour filled up on its own: one object of 60 records, in the 03h folder.
    keys = sorted(item["Key"] for item in archive.s3.list_objects_v2(Bucket=archive.bucket)["Contents"])
    assert keys == ["raw/orders/2026/11/21/03/orders+0+00000000000000000030-00000000000000000089.jsonl.zst"]
    assert "raw/2026-11-21T03" not in state.buffers
    head = archive.s3.head_object(Bucket=archive.bucket, Key=keys[0])
    assert head["Metadata"]["tidemark-records"] == "60"
    committed = runtime.ledger.committed_objects("orders", "2026-11-21T03")
    assert [(c.key, c.records, c.first, c.last) for c in committed] == [(keys[0], 60, 30, 89)]
    assert committed[0].sha256 == head["Metadata"]["tidemark-sha256"]


def test_one_late_record_does_not_make_a_small_file_per_batch(archive):
    """Late records of one hour accumulate across batches into one buffer (no small files)."""
    config = small_config(max_records=1000)
    runtime = archive.runtime(config)
    archiver = Archiver(runtime)
    offset = 0
    for _batch in range(10):
        batch = [order(offset + i, CURRENT + offset + i) for i in range(9)] + [order(offset + 9, LATE + offset)]
        archiver.handle(msk_event(batch))
        offset += 10
    state = runtime.ledger.load("orders", 0)
    assert sorted(state.buffers) == ["raw/2026-11-21T03", "raw/2026-11-21T08"]
    assert state.buffers["raw/2026-11-21T03"].records == 10
    assert state.buffers["raw/2026-11-21T08"].records == 90
    assert "Contents" not in archive.s3.list_objects_v2(Bucket=archive.bucket)
