"""A seeded scheduler that replays a live Kafka archive into a topic while the archive is written
and swept, kills the replay at random moments and runs it again, as an operator would.

``run_schedule(archive, bootstrap, seed)`` draws everything from ``random.Random(seed)`` (a failing
seed replays exactly): the source (1 or 2 partitions of ``make_orders``, with tombstones or not),
the flush size, the command (``HOURS``: every hour or a window of them -- the archiver goes on
writing the hours after it, and late records into it; ``same`` or ``key``; dead letters in or
not) and its target topic (1 to 3 partitions) on the broker at ``bootstrap``. Steps (see ``STEPS``):

* ``deliver``: the mapping delivers the next batch of a partition to the warm archiver -- or, now
  and then, to a cold container that dies at a crash point (the mapping delivers it again later);
* ``sweep``: time passes (0 to 31 minutes) and the sweeper's ``maintain`` runs on every partition
  (and registers them, as its discovery does), dying at a crash point now and then;
* ``drain``: the sweeper's drain of a partition: everything it holds is flushed now;
* ``replay``: the operator runs the replay -- always the same command into the same topic. At
  seed-chosen ledger reads of its plan (``PLAN_READS``) the archive moves on (``INSIDE``: a
  delivery, a delivery flushed at once, a sweep, a drain: flushes commit while it plans, as in
  ``test_replay_plan_race``), and the run may be killed at a seed-chosen moment: a read of its
  plan, a read of the target's tail, or its n-th record produced -- of which only a seed-chosen
  first part had left the process (``_Target``). A killed run is run again at once or left to
  a later step; a run refused because its hours still have records staged is run again after
  the next sweep, or later.

Every run that completes must have produced or skipped each record it planned, and leave the
target holding each record of the command up to the last position it planned of each source
partition once, and nothing else. At the end every record is delivered and flushed and the
replay runs once more; the target topic, read back with a consumer, must then hold every record
of the command's hours (its dead letters too if they are in; a dead letter is filed under its
Kafka timestamp's hour) exactly once -- by the (partition, offset) of its ``tidemark.source``
header, with its key and value, every one with the replay's id -- and nothing else; each
(target, source) partition pair's records in source offset order; ``same`` keeps each record in
its source partition.

Used by ``tests/integration/test_replay_interleavings.py`` (a few seeds) and
``bench/replay_interleavings.py`` (hundreds).
"""

from __future__ import annotations

import contextlib
import random
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.support.harness import EsmModel, small_config
from tests.support.kafka import new_topic
from tests.support.workload import BASE_MS, HOUR_MS, make_orders, utc_hour
from tidemark.config import TidemarkConfig
from tidemark.embedded.kafka_clients import client_settings
from tidemark.faults import ALL_CRASH_POINTS, CrashAt, SimulatedCrash
from tidemark.ledger.dynamodb import DynamoDBLedger
from tidemark.records.model import Headers
from tidemark.replay import KEY, REPLAY_HEADER, SAME, SOURCE_HEADER, KafkaTarget, Replayer, ReplayReport
from tidemark.replay.exceptions import HoursNotArchivedError
from tidemark.sources import PartitionId

STEPS = ("deliver",) * 5 + ("sweep",) * 2 + ("drain",) + ("replay",) * 2
#: what runs at a replay's plan reads: the archiver and the sweeper, committing flushes
INSIDE = ("deliver", "flush", "flush", "sweep", "drain")
#: the ledger reads a replay's plan makes (the moments its interleaved steps and kills land at)
PLAN_READS = ("partitions", "load", "hour_marks", "committed_objects")
#: the command's hours (one per seed; every run of a schedule is the same command): every hour the
#: archive may hold, or a window of the workload's hours (08..10, late records down to 02) -- the
#: archiver goes on writing the hours after it, and late records into it
HOURS = (
    ("2026-01-01T00", "2027-12-31T23"),
    ("2026-01-01T00", utc_hour(BASE_MS)),
    ("2026-01-01T00", utc_hour(BASE_MS + HOUR_MS)),
    (utc_hour(BASE_MS - 3 * HOUR_MS), utc_hour(BASE_MS + HOUR_MS)),
    (utc_hour(BASE_MS + HOUR_MS), "2027-12-31T23"),
)
STREAM = "orders"
#: runs of one replay step: the first and the operator's reruns (at once after a kill, after a sweep
#: after a refusal)
ATTEMPTS = 3
DONE, KILLED, REFUSED, FAILED = "done", "killed", "refused", "failed"


