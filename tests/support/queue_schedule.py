"""A seeded scheduler for a RabbitMQ stream: warm and cold containers, sweeps and crashes
interleaved at random, then the archive checked from S3 by message id (0 lost, 0 duplicated).

``run_schedule(archive, seed)`` draws the schedule from ``random.Random(seed)``, so a failing
seed replays exactly. Steps (see ``STEPS``):

* ``deliver``: the warm container takes the next batch (its cached state may be stale); the ack
  is lost now and then (the broker redelivers the batch);
* ``crash``: a cold container takes it and dies at a crash point (requeued);
* ``sweep``: the sweeper's ``maintain`` in a container of its own, dying at a crash point now and
  then;
* ``sweep_inside``: a delivery during which, at a crash point, a sweep runs whole;
* ``overlap``: a delivery during which, at a crash point, the warm container takes the next batch
  (a timed-out invocation still running when the mapping invokes again);
* ``adopt``: a sweep whose first ledger write comes after an archiver that accepted a batch and
  died before indexing it (the sweep adopts that state);
* ``tick``: time passes (buffers come due by age).

Used by ``tests/integration/test_rabbitmq_interleavings.py`` (a few seeds) and
``bench/queue_interleavings.py`` (many).
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from typing import Any

from tests.support.harness import RunOtherAt, small_config_data
from tests.support.queue_model import QueueModel, publish_orders, rabbitmq_source
from tidemark.config import TidemarkConfig, parse_config
from tidemark.faults import AFTER_ACCEPT, ALL_CRASH_POINTS, CrashAt, SimulatedCrash
from tidemark.verify import verify_messages

STEPS = ("deliver", "deliver", "crash", "sweep", "sweep_inside", "overlap", "adopt", "tick")


@dataclass
class ScheduleResult:
    seed: int
    steps: list[str]
    produced: int
    archived: int
    dead_lettered: int
    lost: int
    duplicated: int
    other: int  # unexpected, misfiled or corrupted
    crashes: int
    refused: int

    @property
    def exactly_once(self) -> bool:
        return self.lost == self.duplicated == self.other == 0


def schedule_config(rng: random.Random) -> TidemarkConfig:
    data = small_config_data(max_records=rng.choice([20, 40, 1000]), max_age="10m")
    data["streams"][0].update(source=rabbitmq_source(), aggregations=[])
    return parse_config(data)


def run_schedule(archive: Any, seed: int, *, steps: int = 14, messages: int = 160) -> ScheduleResult:
    rng = random.Random(seed)
    config = schedule_config(rng)
    stream = config.streams[0]
    published = publish_orders(messages, seed=seed, hours=2)
    model = QueueModel(published.messages, lambda crash: archive.runtime(config, crash), seed=seed)
    taken: list[str] = []

    def sweep(crash: Any = None) -> None:
        with contextlib.suppress(SimulatedCrash):  # a sweep that died: the next one resumes
            archive.runtime(config, crash).writer(stream, 0).maintain()

    for _ in range(steps):
        step = rng.choice(STEPS)
        taken.append(step)
        size = rng.randint(1, 60)
        point = rng.choice(ALL_CRASH_POINTS)
        if step == "deliver":
            model.deliver(size, lose_ack=rng.random() < 0.2)
        elif step == "crash":
            model.deliver(size, CrashAt(point))
        elif step == "sweep":
            sweep(CrashAt(point) if rng.random() < 0.3 else None)
        elif step == "sweep_inside":
            model.deliver(size, RunOtherAt(point, sweep))
        elif step == "overlap":
            inner = rng.randint(1, 60)
            model.deliver(size, RunOtherAt(point, lambda inner=inner: model.deliver(inner)))
        elif step == "adopt":
            sweep_after_a_dead_archiver(archive, config, model, size)
        else:
            archive.clock.advance(minutes=rng.randint(1, 20))

    model.drain(rng.randint(10, 60))
    archive.clock.advance(minutes=31)
    archive.runtime(config).writer(stream, 0).maintain()
    report = verify_messages(archive.s3, archive.bucket, "orders", published.expected, config=stream)
    return ScheduleResult(
        seed=seed,
        steps=taken,
        produced=report.produced,
        archived=report.archived,
        dead_lettered=report.dead_lettered,
        lost=len(report.lost),
        duplicated=len(report.duplicated),
        other=len(report.unexpected) + len(report.misfiled) + len(report.corrupted),
        crashes=model.crashes,
        refused=model.refused,
    )


def sweep_after_a_dead_archiver(archive: Any, config: TidemarkConfig, model: QueueModel, size: int) -> bool:
    """A sweep whose first ledger write comes after a cold archiver accepted ``size`` messages
    (the model's next) and died before indexing them (there is no crash point in that window: the
    ledger's ``save`` is wrapped once). ``True`` if that archiver ran and died there."""
    sweeper = archive.runtime(config).writer(config.streams[0], 0)
    ledger = sweeper._ledger
    save = ledger.save
    died: list[bool] = []

    def save_after_an_archiver(*args: Any, **kwargs: Any) -> Any:
        ledger.save = save
        crashes = model.crashes
        model.deliver(size, CrashAt(AFTER_ACCEPT))
        died.append(model.crashes > crashes)
        return save(*args, **kwargs)

    ledger.save = save_after_an_archiver
    try:
        sweeper.maintain()
    finally:
        ledger.save = save
    return died == [True]
