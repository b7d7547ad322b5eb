"""Reading an archive back for a replay, without a broker or S3: the per-partition merge (order
over overlapping ranges and epochs, objects opened only when reached), the plan (refusals), and
the resume logic over a fake target topic whose crashes land any prefix of each partition's
records."""

from __future__ import annotations

import io
import random
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from botocore.exceptions import ClientError

from tests.support.harness import example_config_data, small_config
from tidemark.buffers import ERRORS_KIND, RAW_KIND
from tidemark.config import parse_config
from tidemark.formats import extension_of, format_of
from tidemark.ledger.model import CommittedObject, HourMark, PartitionState
from tidemark.objects.keys import object_key
from tidemark.replay import KEY, SAME, Replayer
from tidemark.replay.exceptions import ArchiveOrderError, ReplayError, UnreplayableFormatError
from tidemark.replay.plan import plan_replay, raw_and_errors_specs
from tidemark.replay.reader import ObjectReader, ReplayRecord, merged
from tidemark.replay.tail import REPLAY_HEADER, SOURCE_HEADER, parse_source, resume_points
from tidemark.sources import PartitionId
from tidemark.staging.frames import DEAD_LETTER, RAW, Frame

HOUR_MS = 3_600_000
BASE_MS = 1_795_248_000_000  # 2026-11-21T08:00:00Z
HOURS = ("2026-11-21T08", "2026-11-21T09", "2026-11-21T10")


# -- the merge -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    key: str
    positions: tuple[tuple[int, int], ...]
    first: tuple[int, int] | None = None  # where its key says it starts (default: its first record)

    @property
    def start(self) -> tuple[int, int]:
        return self.first or self.positions[0]


def record(epoch: int, offset: int, partition: int = 0) -> ReplayRecord:
    return ReplayRecord(partition, epoch, offset, 1, b"k", b"v%d" % offset, (), False)


class Opener:
    """Opens chunks, keeping a log of opens and yields to check laziness against."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self.open_now = 0
        self.most_open = 0

    def __call__(self, chunk: Chunk) -> Iterator[ReplayRecord]:
        self.events.append(("open", chunk))
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        for epoch, offset in chunk.positions:
            yield record(epoch, offset)
        self.open_now -= 1

    def run(self, chunks: list[Chunk]) -> list[tuple[int, int]]:
        out = []
        for item in merged(chunks, self):
            self.events.append(("yield", item.position))
            out.append(item.position)
        return out


def test_overlapping_ranges_merge_into_position_order_opening_each_object_only_when_reached():
    rng = random.Random(11)
    hours: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for offset in range(600):  # each record in one of 3 hours: the hours' objects overlap in offsets
        hours[rng.randrange(3)].append((0, offset))
    chunks = [
        Chunk(f"h{hour}-{i}", tuple(positions[i : i + 37]))
        for hour, positions in hours.items()
        for i in range(0, len(positions), 37)
    ]
    rng.shuffle(chunks)
    opener = Opener()
    assert opener.run(chunks) == [(0, offset) for offset in range(600)]
    for index, (kind, chunk) in enumerate(opener.events):
        if kind != "open":
            continue
        assert isinstance(chunk, Chunk)
        before = [pos for k, pos in opener.events[:index] if k == "yield"]
        after = [pos for k, pos in opener.events[index:] if k == "yield"]
        assert all(pos < chunk.start for pos in before), chunk.key  # not opened late
        assert all(pos >= chunk.start for pos in after), chunk.key  # nor early
    assert opener.most_open <= 4  # about one object per hour at a time, not all of them


def test_epochs_order_before_offsets():
    chunks = [
        Chunk("e1-a", ((1, 0), (1, 2), (1, 5))),
        Chunk("e0-a", ((0, 100), (0, 102))),
        Chunk("e1-b", ((1, 1), (1, 3))),
        Chunk("e0-b", ((0, 101), (0, 200))),
    ]
    assert Opener().run(chunks) == [(0, 100), (0, 101), (0, 102), (0, 200), (1, 0), (1, 1), (1, 2), (1, 3), (1, 5)]


def test_a_position_twice_or_below_its_objects_start_stops_the_merge():
    twice = [Chunk("a", ((0, 1), (0, 2))), Chunk("b", ((0, 2), (0, 3)))]
    with pytest.raises(ArchiveOrderError, match="offset 2 is twice"):
        Opener().run(twice)
    below = [Chunk("a", ((0, 1), (0, 5))), Chunk("b", ((0, 3), (0, 2)))]
    with pytest.raises(ArchiveOrderError, match="offset 2 is out of order"):
        Opener().run(below)


def test_no_objects_and_empty_objects_merge_to_nothing():
    assert Opener().run([]) == []
    chunks = [Chunk("a", ((0, 1), (0, 4))), Chunk("empty", (), first=(0, 2)), Chunk("b", ((0, 3),))]
    assert Opener().run(chunks) == [(0, 1), (0, 3), (0, 4)]


# -- an archive in memory ------------------------------------------------------------------------


CONFIG = small_config()
STREAM = "orders"


@dataclass(frozen=True)
class Source:
    """One record of the source topic, as produced."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    hour: str | None  # None: dead-lettered


