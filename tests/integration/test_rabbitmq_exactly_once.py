"""Fault injection for a RabbitMQ stream: a queue has no offsets, so exactly once rests on the
dedupe index and the ledger numbering what it accepts (DESIGN.md, "RabbitMQ"). Every crash
point, redeliveries in other batches and another order, lost acks, publisher retries and
repeated ids in one batch: checked from S3 against the ids that were published."""

from __future__ import annotations

import sqlite3

import pytest

from tests.support.harness import RunOtherAt, small_config_data, staged_files
from tests.support.queue_model import BROKER_ARN, QueueModel, publish_orders, rabbitmq_source
from tests.support.queue_schedule import sweep_after_a_dead_archiver
from tidemark.archiver import Archiver
from tidemark.config import parse_config
from tidemark.dedupe.sqlite import SqliteDedupeIndex
from tidemark.exceptions import StagingConflictError
from tidemark.faults import (
    AFTER_ACCEPT,
    AFTER_COMMIT,
    AFTER_SEAL,
    AFTER_SEGMENT_WRITE,
    AFTER_UPLOAD,
    ALL_CRASH_POINTS,
    BEFORE_SEGMENT_WRITE,
    DURING_SEGMENT_WRITE,
    CrashAt,
    SimulatedCrash,
)
from tidemark.records.rabbitmq_esm import build_rabbitmq_event
from tidemark.verify import verify_messages


def queue_config(**stream):
    data = small_config_data(max_records=40)
    data["streams"][0].update(source=rabbitmq_source(), aggregations=[], **stream)
    return parse_config(data)


def finish(archive, config, model: QueueModel, size: int) -> None:
    model.drain(size)
    archive.clock.advance(minutes=31)
    archive.runtime(config).writer(config.streams[0], 0).maintain()


def assert_exactly_once(archive, config, published) -> None:
    report = verify_messages(archive.s3, archive.bucket, "orders", published.expected, config=config.streams[0])
    assert (report.lost, report.duplicated, report.unexpected, report.misfiled, report.corrupted) == (
        [],
        [],
        [],
        [],
        [],
    ), report.summary()
    assert report.archived + report.dead_lettered == report.produced == len(published.expected)
    assert staged_files(archive) == set()


@pytest.mark.parametrize("point", ALL_CRASH_POINTS)
def test_crash_at_each_point_then_redelivery_is_exactly_once(archive, point):
    config = queue_config()
    published = publish_orders(220, seed=hash(point) % 1000)
    model = QueueModel(published.messages, lambda crash: archive.runtime(config, crash))
    injector = CrashAt(point)
    while model.ready and not injector.fired:
        model.deliver(37, injector)
    assert injector.fired, f"crash point {point} was never reached"
    finish(archive, config, model, 23)  # redelivered in other batches, in another order
    assert_exactly_once(archive, config, published)
    reasons = verify_messages(archive.s3, archive.bucket, "orders", published.expected, config=config.streams[0])
    assert set(reasons.dead_letter_reasons) <= {"missing_message_id", "invalid_value_encoding"}


def test_lost_acks_and_publisher_retries_archive_each_id_once(archive):
    config = queue_config()
    published = publish_orders(300, seed=11, repeats=0.2)
    model = QueueModel(published.messages, lambda crash: archive.runtime(config, crash))
    for turn in range(6):  # every other invocation's ack is lost: its messages come again
        model.deliver(29 + turn, lose_ack=turn % 2 == 0)
    finish(archive, config, model, 41)
    assert len(published.messages) > len(published.expected)  # retries were published
    assert_exactly_once(archive, config, published)


def test_repeated_ids_in_one_batch_are_archived_once(archive):
    config = queue_config()
    published = publish_orders(60, seed=5, repeats=1.0, no_id=0, bad=0)  # every message twice, back to back
    model = QueueModel(published.messages, lambda crash: archive.runtime(config, crash))
    runtime = archive.runtime(config)
    from tidemark.archiver import Archiver
    from tidemark.records.rabbitmq_esm import build_rabbitmq_event

    outcomes = Archiver(runtime).handle(
        build_rabbitmq_event(published.messages, broker_arn=rabbitmq_source()["broker_arn"], queue="orders")
    )  # type: ignore[arg-type]
    assert (outcomes["orders"].staged, outcomes["orders"].duplicates) == (60, 60)
    model.ready.clear()
    finish(archive, config, model, 50)
    assert_exactly_once(archive, config, published)


