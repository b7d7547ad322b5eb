"""``Replayer`` end to end: a real archive (the archiver on the moto server) replayed into new
topics of the embedded broker, and each target read back record by record."""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, KafkaError, Producer, TopicPartition

from tests.conftest import Archive, make_archive
from tests.support.harness import EsmModel, example_config_data, finish, small_config
from tests.support.kafka import new_topic
from tests.support.workload import Workload, make_orders
from tidemark.config import TidemarkConfig, parse_config
from tidemark.embedded.kafka_clients import client_settings
from tidemark.ledger.dynamodb import DynamoDBLedger
from tidemark.replay import (
    KEY,
    REPLAY_HEADER,
    SOURCE_HEADER,
    DeliveryError,
    KafkaTarget,
    Replayer,
    ReplayReport,
    TooFewPartitionsError,
    UnreplayableFormatError,
)
from tidemark.replay.partitioner import partition_for_key

STREAM = "orders"


@dataclass(frozen=True)
class Got:
    """One record read back from a target topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: tuple[int, int]

    def header(self, name: str) -> bytes:
        return dict(self.headers)[name]

    @property
    def source(self) -> tuple[int, int]:
        """(source partition, source offset) from ``tidemark.source``."""
        stream, partition, epoch, offset = self.header(SOURCE_HEADER).decode().split("/")
        assert (stream, epoch) == (STREAM, "0")
        return int(partition), int(offset)


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
                "fetch.wait.max.ms": 10,  # a partition's end answers at once
            },
        )
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        ended: set[int] = set()
        found: list[Got] = []
        while ended != set(partitions):
            for message in consumer.consume(1000, 1.0):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    ended.add(message.partition())
                    continue
                found.append(
                    Got(
                        message.partition(),
                        message.offset(),
                        message.key(),
                        message.value() or b"",
                        tuple(message.headers() or ()),
                        message.timestamp(),
                    )
                )
        return sorted(found, key=lambda got: (got.partition, got.offset))
    finally:
        consumer.close()


def hours_of(archive: Archive) -> tuple[str, str]:
    marks = DynamoDBLedger(archive.table, client=archive.dynamodb).hour_marks(STREAM)
    return marks[0].hour, marks[-1].hour


def replayer(archive: Archive, config: TidemarkConfig, target: KafkaTarget, topic: str, **kwargs) -> Replayer:
    first, last = hours_of(archive)
    return Replayer(
        config, STREAM, DynamoDBLedger(archive.table, client=archive.dynamodb), archive.s3, archive.bucket, target,
        topic=topic, first_hour=first, last_hour=last, **kwargs,
    )  # fmt: skip


def assert_replayed_exactly_once(got: list[Got], workload: Workload, replay_id: str, *, same: bool = True) -> None:
    """Every record of the workload exactly once, in source offset order within each target
    partition, with its key, value (the archived JSON: here the very bytes produced), headers and
    CreateTime; every one carrying this replay's headers."""
    wanted = {(record.partition, record.offset): record for record in workload.all_records()}
    assert sorted(item.source for item in got) == sorted(wanted)
    by_target: dict[tuple[int, int], list[int]] = defaultdict(list)
    for item in got:
        record = wanted[item.source]
        assert item.header(REPLAY_HEADER) == replay_id.encode()
        assert (item.key, item.value, item.timestamp) == (
            record.key,
            record.value,
            (TIMESTAMP_CREATE_TIME, record.timestamp_ms),
        )
        assert item.headers[:-2] == record.headers
        assert [name for name, _ in item.headers[-2:]] == [SOURCE_HEADER, REPLAY_HEADER]
        if same:
            assert item.partition == record.partition
        by_target[(item.partition, record.partition)].append(record.offset)
    for offsets in by_target.values():
        assert offsets == sorted(offsets)


@pytest.fixture(scope="module")
def whole(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Archive, TidemarkConfig, Workload]:
    """Three partitions over several hours, late records and malformed ones (dead letters)."""
    archive = make_archive(moto_endpoint, Path(tmp_path_factory.mktemp("replay")))
    config = small_config()
    workload = make_orders(partitions=3, per_partition=300, hours=3, seed=12)
    finish(archive, config, EsmModel(workload, lambda crash: archive.runtime(config, crash)), batch=60)
    return archive, config, workload


def test_every_record_replays_once_in_offset_order_with_its_metadata_dead_letters_included(whole, kafka_bootstrap):
    archive, config, workload = whole
    topic = new_topic(kafka_bootstrap, 3)
    with KafkaTarget(kafka_bootstrap, topic) as target:
        run = replayer(archive, config, target, topic)
        report = run.run()
    got = read_back(kafka_bootstrap, topic)
    assert_replayed_exactly_once(got, workload, run.replay_id)
    dead = sum(1 for item in workload.expected if item.hour is None)
    assert dead > 0 and sum(part.dead_letters for part in report.partitions) == dead
    assert (report.produced, report.skipped, report.records) == (len(got), 0, len(got))
    assert [(part.partition, part.first, part.last) for part in report.partitions] == [
        (p, (0, 0), (0, 299)) for p in range(3)
    ]


