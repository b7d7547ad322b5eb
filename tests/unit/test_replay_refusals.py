"""What a replay refuses or leaves out, so that a rerun stays exactly once: hours still being
archived, a ``key`` replay whose target topic changed its partition count, and the replay's own
copies archived again (a replay into the source topic). Fakes only: the ledger, S3, the topic."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests.unit.test_replay_reader import (
    HOURS,
    Crash,
    FakeTopic,
    archive_of,
    crash_after,
    make_sources,
    replayed,
    replayer,
)
from tidemark.buffers import ERRORS_KIND, RAW_KIND, BufferKey
from tidemark.ledger.model import PartitionState
from tidemark.replay import KEY
from tidemark.replay.exceptions import HoursNotArchivedError, TargetChangedError
from tidemark.replay.tail import REPLAY_HEADER, SOURCE_HEADER
from tidemark.staging.store import SegmentRef

STAGED_AT = 1_795_255_200_000


def staged(kind: str, hour: str, first: int = 1000) -> PartitionState:
    segment = SegmentRef(f"{kind}-{first}.seg", 3, 300, first, first + 2)
    return PartitionState("orders", 0).accept([(BufferKey(kind, hour), segment)], first + 2, STAGED_AT)


def test_hours_whose_records_are_still_staged_are_refused_naming_them():
    s3, ledger = archive_of(make_sources(2, 60, seed=1))
    ledger.states[0] = staged(RAW_KIND, HOURS[1])
    topic = FakeTopic(2)
    with pytest.raises(HoursNotArchivedError, match=rf"partition 0: open raw/{HOURS[1]}, offsets 1000..1002"):
        replayer(s3, ledger, topic).run()
    assert topic.logs == [[], []] and topic.queued == []  # refused before anything was produced
    assert replayer(s3, ledger, FakeTopic(2), last_hour=HOURS[0]).run().produced > 0  # hours before it: fine

    ledger.states[0] = staged(ERRORS_KIND, HOURS[1])
    with pytest.raises(HoursNotArchivedError, match="open errors"):
        replayer(s3, ledger, FakeTopic(2)).run()
    assert replayer(s3, ledger, FakeTopic(2), dead_letters=False).run().produced > 0  # dead letters left out


def test_a_key_replay_refuses_to_resume_into_a_topic_whose_partition_count_changed():
    sources = make_sources(1, 300, seed=3)
    s3, ledger = archive_of(sources)
    topic = FakeTopic(2)
    with pytest.raises(Crash):
        replayer(s3, ledger, topic, partitioner=KEY, after_produce=crash_after(200)).run()
    assert topic.crash(random.Random(3)) > 0  # some of it landed
    topic.logs.append([])  # the topic gets a third partition: keys now hash elsewhere
    with pytest.raises(TargetChangedError, match="held 2 partitions when this replay began and holds 3 now"):
        replayer(s3, ledger, topic, partitioner=KEY).run()
    assert sum(map(len, topic.logs)) == sum(map(len, topic.logs[:2]))  # nothing produced by the refused run


def test_copies_of_this_replay_archived_again_are_not_replayed_again():
    """A replay into the source topic: the archiver archives its copies too, and a rerun of the
    same command must neither produce them again nor take them for new records."""
    sources = make_sources(2, 80, seed=5)
    s3, ledger = archive_of(sources)
    topic = FakeTopic(2)
    first = replayer(s3, ledger, topic).run()
    assert first.produced == len(sources)
    copies = []
    for partition, log in enumerate(topic.logs):  # archived from the topic at offsets after the originals
        for index, item in enumerate(log):
            original = next(s for s in sources if (s.partition, s.offset) == (partition, index % 80))
            copies.append(replace(original, offset=1000 + index, headers=item.headers))
    assert all(dict(copy.headers)[REPLAY_HEADER] == first.replay_id.encode() for copy in copies)
    s3, ledger = archive_of([*sources, *copies])
    again = replayer(s3, ledger, topic).run()
    assert (again.produced, again.skipped) == (0, len(sources))
    assert sum(part.own_copies for part in again.partitions) == len(copies)
    assert {len(records) for records in replayed(topic, first.replay_id).values()} == {80}
    assert all(SOURCE_HEADER in dict(item.headers) for log in topic.logs for item in log)
