"""A queue whose dedupe index is damaged ("file is not a database"): issue 28, finding 3.

Before, every archiver run and every sweep failed on it, so messages already accepted were never
flushed, and nothing said how to recover. Now: the archiver refuses the queue's batches (the
broker keeps them), the sweeper flushes what is accepted -- keeping the flushed segments aside,
since a rebuild needs their ids -- and rebuilds the index from the staged segments, the kept ones
and the objects committed within the window. Every id ends archived exactly once, checked in S3.
"""

from __future__ import annotations

import pytest

from tests.integration.test_rabbitmq_exactly_once import assert_exactly_once, finish, queue_config
from tests.support.harness import damage_first_segment
from tests.support.queue_model import BROKER_ARN, QueueModel, publish_orders
from tidemark.archiver import Archiver
from tidemark.dedupe.exceptions import DedupeIndexDamagedError
from tidemark.records.rabbitmq_esm import build_rabbitmq_event


def damage(archive) -> None:
    index = archive.staging_root / "orders" / "dedupe" / "p0.sqlite"
    assert index.exists()
    index.write_bytes(b"this is not an SQLite database " * 512)


def kept_dir(archive):
    return archive.staging_root / "orders" / "p0" / "kept"


def test_a_damaged_index_refuses_batches_and_the_sweep_rebuilds_it(archive):
    config = queue_config()
    published = publish_orders(120, seed=31, repeats=0)
    messages = published.messages
    model = QueueModel(list(messages[:80]), lambda crash: archive.runtime(config, crash))
    model.drain(30)  # 80 accepted: some flushed (40 records a buffer), some open
    damage(archive)

    warm = model._warm
    with pytest.raises(DedupeIndexDamagedError, match="refused"):
        Archiver(warm).handle(build_rabbitmq_event(messages[80:], broker_arn=BROKER_ARN, queue="orders"))

    archive.clock.advance(minutes=16)
    archive.runtime(config).writer(config.streams[0], 0).maintain()  # rebuilds, then flushes as usual
    assert list((archive.staging_root / "orders" / "dedupe").glob("p0.sqlite.damaged-*"))
    assert not kept_dir(archive).exists()

    model.ready.extend(messages)  # the broker redelivers everything: the first 80 are duplicates
    finish(archive, config, model, 25)
    assert_exactly_once(archive, config, published)


def test_a_rebuild_that_fails_still_flushes_keeping_the_segments_and_the_next_sweep_rebuilds(archive, monkeypatch):
    config = queue_config()
    published = publish_orders(70, seed=32, repeats=0, hours=1)
    messages = published.messages
    model = QueueModel(list(messages[:30]), lambda crash: archive.runtime(config, crash))
    model.drain(30)  # 30 accepted, OPEN (below 40 records a buffer)
    damage(archive)
    archive.clock.advance(minutes=16)  # due by age

    def unreadable(*_args, **_kwargs):
        raise OSError("S3 is down")

    monkeypatch.setattr("tidemark.dedupe.rebuild.archived_ids", unreadable)
    outcome = archive.runtime(config).writer(config.streams[0], 0).maintain()
    assert sum(flush.records for flush in outcome.flushes) == 30  # flushed although damaged
    kept = sorted(path.name for path in kept_dir(archive).glob("*.seg"))
    assert kept and not list((archive.staging_root / "orders" / "p0").glob("*.seg"))

    monkeypatch.undo()
    archive.runtime(config).writer(config.streams[0], 0).maintain()  # rebuilds, with the kept segments
    assert not kept_dir(archive).exists()

    model.ready.extend(messages)  # the first 30 come again: duplicates by the rebuilt index
    finish(archive, config, model, 20)
    assert_exactly_once(archive, config, published)


def test_a_quarantined_flush_does_not_stop_the_rebuild(archive):
    """A flush quarantined for a damaged segment holds ids nobody can read back: the rebuild
    indexes everything else and goes through (it must not fail on that segment at every sweep,
    which would leave the queue refused for good)."""
    config = queue_config(flush={"max_records": 1000, "max_bytes": "1MiB", "max_age": "15m"})
    published = publish_orders(60, seed=33, no_id=0, bad=0, repeats=0, hours=1)
    model = QueueModel(list(published.messages), lambda crash: archive.runtime(config, crash))
    model.drain(30)
    runtime = archive.runtime(config)
    raw = [b for b in runtime.ledger.load("orders", 0).buffers.values() if b.key.kind == "raw"]
    hour = max(raw, key=lambda buffer: buffer.records).key.hour
    damage_first_segment(archive, runtime, 0, hour)
    archive.clock.advance(minutes=16)
    runtime.writer(config.streams[0], 0).maintain()
    assert runtime.ledger.load("orders", 0).quarantined  # its ids: in an unreadable segment

    damage(archive)
    archive.runtime(config).writer(config.streams[0], 0).maintain()
    assert list((archive.staging_root / "orders" / "dedupe").glob("p0.sqlite.damaged-*"))  # rebuilt