def test_a_crash_between_accept_and_indexing_is_caught_up_from_staging(archive):
    """The accepted batch is not in the index yet: the next run indexes it from its staged
    segments before it dedupes, so the redelivered batch is dropped whole."""
    config = queue_config()
    published = publish_orders(40, seed=9, no_id=0, bad=0, repeats=0)
    model = QueueModel(published.messages, lambda crash: archive.runtime(config, crash))
    assert not model.deliver(40, CrashAt(AFTER_ACCEPT))
    index = archive.staging_root / "orders" / "dedupe" / "p0.sqlite"
    with sqlite3.connect(index) as db:
        assert db.execute("SELECT count(*) FROM ids").fetchone()[0] == 0  # accepted, not indexed
    assert model.deliver(40)  # the redelivery
    with sqlite3.connect(index) as db:
        assert db.execute("SELECT count(*) FROM ids").fetchone()[0] == 40
    finish(archive, config, model, 40)
    assert_exactly_once(archive, config, published)


def test_the_index_keeps_the_window_and_no_more(archive):
    """Entries older than the window are pruned a batch at a time; a duplicate older than the
    window is archived again -- the guarantee's stated limit."""
    config = queue_config(dedupe={"id": "message_id", "window": "1m"})
    published = publish_orders(30, seed=4, no_id=0, bad=0, repeats=0)
    runtime = archive.runtime(config)
    model = QueueModel(published.messages, lambda crash: runtime)
    model.drain(10)
    archive.clock.advance(minutes=2)
    model.ready.extend(published.messages[:5])  # redelivered after the window
    model.drain(10)
    index = archive.staging_root / "orders" / "dedupe" / "p0.sqlite"
    with sqlite3.connect(index) as db:
        rows = db.execute("SELECT count(*) FROM ids").fetchone()[0]
    assert rows == 5  # the 30 old entries pruned, the 5 re-accepted kept
    archive.clock.advance(minutes=31)
    runtime.writer(config.streams[0], 0).maintain()
    report = verify_messages(archive.s3, archive.bucket, "orders", published.expected, config=config.streams[0])
    assert len(report.duplicated) == 5 and not report.lost


@pytest.mark.parametrize("point", ALL_CRASH_POINTS)
def test_an_invocation_inside_another_never_duplicates_nor_loses(archive, point):
    """A timed-out invocation A still runs when B starts (the mapping redelivered A's messages
    and more): when A reaches ``point``, B runs whole, then A carries on. Numbered against a
    state B moved before A accepted anything, A renumbers from a fresh read (its messages B
    archived are then duplicates); accepted and not yet indexed, B indexes A's from staging
    before it dedupes."""
    config = queue_config()
    published = publish_orders(160, seed=13, no_id=0, bad=0, repeats=0)
    messages = published.messages
    model = QueueModel([], lambda crash: archive.runtime(config, crash))

    def handle(runtime, batch):
        return Archiver(runtime).handle(build_rabbitmq_event(batch, broker_arn=BROKER_ARN, queue="orders"))

    hook = RunOtherAt(point, lambda: handle(archive.runtime(config), messages[10:90]))
    handle(archive.runtime(config), messages[0:10])
    outcome = handle(archive.runtime(config, hook), messages[0:60])["orders"]
    assert hook.fired
    renumbered = point in (BEFORE_SEGMENT_WRITE, DURING_SEGMENT_WRITE, AFTER_SEGMENT_WRITE)  # before A's accept
    assert outcome.conflicts >= renumbered  # the lost accept (later conflicts: B's seals and commits)
    assert (outcome.staged, outcome.duplicates) == ((0, 60) if renumbered else (50, 10))
    model.ready.extend(messages[60:160])
    finish(archive, config, model, 33)
    assert_exactly_once(archive, config, published)