class FakeS3:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.gets: list[str] = []

    def get_object(self, Bucket: str, Key: str) -> dict[str, object]:
        self.gets.append(Key)
        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey", "Message": "gone"}}, "GetObject")
        return {"Body": io.BytesIO(self.objects[Key])}


@dataclass
class FakeLedger:
    objects: dict[str, list[CommittedObject]] = field(default_factory=lambda: defaultdict(list))
    states: dict[PartitionId, PartitionState] = field(default_factory=dict)  # what is still staged

    def hour_marks(self, stream: str, since_hour: str = "") -> list[HourMark]:
        return [
            HourMark(stream, hour, commits=len(objs))
            for hour, objs in sorted(self.objects.items())
            if hour >= since_hour
        ]

    def committed_objects(self, stream: str, hour: str) -> list[CommittedObject]:
        return list(self.objects.get(hour, []))

    def load(self, stream: str, partition: PartitionId) -> PartitionState:
        """The state set for the partition, else one that has accepted (and committed) exactly
        what its objects hold, as a real ledger's would."""
        found = self.states.get(partition)
        if found is not None:
            return found
        lasts = [obj.last for objs in self.objects.values() for obj in objs if obj.partition == partition]
        return PartitionState(stream, partition, version=1 if lasts else 0, staged_offset=max(lasts, default=-1))

    def partitions(self, stream: str) -> set[PartitionId]:
        return set(self.states)


def make_sources(partitions: int, per_partition: int, seed: int) -> list[Source]:
    rng = random.Random(seed)
    sources = []
    for partition in range(partitions):
        for offset in range(per_partition):
            dead = rng.random() < 0.05
            key = None if rng.random() < 0.1 else f"o-{partition}-{offset}".encode()
            headers = (("source", b"web"),) if offset % 3 == 0 else ()
            hour = None if dead else HOURS[rng.randrange(len(HOURS))]
            value = b"{not json %d" % offset if dead else b'{"n": %d, "p": %d}' % (offset, partition)
            sources.append(Source(partition, offset, BASE_MS + offset * 10, key, value, headers, hour))
    return sources


