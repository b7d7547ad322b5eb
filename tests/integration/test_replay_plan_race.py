"""A replay planned beside a live archiver (issue 29, finding 1): a flush that commits while the
replay plans is either in the plan or left whole to a rerun -- never skipped below what the replay
produces, which a rerun (resuming past the positions the target holds) could not recover.

The archive: one partition over two hours; the first hour's last records still in an OPEN buffer
while the second hour's objects are committed above them. The sweeper's drain is forced into the
plan at a ledger read (as the suite's ``RunOtherAt`` tests force interleavings).
"""

from __future__ import annotations

from typing import Any

from tests.integration.test_replay import Got, hours_of, read_back
from tests.support.harness import EsmModel, small_config
from tests.support.kafka import new_topic
from tests.support.workload import make_orders
from tidemark.ledger.dynamodb import DynamoDBLedger
from tidemark.replay import KafkaTarget, Replayer, ReplayReport

STREAM = "orders"


def interleaved(archive: Any, config: Any, at: str, action: Any) -> DynamoDBLedger:
    """A replayer whose ledger runs ``action`` once, right before its first ``at`` call."""
    ledger = DynamoDBLedger(archive.table, client=archive.dynamodb)
    original = getattr(ledger, at)

    def first_then_original(*args: Any, **kwargs: Any) -> Any:
        setattr(ledger, at, original)
        action()
        return original(*args, **kwargs)

    setattr(ledger, at, first_then_original)
    return ledger


#: every hour the archive may hold: the same replay (the same id) for every run
FIRST_HOUR, LAST_HOUR = "2026-01-01T00", "2027-12-31T23"


def replay(archive: Any, config: Any, ledger: DynamoDBLedger, bootstrap: str, topic: str) -> ReplayReport:
    with KafkaTarget(bootstrap, topic) as target:
        report = Replayer(
            config, STREAM, ledger, archive.s3, archive.bucket, target, topic=topic,
            first_hour=FIRST_HOUR, last_hour=LAST_HOUR,
        ).run()  # fmt: skip
    return report


def sources(got: list[Got]) -> list[tuple[int, int]]:
    return sorted(item.source for item in got)


def archive_with_an_open_first_hour(archive: Any) -> tuple[Any, Any, EsmModel]:
    config = small_config(max_records=60, max_age="6h")  # the first hour's tail stays OPEN
    workload = make_orders(partitions=1, per_partition=400, hours=2, seed=29, late_share=0.0, bad_share=0.0)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    esm.drain(50)
    state = archive.runtime(config).ledger.load(STREAM, 0)
    assert state.buffers and not state.sealed  # something staged ...
    assert archive.runtime(config).ledger.committed_objects(STREAM, hours_of(archive)[1])  # ... below committed
    return config, workload, esm


def test_a_flush_committing_while_the_replay_plans_is_never_skipped(archive, kafka_bootstrap):
    """Failing first (the issue's reproduction): the plan read the committed objects, then the
    states; the drain forced at the first state read committed the open buffer in between, in
    neither read: run 1 produced the rest, run 2 resumed above the missing records."""
    config, workload, _esm = archive_with_an_open_first_hour(archive)
    topic = new_topic(kafka_bootstrap, 1)

    def drain() -> None:
        archive.runtime(config).writer(config.streams[0], 0).drain()

    replay(archive, config, interleaved(archive, config, "load", drain), kafka_bootstrap, topic)
    replay(archive, config, DynamoDBLedger(archive.table, client=archive.dynamodb), kafka_bootstrap, topic)
    got = read_back(kafka_bootstrap, topic)
    assert sources(got) == sorted((r.partition, r.offset) for r in workload.all_records())


def test_records_committed_after_the_plan_began_are_left_whole_to_a_rerun(archive, kafka_bootstrap):
    """Records accepted after the plan read the states (a flush of them committing while the
    objects are read) are beyond the plan's reach: the replay stops at the position it read, and
    the rerun produces the rest -- every record once."""
    config, workload, _esm = archive_with_an_open_first_hour(archive)
    archive.runtime(config).writer(config.streams[0], 0).drain()  # nothing staged: the plan may go on
    more = make_orders(partitions=1, per_partition=60, hours=1, seed=30, late_share=0.0, bad_share=0.0)
    later = [r._replace(offset=r.offset + 400) for r in more.records[0]]
    topic = new_topic(kafka_bootstrap, 1)

    def accept_and_flush() -> None:
        from tests.support.events import msk_event
        from tidemark.archiver import Archiver

        Archiver(archive.runtime(config)).handle(msk_event(later))
        archive.runtime(config).writer(config.streams[0], 0).drain()

    ledger = interleaved(archive, config, "committed_objects", accept_and_flush)
    ledger.register_partitions(STREAM, [0])  # (as the sweeper does: else the plan reads the state again)
    first = replay(archive, config, ledger, kafka_bootstrap, topic)
    second = replay(archive, config, DynamoDBLedger(archive.table, client=archive.dynamodb), kafka_bootstrap, topic)
    got = read_back(kafka_bootstrap, topic)
    expected = sorted([(r.partition, r.offset) for r in workload.all_records()] + [(0, r.offset) for r in later])
    assert sources(got) == expected
    assert (first.produced, second.produced) == (400, 60)  # the later records are the rerun's
    assert first.later_objects > 0 and second.later_objects == 0  # and the first run said so