@pytest.mark.parametrize("point", [AFTER_SEAL, AFTER_UPLOAD, AFTER_COMMIT])
@pytest.mark.parametrize("b_crashes", [False, True])
def test_a_writer_between_the_chunks_of_a_batch_makes_it_refused_never_lost(archive, point, b_crashes):
    """A's batch spans three hours with one open buffer allowed, so it is accepted a chunk at a
    time with a seal and a flush in between; at ``point`` between chunks B runs (and may crash
    after its accept). A's remaining numbers are stale: A is refused at its next turn, the
    broker redelivers its messages, and what A had accepted is dropped as already archived."""
    data = small_config_data(max_records=1000, max_open_buffers=1, max_segments=100)
    data["streams"][0].update(source=rabbitmq_source(), aggregations=[])
    config = parse_config(data)
    published = publish_orders(80, seed=13, no_id=0, bad=0, repeats=0, hours=3)
    messages = published.messages
    model = QueueModel([], lambda crash: archive.runtime(config, crash))

    def handle(runtime, batch) -> None:
        Archiver(runtime).handle(build_rabbitmq_event(batch, broker_arn=BROKER_ARN, queue="orders"))

    def b() -> None:
        try:
            handle(archive.runtime(config, CrashAt(AFTER_ACCEPT) if b_crashes else None), messages[60:80])
        except SimulatedCrash:
            model.ready.extend(messages[60:80])  # B's batch comes again

    hook = RunOtherAt(point, b)
    with pytest.raises(StagingConflictError, match="numbered after an older position"):
        handle(archive.runtime(config, hook), messages[0:60])
    assert hook.fired
    model.ready.extendleft(reversed(messages[0:60]))  # A's batch comes again
    finish(archive, config, model, 25)
    assert_exactly_once(archive, config, published)


def test_an_index_ahead_of_the_ledger_still_indexes_what_is_accepted(archive):
    """A restored or recreated ledger restarts the positions below the index's: what is accepted
    from then on is still indexed (and the anomaly logged), so redeliveries are dropped."""
    config = queue_config()
    index = archive.staging_root / "orders" / "dedupe" / "p0.sqlite"
    ahead = SqliteDedupeIndex(index)
    ahead.record([], 1000, 0, expired_before_ms=0, prune_limit=0)
    ahead.close()
    published = publish_orders(30, seed=4, no_id=0, bad=0, repeats=0)
    model = QueueModel(published.messages, lambda crash: archive.runtime(config, crash))
    model.deliver(30, lose_ack=True)  # accepted, the ack lost: all of it comes again
    finish(archive, config, model, 30)
    with sqlite3.connect(index) as db:
        assert db.execute("SELECT count(*) FROM ids").fetchone()[0] == 30
    assert_exactly_once(archive, config, published)


def test_a_replaced_broker_does_not_stop_the_queue(archive):
    """The broker (or its id) changes under the same queue: the positions are the ledger's own,
    so nothing about them changed and archiving goes on."""
    config = queue_config()
    published = publish_orders(40, seed=6, no_id=0, bad=0, repeats=0)
    runtime = archive.runtime(config)
    other = BROKER_ARN.replace("b-1234a5b6", "b-99999999")
    Archiver(runtime).handle(build_rabbitmq_event(published.messages[:20], broker_arn=BROKER_ARN, queue="orders"))
    Archiver(runtime).handle(build_rabbitmq_event(published.messages[20:], broker_arn=other, queue="orders"))
    model = QueueModel([], lambda crash: runtime)
    finish(archive, config, model, 20)
    assert_exactly_once(archive, config, published)


def test_the_audit_proves_a_queue_archive_whole_and_rearchive_declines(archive):
    """Positions tile 0..n-1 with no source to ask: the audit is clean. A queue cannot be read
    again, so rearchive declines it."""
    from tidemark.audit import Auditor
    from tidemark.rearchive import Rearchiver
    from tidemark.rearchive.exceptions import UnsupportedSourceError

    config = queue_config()
    published = publish_orders(120, seed=21)
    model = QueueModel(published.messages, lambda crash: archive.runtime(config, crash))
    finish(archive, config, model, 30)
    runtime = archive.runtime(config)
    report = Auditor(config, "orders", runtime.ledger, archive.s3, archive.bucket).run()
    assert report.clean and report.records == len(published.expected), [f.line() for f in report.findings]
    with pytest.raises(UnsupportedSourceError, match="rearchive reads Kafka"):
        Rearchiver(runtime.writer(config.streams[0], 0), runtime.ledger, None).run(0, 10)  # type: ignore[arg-type]