def archive_of(sources: list[Source], per_object: int = 25) -> tuple[FakeS3, FakeLedger]:
    """The objects the archiver would have written: per partition, kind and hour, every
    ``per_object`` records one object (so the hours' objects overlap in offsets)."""
    s3, ledger = FakeS3(), FakeLedger()
    raw_spec, errors_spec = raw_and_errors_specs(CONFIG.stream(STREAM))
    groups: dict[tuple[int, str, str], list[Source]] = defaultdict(list)
    for item in sources:
        kind = RAW_KIND if item.hour is not None else ERRORS_KIND
        groups[(item.partition, kind, item.hour or HOURS[0])].append(item)
    for (partition, kind, hour), items in groups.items():
        spec = raw_spec if kind == RAW_KIND else errors_spec
        for i in range(0, len(items), per_object):
            chunk = items[i : i + per_object]
            key = object_key(
                kind,
                STREAM,
                hour,
                partition,
                chunk[0].offset,
                chunk[-1].offset,
                extension_of(spec.format, spec.compression),
            )
            frames = [
                Frame(
                    RAW if kind == RAW_KIND else DEAD_LETTER,
                    item.offset,
                    item.timestamp_ms,
                    BASE_MS + HOURS.index(hour) * HOUR_MS if kind == RAW_KIND else -1,
                    item.key,
                    item.value,
                    item.headers,
                    "" if kind == RAW_KIND else "malformed: not json",
                )
                for item in chunk
            ]
            out = io.BytesIO()
            format_of(spec).write(frames, spec.context(partition, key), out)
            s3.objects[key] = out.getvalue()
            ledger.objects[hour].append(
                CommittedObject(
                    STREAM, partition, kind, hour, key, chunk[0].offset, chunk[-1].offset, len(chunk), 0, "", 0
                )
            )
    return s3, ledger


# -- a target topic in memory --------------------------------------------------------------------


@dataclass
class Produced:
    partition: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int | None


class FakeTopic:
    """A topic whose ``crash`` lands, per partition, any prefix of what was queued for it."""

    def __init__(self, partitions: int) -> None:
        self.logs: list[list[Produced]] = [[] for _ in range(partitions)]
        self.queued: list[Produced] = []
        self.reads: list[tuple[int, int, int]] = []

    def partitions(self) -> int:
        return len(self.logs)

    def start_offset(self, partition: int) -> int:
        return 0

    def end_offset(self, partition: int) -> int:
        return len(self.logs[partition])

    def read(self, partition: int, first: int, end: int) -> Iterator[tuple[tuple[str, bytes], ...]]:
        self.reads.append((partition, first, end))
        for item in self.logs[partition][first:end]:
            yield item.headers

    def produce(self, partition, key, value, headers, timestamp_ms) -> None:
        self.queued.append(Produced(partition, key, value, headers, timestamp_ms))

    def flush(self) -> None:
        for item in self.queued:
            self.logs[item.partition].append(item)
        self.queued.clear()

    def crash(self, rng: random.Random) -> int:
        by_partition: dict[int, list[Produced]] = defaultdict(list)
        for item in self.queued:
            by_partition[item.partition].append(item)
        landed = 0
        for partition, items in by_partition.items():
            cut = rng.randint(0, len(items))
            self.logs[partition].extend(items[:cut])
            landed += cut
        self.queued.clear()
        return landed


class Crash(Exception):
    pass


def crash_after(count: int):
    def hook(produced: int) -> None:
        if produced >= count:
            raise Crash

    return hook


def replayer(s3, ledger, topic, *, partitioner=SAME, last_hour=HOURS[-1], after_produce=None, **kwargs) -> Replayer:
    return Replayer(
        CONFIG, STREAM, ledger, s3, "bucket", topic, topic="copy", first_hour=HOURS[0], last_hour=last_hour,
        partitioner=partitioner, after_produce=after_produce, **kwargs,
    )  # fmt: skip


def replayed(topic: FakeTopic, replay_id: str) -> dict[int, list[tuple[int, Produced]]]:
    """Source partition -> (source offset, record) in the order the target holds them, per
    target partition concatenated (each target partition's order checked on its own)."""
    out: dict[int, list[tuple[int, Produced]]] = defaultdict(list)
    for log in topic.logs:
        per_source: dict[int, list[int]] = defaultdict(list)
        for item in log:
            headers = dict(item.headers)
            if headers[REPLAY_HEADER] != replay_id.encode():
                continue
            parsed = parse_source(headers[SOURCE_HEADER])
            assert parsed is not None
            _stream, partition, (_epoch, offset) = parsed
            assert isinstance(partition, int)
            per_source[partition].append(offset)
            out[partition].append((offset, item))
        for offsets in per_source.values():
            assert offsets == sorted(offsets)  # source order within each target partition
    return out