@dataclass
class ScheduleResult:
    seed: int
    steps: list[str] = field(default_factory=list)
    replays: int = 0  # runs started, the final one included
    interruptions: int = 0  # runs killed
    refused: int = 0  # runs refused: hours still had records staged
    later_objects: int = 0  # objects committed while a run planned, left to a rerun (all runs together)
    records: int = 0  # the source's records the target must hold at the end
    problems: list[str] = field(default_factory=list)  # each a record lost, duplicated, extra or altered

    @property
    def exact(self) -> bool:
        return not self.problems


class Killed(Exception):
    """The replay's process dies here (raised from a hook inside the run)."""


@dataclass(frozen=True)
class Got:
    """One record read back from the target topic."""

    partition: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> bytes | None:
        return dict(self.headers).get(name)


class _Schedule:
    def __init__(self, archive: Any, bootstrap: str, seed: int) -> None:
        self.archive = archive
        self.bootstrap = bootstrap
        self.rng = random.Random(seed)
        self.config: TidemarkConfig = small_config(max_records=self.rng.choice([20, 50, 120]))
        self.stream = self.config.streams[0]
        self.partitions = self.rng.randint(1, 2)
        workload = make_orders(
            partitions=self.partitions,
            per_partition=self.rng.randint(100, 250),
            seed=seed,
            tombstone_share=self.rng.choice([0.0, 0.05]),
        )
        self.esm = EsmModel(workload, lambda crash: archive.runtime(self.config, crash))
        self.partitioner = self.rng.choice([SAME, KEY])
        low = self.partitions if self.partitioner == SAME else 1
        self.topic = new_topic(bootstrap, self.rng.randint(low, 3), prefix="replayed")
        self.dead_letters = self.rng.random() < 0.75
        self.first_hour, self.last_hour = self.rng.choice(HOURS)
        self.records = {(r.partition, r.offset): r for r in workload.all_records()}
        self.result = ScheduleResult(seed)
        self.result.steps.append(
            f"setup: source {self.partitions} partition(s); replay {self.first_hour}..{self.last_hour} "
            f"{self.partitioner} into {self.topic}{'' if self.dead_letters else ', without dead letters'}"
        )

    # -- the archive ---------------------------------------------------------------------------

    def step(self, name: str, *, where: str = "") -> None:
        label = f" ({where})" if where else ""
        partition = self.rng.randrange(self.partitions)
        if name == "deliver":
            batch = self.esm.batch(partition, self.rng.randint(1, 30))
            point = self.rng.choice(ALL_CRASH_POINTS) if self.rng.random() < 0.25 else None
            crash = f", cold, dies at {point}" if point else ""
            self.result.steps.append(f"deliver p{partition} x{len(batch)}{crash}{label}")
            self.esm.deliver(batch, CrashAt(point) if point else None)
        elif name == "sweep":
            point = self.rng.choice(ALL_CRASH_POINTS) if self.rng.random() < 0.2 else None
            self.sweep(self.rng.choice([0, 5, 16, 31]), point, label)
        elif name == "drain":
            self.result.steps.append(f"drain p{partition}{label}")
            self.archive.runtime(self.config).writer(self.stream, partition).drain()
        elif name == "flush":
            batch = self.esm.batch(partition, self.rng.randint(1, 30))
            self.result.steps.append(f"deliver p{partition} x{len(batch)} and drain it{label}")
            self.esm.deliver(batch)
            self.archive.runtime(self.config).writer(self.stream, partition).drain()
        elif name == "replay":
            for attempt in range(ATTEMPTS):
                outcome = self.replay(rerun=attempt > 0)
                if outcome not in (KILLED, REFUSED) or self.rng.random() < 0.4:
                    break  # done, or the operator comes back later
                if outcome == REFUSED:  # the operator waits for the sweeper, then runs it again
                    self.sweep(self.rng.choice([16, 31]), None, " (the operator waits for it)")

    def sweep(self, minutes: int, point: str | None, label: str) -> None:
        self.result.steps.append(f"sweep +{minutes}m{f', dies at {point}' if point else ''}{label}")
        self.archive.clock.advance(minutes=minutes)
        runtime = self.archive.runtime(self.config, CrashAt(point) if point else None)
        runtime.ledger.register_partitions(self.stream.name, range(self.partitions))
        with contextlib.suppress(SimulatedCrash):  # a sweep that died: the next one resumes
            for number in range(self.partitions):
                runtime.writer(self.stream, number).maintain()

    # -- the replay ----------------------------------------------------------------------------

    def replay(self, *, rerun: bool = False, final: bool = False) -> str:
        """One run of the replay command: ``DONE``, ``KILLED``, ``REFUSED`` or ``FAILED``."""
        rng = self.rng
        index = self.result.replays = self.result.replays + 1
        label = f"replay {index}{' (a rerun)' if rerun else ''}{' (final)' if final else ''}"
        inside: dict[int, list[Callable[[], None]]] = defaultdict(list)
        kill, at, sends = "nowhere", 0, None
        if not final:
            for _ in range(rng.randint(0, 3)):
                name = rng.choice(INSIDE)
                inside[rng.randint(1, 8)].append(lambda name=name: self.step(name, where=f"at a plan read of {label}"))
            kill = rng.choice(["nowhere", "plan read", "tail read", "record produced", "record produced"])
            if kill == "plan read":
                at = rng.randint(1, 6)
                inside[at].append(_die)
            elif kill == "tail read":
                at = rng.randint(1, 3)
            elif kill == "record produced":
                at = rng.randint(1, max(1, self.delivered() // 2))
                sends = at if rng.random() < 0.5 else rng.randint(0, at - 1)
        if kill == "record produced":
            self.result.steps.append(f"{label}: to be killed at record {at}, its first {sends} sent")
        elif at:
            self.result.steps.append(f"{label}: to be killed at {kill} {at}")
        else:
            self.result.steps.append(f"{label}: not to be killed")
        target = _Target(self.bootstrap, self.topic, at if kill == "tail read" else 0, sends)
        replayer = Replayer(
            self.config, STREAM, self._ledger(inside), self.archive.s3, self.archive.bucket, target,
            topic=self.topic, first_hour=self.first_hour, last_hour=self.last_hour, partitioner=self.partitioner,
            dead_letters=self.dead_letters, after_produce=_die_after(at) if kill == "record produced" else None,
        )  # fmt: skip
        try:
            report = replayer.run()
        except Killed:
            self.result.interruptions += 1
            self.result.steps.append(f"{label}: killed")
            target.die()
            return KILLED
        except HoursNotArchivedError:
            self.result.refused += 1
            self.result.steps.append(f"{label}: refused, hours still staged")
            if final:
                self.result.problems.append(f"{label}: refused with everything flushed")
            return REFUSED
        except Exception as exc:  # noqa: BLE001 - anything else the run raises is what the schedule found
            self.result.problems.append(f"{label}: {type(exc).__name__}: {exc}")
            self.result.steps.append(f"{label}: failed: {type(exc).__name__}")
            return FAILED
        finally:
            target.close()
        self.result.steps.append(
            f"{label}: produced {report.produced}, skipped {report.skipped}, later objects {report.later_objects}"
        )
        self.result.later_objects += report.later_objects
        self.judge_run(label, report, replayer.replay_id, final=final)
        return DONE

    def _ledger(self, inside: dict[int, list[Callable[[], None]]]) -> DynamoDBLedger:
        """The plan's ledger: before its n-th read (``PLAN_READS``), the actions ``inside[n]``."""
        ledger = DynamoDBLedger(self.archive.table, client=self.archive.dynamodb)
        reads = 0
        for name in PLAN_READS:
            original = getattr(ledger, name)

            def read(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                nonlocal reads
                reads += 1
                for action in inside.pop(reads, []):
                    action()
                return _original(*args, **kwargs)

            setattr(ledger, name, read)
        return ledger

    def delivered(self) -> int:
        return sum(len(records) - len(self.esm.pending(p)) for p, records in self.esm.workload.records.items())

    def judge_run(self, label: str, report: ReplayReport, replay_id: str, *, final: bool) -> None:
        """A run that completed: it produced or skipped every record it planned, and the target
        holds every record up to the last position it planned of each source partition once,
        nothing above (all if ``final``: everything is flushed)."""
        through = {part.partition: part.last[1] for part in report.partitions if part.last is not None}
        self.judge(label, read_back(self.bootstrap, self.topic), replay_id, None if final else through)
        accounted = report.produced + report.skipped + sum(part.own_copies for part in report.partitions)
        if accounted != report.records:
            self.result.problems.append(
                f"{label}: produced {report.produced} + skipped {report.skipped} of {report.records} planned"
            )
        if final and report.later_objects:
            self.result.problems.append(f"{label}: {report.later_objects} objects left to a rerun after the drain")

    # -- the end -------------------------------------------------------------------------------

    def finish(self) -> None:
        """Every record delivered and flushed, the replay run to its end; then the target must
        hold every record once."""
        self.esm.drain(40)
        self.archive.clock.advance(minutes=31)
        runtime = self.archive.runtime(self.config)
        for partition in range(self.partitions):
            runtime.writer(self.stream, partition).maintain()
        self.result.steps.append("drained")
        self.result.records = len(self.wanted())
        self.replay(final=True)

    def wanted(self) -> set[tuple[PartitionId, int]]:
        """The source's records the command replays: those filed under its hours (a dead letter
        under its Kafka timestamp's hour; only if dead letters are in)."""
        found = set()
        for item in self.esm.workload.expected:
            hour = item.hour or utc_hour(self.records[(item.partition, item.offset)].timestamp_ms)
            if (self.dead_letters or item.hour is not None) and self.first_hour <= hour <= self.last_hour:
                found.add((item.partition, item.offset))
        return found

    def judge(self, label: str, got: list[Got], replay_id: str, through: dict[PartitionId, int] | None) -> None:
        """Every wanted record up to ``through`` (per source partition; ``None``: all of them)
        once in ``got``, nothing else."""
        wanted = self.wanted()
        if through is not None:
            wanted = {(p, offset) for p, offset in wanted if offset <= through.get(p, -1)}
        seen: Counter[tuple[PartitionId, int]] = Counter()
        extra: list[str] = []
        altered: list[str] = []
        order: dict[tuple[int, PartitionId], list[int]] = defaultdict(list)
        for item in got:
            source = _source(item.header(SOURCE_HEADER))
            if item.header(REPLAY_HEADER) != replay_id.encode() or source is None or source not in wanted:
                origin = f"{item.header(SOURCE_HEADER)!r} of {item.header(REPLAY_HEADER)!r}"
                extra.append(f"target {item.partition}: {origin}")
                continue
            seen[source] += 1
            order[(item.partition, source[0])].append(source[1])
            record = self.records[source]
            if (item.key, item.value) != (record.key, record.value or b""):
                altered.append(f"{source}: {item.key!r} {item.value[:40]!r}")
            if self.partitioner == SAME and item.partition != source[0]:
                altered.append(f"{source}: in target partition {item.partition}")
        missing = sorted(wanted - set(seen))
        twice = sorted(source for source, count in seen.items() if count > 1)
        problems = self.result.problems
        for what, found in (("missing", missing), ("duplicated", twice), ("extra", extra), ("altered", altered)):
            if found:
                problems.append(f"{label}: {len(found)} {what}: {found[:5]}{' ...' if len(found) > 5 else ''}")
        for (target, source), offsets in sorted(order.items(), key=str):
            if offsets != sorted(offsets):
                problems.append(f"{label}: target {target} holds source partition {source} out of offset order")


class _Target(KafkaTarget):
    """The target topic of a run that may be killed: its ``tail_kill``-th read of the tail dies
    (0: none), and the records it produces after its first ``sends`` (``None``: none) wait in a
    queue of the process's own until it flushes. ``die``: what it had sent lands, what waited is
    never sent -- a prefix of what the run produced stays in the target, as the idempotent
    producer leaves it after a SIGKILL (``tests/e2e/test_replay_cli.py`` kills real processes),
    and a seed replays exactly."""

    def __init__(self, bootstrap: str, topic: str, tail_kill: int, sends: int | None) -> None:
        super().__init__(bootstrap, topic)
        self._tail_kill = tail_kill
        self._reads = 0
        self._sends = sends
        self._produced = 0
        self._waiting: list[tuple[int, bytes | None, bytes | None, Headers, int | None]] = []

    def read(self, partition: int, first: int, end: int) -> Any:
        self._reads += 1
        if self._reads == self._tail_kill:
            raise Killed
        return super().read(partition, first, end)

    def produce(
        self, partition: int, key: bytes | None, value: bytes | None, headers: Headers, timestamp_ms: int | None
    ) -> None:
        self._produced += 1
        if self._sends is not None and self._produced > self._sends:
            self._waiting.append((partition, key, value, headers, timestamp_ms))
        else:
            super().produce(partition, key, value, headers, timestamp_ms)

    def flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        for record in waiting:
            super().produce(*record)
        super().flush()

    def die(self) -> None:
        self._waiting = []
        super().flush()  # what it had sent lands before the operator runs it again


def _die() -> None:
    raise Killed


def _die_after(count: int) -> Callable[[int], None]:
    def hook(produced: int) -> None:
        if produced >= count:
            raise Killed

    return hook


def _source(value: bytes | None) -> tuple[int, int] | None:
    """(source partition, offset) from a ``tidemark.source`` header of this stream, epoch 0."""
    try:
        stream, partition, epoch, offset = (value or b"").decode().split("/")
        return (int(partition), int(offset)) if (stream, epoch) == (STREAM, "0") else None
    except ValueError:
        return None


def read_back(bootstrap: str, topic: str) -> list[Got]:
    """Every record of ``topic``, partition by partition in offset order: read until each
    partition reports its end."""
    consumer = Consumer(
        client_settings(
            bootstrap,
            **{
                "group.id": f"check-{uuid.uuid4().hex[:6]}",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 10,
            },
        )
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        ended: set[int] = set()
        found: list[tuple[int, int, Got]] = []
        while ended != set(partitions):
            for message in consumer.consume(500, 0.05):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    ended.add(message.partition())
                    continue
                headers = tuple(message.headers() or ())
                got = Got(message.partition(), message.key(), message.value() or b"", headers)
                found.append((message.partition(), message.offset(), got))
        return [got for _partition, _offset, got in sorted(found, key=lambda item: item[:2])]
    finally:
        consumer.close()


def run_schedule(archive: Any, bootstrap: str, seed: int, *, steps: int = 24) -> ScheduleResult:
    schedule = _Schedule(archive, bootstrap, seed)
    for _ in range(steps):
        schedule.step(schedule.rng.choice(STEPS))
    schedule.finish()
    return schedule.result