def test_a_batch_of_nothing_but_duplicates_reports_them(archive):
    config = queue_config()
    published = publish_orders(30, seed=2, no_id=0, bad=0, repeats=0)
    runtime = archive.runtime(config)
    event = build_rabbitmq_event(published.messages, broker_arn=BROKER_ARN, queue="orders")
    first, again = (Archiver(runtime).handle(event)["orders"] for _ in range(2))
    assert (first.staged, first.duplicates) == (30, 0)
    assert (again.staged, again.duplicates) == (0, 30)  # DuplicatesDropped says what the redelivery was


def test_a_warm_writer_that_adopts_a_state_it_did_not_catch_up_indexes_it_before_flushing(archive):
    """Issue 28, finding 1 (a). A warm container's cached state is stale; it gets a batch that is
    all duplicates (a lost ack's redelivery), so it numbers nothing and never reads the ledger.
    Meanwhile a cold container accepted 40 more messages and died before indexing them. The warm
    container's rotation loses to that state and adopts it: it must index the 40 ids from their
    staged segments before it seals and flushes (which deletes them). Failing first: 50 produced,
    90 archived."""
    data = small_config_data(max_records=1000, max_age="10m")
    data["streams"][0].update(source=rabbitmq_source(), aggregations=[])
    config = parse_config(data)
    published = publish_orders(50, seed=21, no_id=0, bad=0, repeats=0, hours=1)
    messages = published.messages
    model = QueueModel([], lambda crash: archive.runtime(config, crash))
    warm = archive.runtime(config)

    def handle(runtime, batch) -> None:
        Archiver(runtime).handle(build_rabbitmq_event(batch, broker_arn=BROKER_ARN, queue="orders"))

    handle(warm, messages[0:10])  # accepted, OPEN (no rule due yet); the ack is lost
    with pytest.raises(SimulatedCrash):
        handle(archive.runtime(config, CrashAt(AFTER_ACCEPT)), messages[10:50])  # accepted, not indexed
    archive.clock.advance(minutes=11)  # the open buffers are due by age
    handle(warm, messages[0:10])  # all duplicates; the rotation adopts the cold container's state
    model.ready.extend(messages[10:50])  # the crashed batch comes again
    finish(archive, config, model, 25)
    assert_exactly_once(archive, config, published)


def test_a_sweep_that_adopts_an_archivers_accept_indexes_it_before_flushing(archive):
    """Issue 28, finding 1 (b). The sweeper's ``maintain`` has indexed what was accepted when it
    started; before its rotation writes the ledger, an archiver accepts 40 messages into the same
    open buffers and dies before indexing them. The sweep's seal loses to that state and adopts
    it; it seals and flushes the buffers, the 40 included (deleting their segments): indexed
    first, or they come back as new. Failing first: 80 produced, 120 archived."""
    data = small_config_data(max_records=1000)
    data["streams"][0].update(source=rabbitmq_source(), aggregations=[])
    config = parse_config(data)
    published = publish_orders(80, seed=22, no_id=0, bad=0, repeats=0, hours=1)
    messages = published.messages
    model = QueueModel(list(messages[40:80]), lambda crash: archive.runtime(config, crash))
    Archiver(archive.runtime(config)).handle(build_rabbitmq_event(messages[:40], broker_arn=BROKER_ARN, queue="orders"))
    archive.clock.advance(minutes=16)  # accepted and indexed, OPEN; due by age
    assert sweep_after_a_dead_archiver(archive, config, model, 40)
    model.ready.extend(messages[:40])  # the first batch comes again too (its ack was lost)
    finish(archive, config, model, 40)
    assert_exactly_once(archive, config, published)