def assert_exactly_once(topic: FakeTopic, replay_id: str, sources: list[Source]) -> None:
    found = replayed(topic, replay_id)
    wanted = {(item.partition, item.offset): item for item in sources}
    seen = [(partition, offset) for partition, items in found.items() for offset, _ in items]
    assert sorted(seen) == sorted(wanted)  # every record, none twice
    for partition, items in found.items():
        for offset, item in items:
            want = wanted[(partition, offset)]
            assert (item.key, item.timestamp_ms) == (want.key, want.timestamp_ms)
            assert item.headers[: len(want.headers)] == want.headers
            assert item.value == want.value  # JSON as the object holds it: here the produced bytes


# -- the plan --------------------------------------------------------------------------------------


def test_the_plan_takes_the_hours_partitions_and_kinds_asked_for():
    sources = make_sources(3, 120, seed=1)
    _s3, ledger = archive_of(sources)
    whole = plan_replay(CONFIG, STREAM, ledger, HOURS[0], HOURS[-1])
    assert whole.partitions == [0, 1, 2] and whole.records == len(sources)
    one = plan_replay(CONFIG, STREAM, ledger, HOURS[1], HOURS[1], partitions=[2], dead_letters=False)
    assert one.partitions == [2]
    assert one.records == sum(1 for s in sources if s.partition == 2 and s.hour == HOURS[1])
    assert all(not obj.dead for obj in one.objects[2])
    starts = [obj.start for obj in whole.objects[0]]
    assert starts == sorted(starts)


@pytest.mark.parametrize(
    ("fmt", "message"),
    [
        ({"type": "csv", "compression": "zstd"}, "format csv keeps flattened value fields"),
        ({"type": "text", "compression": "gzip"}, "format text keeps only the value"),
        (
            {"type": "parquet", "compression": "zstd", "value_schema": {"fields": [{"name": "n", "type": "long"}]}},
            "format parquet with a value schema keeps typed value columns",
        ),
    ],
)
def test_formats_that_do_not_keep_the_record_are_refused_by_name(fmt, message):
    data = example_config_data()
    data["streams"][0]["format"] = fmt
    data["streams"][0].pop("aggregations")  # a text stream cannot have them
    config = parse_config(data)
    raw_spec, _ = raw_and_errors_specs(config.stream(STREAM))
    key = object_key("raw", STREAM, HOURS[0], 0, 0, 9, extension_of(raw_spec.format, raw_spec.compression))
    dead = object_key("errors", STREAM, HOURS[0], 0, 3, 3, "jsonl.gz")
    ledger = FakeLedger()
    ledger.objects[HOURS[0]] = [
        CommittedObject(STREAM, 0, ERRORS_KIND, HOURS[0], dead, 3, 3, 1, 0, "", 0),  # dead letters: always jsonl
        CommittedObject(STREAM, 0, RAW_KIND, HOURS[0], key, 0, 9, 9, 0, "", 0),
    ]
    with pytest.raises(UnreplayableFormatError, match=message):
        plan_replay(config, STREAM, ledger, HOURS[0], HOURS[0])
    assert plan_replay(config, STREAM, ledger, HOURS[0], HOURS[0], partitions=[1]).records == 0


def test_an_object_reads_back_key_value_headers_timestamp_and_dead_letters():
    sources = [s for s in make_sources(1, 80, seed=3)]
    s3, ledger = archive_of(sources)
    plan = plan_replay(CONFIG, STREAM, ledger, HOURS[0], HOURS[-1])
    reader = ObjectReader(s3, "bucket")  # type: ignore[arg-type]
    records = list(merged(plan.objects[0], reader.open))
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms, r.dead) for r in records] == [
        (s.offset, s.key, s.value, s.headers, s.timestamp_ms, s.hour is None) for s in sources
    ]
    assert any(r.dead for r in records) and any(r.key is None for r in records)