def test_without_dead_letters_only_the_archived_records_replay(whole, kafka_bootstrap):
    archive, config, workload = whole
    topic = new_topic(kafka_bootstrap, 3)
    with KafkaTarget(kafka_bootstrap, topic) as target:
        report = replayer(archive, config, target, topic, dead_letters=False).run()
    sources = {item.source for item in read_back(kafka_bootstrap, topic)}
    raw = {(item.partition, item.offset) for item in workload.expected if item.hour is not None}
    assert sources == raw and report.produced == len(raw)


def test_the_key_partitioner_puts_each_record_where_librdkafkas_murmur2_does(whole, kafka_bootstrap):
    archive, config, workload = whole
    topic, reference = new_topic(kafka_bootstrap, 5), new_topic(kafka_bootstrap, 5)
    with KafkaTarget(kafka_bootstrap, topic) as target:
        run = replayer(archive, config, target, topic, partitioner=KEY)
        run.run()
    got = read_back(kafka_bootstrap, topic)
    assert_replayed_exactly_once(got, workload, run.replay_id, same=False)
    # Independently: where librdkafka's Java-compatible partitioner sends each key.
    producer = Producer(client_settings(kafka_bootstrap, partitioner="murmur2"))
    placed: dict[bytes, int] = {}
    for record in workload.all_records():
        producer.produce(
            reference, b"", record.key, on_delivery=lambda _e, m: placed.__setitem__(m.key(), m.partition())
        )
    assert producer.flush(30) == 0
    assert {item.key: item.partition for item in got} == placed
    assert all(partition_for_key(key, 5) == partition for key, partition in placed.items())
    assert len(set(placed.values())) == 5


def test_a_crashed_replay_resumes_from_what_the_topic_holds_without_duplicates(whole, kafka_bootstrap):
    archive, config, workload = whole
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    total = len(workload.all_records())
    topic = new_topic(kafka_bootstrap, 3)

    class Crash(Exception):
        pass

    def crash_at(count: int):
        def hook(produced: int) -> None:
            if produced >= count:
                raise Crash

        return hook

    for partitioner, partitions in (("same", 3), (KEY, 4)):
        topic = new_topic(kafka_bootstrap, partitions)
        landed = 0
        for _ in range(2):
            with KafkaTarget(kafka_bootstrap, topic) as target:
                run = replayer(
                    archive, config, target, topic, partitioner=partitioner,
                    after_produce=crash_at(rng.randint(1, (total - landed) // 2)),
                )  # fmt: skip
                with pytest.raises(Crash):
                    run.run()
                target.flush()  # what was sent before the crash lands
            landed = len(read_back(kafka_bootstrap, topic))
            assert 0 < landed < total
        with KafkaTarget(kafka_bootstrap, topic) as target:
            report: ReplayReport = replayer(archive, config, target, topic, partitioner=partitioner).run()
        assert (report.skipped, report.produced) == (landed, total - landed)
        assert report.resumed  # read back from the tail
        assert_replayed_exactly_once(
            read_back(kafka_bootstrap, topic), workload, run.replay_id, same=partitioner == "same"
        )


def test_same_into_a_topic_with_too_few_partitions_is_refused_before_producing(whole, kafka_bootstrap):
    archive, config, _workload = whole
    topic = new_topic(kafka_bootstrap, 2)
    refused = pytest.raises(TooFewPartitionsError, match=f"'{topic}' has 2 partitions.*--partitioner key")
    with KafkaTarget(kafka_bootstrap, topic) as target, refused:
        replayer(archive, config, target, topic).run()
    assert read_back(kafka_bootstrap, topic) == []


def test_a_format_that_does_not_keep_the_record_is_refused_before_producing(archive, kafka_bootstrap):
    data = example_config_data()
    data["streams"][0]["format"] = {"type": "csv", "compression": "zstd"}
    data["streams"][0]["flush"] = {"max_records": 50, "max_bytes": "1MiB", "max_age": "15m"}
    config = parse_config(data)
    workload = make_orders(partitions=1, per_partition=60, hours=1, seed=3)
    finish(archive, config, EsmModel(workload, lambda crash: archive.runtime(config, crash)))
    topic = new_topic(kafka_bootstrap, 1)
    refused = pytest.raises(UnreplayableFormatError, match=r"^format csv .* cannot be replayed \(raw/orders/")
    with KafkaTarget(kafka_bootstrap, topic) as target, refused:
        replayer(archive, config, target, topic).run()
    assert read_back(kafka_bootstrap, topic) == []


def test_a_record_the_producer_refuses_outright_stops_the_replay_with_one_line(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap, 1)
    with KafkaTarget(kafka_bootstrap, topic) as target:
        target.produce(0, b"k", b"small", (), 1_795_248_000_000)
        with pytest.raises(
            DeliveryError, match=rf"^{topic}/0: a record of 2000000 bytes was refused .*message.max.bytes"
        ):
            target.produce(0, b"k", b"x" * 2_000_000, (), None)  # over librdkafka's default 1 MB
        target.flush()
    assert [(got.key, got.value) for got in read_back(kafka_bootstrap, topic)] == [(b"k", b"small")]