def test_a_damaged_or_missing_object_stops_the_replay_naming_it_and_a_rerun_resumes():
    sources = make_sources(2, 100, seed=4)
    s3, ledger = archive_of(sources)
    raw = sorted(key for key in s3.objects if key.startswith("raw/") and "+1+" in key)
    kept = s3.objects.pop(raw[0])
    topic = FakeTopic(2)
    with pytest.raises(ReplayError, match=f"^{re.escape(raw[0])} .*could not be read from S3.*NoSuchKey"):
        replayer(s3, ledger, topic).run()
    topic.flush()  # what it sent before stopping lands: every record of partition 0, a few of 1
    s3.objects[raw[0]] = kept[:-7]  # a truncated object
    with pytest.raises(ReplayError, match=f"^{re.escape(raw[0])} is unreadable .*run tidemark audit"):
        replayer(s3, ledger, topic).run()
    topic.flush()
    landed = sum(map(len, topic.logs))
    assert 100 <= landed < len(sources)
    s3.objects[raw[0]] = kept
    run = replayer(s3, ledger, topic)
    assert run.run().produced == len(sources) - landed
    assert_exactly_once(topic, run.replay_id, sources)


# -- the replay over a fake topic: resume ----------------------------------------------------------


@pytest.mark.parametrize("partitioner", [SAME, KEY])
@pytest.mark.parametrize("seed", range(12))
def test_crashes_landing_any_prefix_per_partition_then_a_rerun_give_every_record_once(partitioner, seed):
    rng = random.Random(seed)
    print("seed", seed)
    sources = make_sources(3, 150, seed=seed)
    s3, ledger = archive_of(sources)
    topic = FakeTopic(4 if partitioner == SAME else rng.randint(1, 5))
    landed = 0
    for _ in range(rng.randint(1, 3)):
        remaining = len(sources) - landed
        crash = crash_after(rng.randint(1, min(remaining, 300)))
        with pytest.raises(Crash):
            replayer(s3, ledger, topic, partitioner=partitioner, after_produce=crash).run()
        landed += topic.crash(rng)
    final = replayer(s3, ledger, topic, partitioner=partitioner)
    report = final.run()
    assert report.skipped == landed and report.produced == len(sources) - landed
    assert report.produced + report.skipped == report.records == len(sources)
    assert_exactly_once(topic, final.replay_id, sources)
    again = replayer(s3, ledger, topic, partitioner=partitioner).run()  # a complete replay: nothing more
    assert (again.produced, again.skipped) == (0, len(sources))


def test_a_rerun_of_a_complete_replay_downloads_nothing_with_same():
    sources = make_sources(2, 100, seed=5)
    s3, ledger = archive_of(sources)
    topic = FakeTopic(2)
    replayer(s3, ledger, topic).run()
    downloads = len(s3.gets)
    assert downloads == len(s3.objects)
    report = replayer(s3, ledger, topic).run()
    assert len(s3.gets) == downloads  # every object is below each partition's resume point
    assert (report.produced, report.skipped) == (0, len(sources))


def test_another_replay_into_the_same_topic_is_not_taken_for_this_one():
    sources = make_sources(2, 100, seed=6)
    s3, ledger = archive_of(sources)
    topic = FakeTopic(2)
    first = replayer(s3, ledger, topic, last_hour=HOURS[1])
    first.run()
    second = replayer(s3, ledger, topic)
    report = second.run()
    assert first.replay_id != second.replay_id
    assert (report.produced, report.skipped) == (len(sources), 0)
    assert_exactly_once(topic, second.replay_id, sources)
    assert replayer(s3, ledger, topic, dead_letters=False).replay_id != second.replay_id


def test_the_tail_is_read_back_in_windows_that_double():
    sources = make_sources(1, 100, seed=7)
    s3, ledger = archive_of(sources)
    topic = FakeTopic(1)
    run = replayer(s3, ledger, topic)
    run.run()
    other = Produced(0, None, b"x", ((REPLAY_HEADER, b"other"),), None)
    topic.logs[0].extend([other] * 1000)  # another replay's records after this one's
    topic.reads.clear()
    points = resume_points(topic, run.replay_id, STREAM, {0: {0}})
    assert points == {(0, 0): (0, 99)}
    end = len(topic.logs[0])
    assert [(first, last) for _p, first, last in topic.reads] == [
        (end - 64, end),
        (end - 192, end - 64),
        (end - 448, end - 192),
        (end - 960, end - 448),
        (0, end - 960),
    ]
