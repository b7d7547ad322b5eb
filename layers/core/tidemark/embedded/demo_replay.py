"""The demo's last step on Kafka: the archive replayed into a new topic with ``tidemark replay``,
and the new topic checked against what was produced, record by record.

The check reads the new topic back whole. Each record's ``tidemark.source`` header names the
record it copies (partition, epoch, offset): every produced record must be there exactly once,
in source order per partition, with its key, headers and value (JSON values compared parsed: the
archive keeps them as JSON text), and with the timestamp the source topic still holds for it.

With ``--chaos`` the first replay runs as its own process and is killed (SIGKILL) once the new
topic holds a random share of the records; the rerun resumes from the topic's own tail.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tidemark.config.model import StreamConfig, TidemarkConfig
from tidemark.embedded.aws import LocalAws
from tidemark.embedded.children import die_with_parent
from tidemark.embedded.kafka_clients import client_settings
from tidemark.embedded.workload import ensure_topic
from tidemark.exceptions import NotRetainedError
from tidemark.kafka_log import KafkaLog
from tidemark.ledger.base import Ledger
from tidemark.records.model import Record
from tidemark.replay import REPLAY_HEADER, SOURCE_HEADER, KafkaTarget, Replayer
from tidemark.replay.tail import parse_source
from tidemark.sources import PartitionId, partition_sort_key
from tidemark.verify import ExpectedRecord, Identity, identity

#: how many mismatches of each kind the report lists (it counts them all)
SHOWN = 5
#: a killed replay has this long to start producing before the demo gives up waiting for it
KILL_WAIT_S = 60.0
_TIDEMARK_HEADERS = frozenset({SOURCE_HEADER, REPLAY_HEADER})


@dataclass
class ReplayCheck:
    """The new topic against what was produced."""

    records: int = 0
    missing: list[Identity] = field(default_factory=list)
    duplicated: list[Identity] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    out_of_order: list[Identity] = field(default_factory=list)
    different: list[Identity] = field(default_factory=list)
    timestamps_compared: int = 0
    tombstones: int = 0  # records replayed with a null value (each also compared with what was produced)

    @property
    def equal(self) -> bool:
        faults = self.missing or self.duplicated or self.unexpected or self.out_of_order or self.different
        return not faults and (self.timestamps_compared > 0 or self.records == 0)  # never a vacuous check

    def to_dict(self) -> dict[str, Any]:
        def shown(items: list[Any]) -> dict[str, Any]:
            return {
                "count": len(items),
                "first": [list(item) if isinstance(item, tuple) else item for item in items[:SHOWN]],
            }

        return {
            "equal": self.equal,
            "records": self.records,
            "tombstones": self.tombstones,
            "timestamps_compared": self.timestamps_compared,
            "missing": shown(self.missing),
            "duplicated": shown(self.duplicated),
            "unexpected": shown(self.unexpected),
            "out_of_order": shown(self.out_of_order),
            "different": shown(self.different),
        }


def run_replay(
    aws: LocalAws,
    config: TidemarkConfig,
    config_data: dict[str, Any],
    stream: StreamConfig,
    ledger: Ledger,
    bootstrap: str,
    expected: list[ExpectedRecord],
    *,
    workdir: Path,
    chaos: random.Random | None = None,
) -> dict[str, Any]:
    """Replay every archived hour of ``stream`` into ``<topic>-replay`` and check it."""
    topic = f"{stream.source.topic}-replay"
    partitions = sorted({item.partition for item in expected}, key=partition_sort_key)
    ensure_topic(bootstrap, topic, len(partitions))
    marks = ledger.hour_marks(stream.name)
    first_hour, last_hour = marks[0].hour, marks[-1].hour
    killed = None
    if chaos is not None:
        command = [
            *("replay", "--stream", stream.name, "--from", first_hour, "--to", last_hour, "--topic", topic),
            *("--bootstrap-servers", bootstrap, "--endpoint-url", aws.endpoint),
            *("--bucket", aws.bucket, "--ledger-table", aws.table),
        ]
        killed = kill_a_replay(command, config_data, workdir, bootstrap, topic, len(expected), chaos)
    with KafkaTarget(bootstrap, topic) as target:
        replayer = Replayer(
            config,
            stream.name,
            ledger,
            aws.s3(),
            aws.bucket,
            target,
            topic=topic,
            first_hour=first_hour,
            last_hour=last_hour,
        )
        report = replayer.run()
    epochs = {partition: ledger.load(stream.name, partition).epoch for partition in partitions}
    check = check_replay(bootstrap, topic, stream, expected, epochs)
    return {
        "topic": topic,
        "hours": f"{first_hour}..{last_hour}",
        "replay_id": report.replay_id,
        "produced": report.produced,
        "skipped": report.skipped,  # already in the topic: the killed run's records, on a rerun
        "killed": killed,
        **check.to_dict(),
    }


def kill_a_replay(
    command: list[str],
    config_data: dict[str, Any],
    workdir: Path,
    bootstrap: str,
    topic: str,
    total: int,
    rng: random.Random,
) -> dict[str, Any]:
    """Run ``tidemark replay`` as a process and SIGKILL it once ``topic`` holds a random share of
    the ``total`` records (or report that it finished first)."""
    config_file = workdir / "replay-config.json"  # JSON is YAML: the command reads it with --config
    config_file.write_text(json.dumps(config_data, default=str), encoding="utf-8")
    threshold = rng.randint(1, max(total // 2, 1))
    log = (workdir / "replay-killed.log").open("w", encoding="utf-8")
    with log, _Counter(bootstrap, topic) as landed:
        process = subprocess.Popen(
            [sys.executable, "-m", "tidemark.cli.app", *command, "--config", str(config_file)],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),
        )
        try:
            deadline, held = time.monotonic() + KILL_WAIT_S, 0
            while process.poll() is None and time.monotonic() < deadline:
                held = landed.count()
                if held >= threshold:
                    break
        finally:
            finished = process.poll() is not None
            process.kill()
            process.wait()
    return {"at_records": threshold, "held_when_killed": held, "finished_first": finished}


class _Counter:
    """Counts the records landing in a topic, as they land (one consumer over every partition)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._consumer = Consumer(
            client_settings(
                bootstrap,
                **{"group.id": "tidemark-demo-replay", "enable.auto.commit": False, "fetch.wait.max.ms": 10},
            )
        )
        partitions = self._consumer.list_topics(topic, timeout=15).topics[topic].partitions
        self._consumer.assign([TopicPartition(topic, partition, 0) for partition in partitions])
        self._seen = 0

    def count(self) -> int:
        self._seen += sum(1 for message in self._consumer.consume(1000, timeout=0.01) if message.error() is None)
        return self._seen

    def __enter__(self) -> _Counter:
        return self

    def __exit__(self, *_: object) -> None:
        self._consumer.close()


def check_replay(
    bootstrap: str,
    topic: str,
    stream: StreamConfig,
    expected: Iterable[ExpectedRecord],
    epochs: dict[PartitionId, int],
) -> ReplayCheck:
    """``topic`` (a replay of ``stream``) against ``expected``: see the module docstring.
    ``epochs`` is each source partition's current epoch: the records the source topic holds."""
    wanted = {identity(item.partition, item.offset, item.epoch): item for item in expected}
    check = ReplayCheck()
    seen: Counter[Identity] = Counter()
    stamps: dict[Identity, int] = {}
    with KafkaLog(bootstrap, topic) as log:
        for partition in log.partitions():
            latest: dict[PartitionId, tuple[int, int]] = {}
            for record in _all(log, partition):
                check.records += 1
                headers = dict(record.headers)
                source = parse_source(headers.get(SOURCE_HEADER) or b"")
                if source is None or source[0] != stream.name:
                    check.unexpected.append(f"{topic}/{partition}@{record.offset}")
                    continue
                _stream, origin, (epoch, offset) = source
                ident = identity(origin, offset, epoch)
                seen[ident] += 1
                if seen[ident] == 2:
                    check.duplicated.append(ident)
                if latest.get(origin, (-1, -1)) >= (epoch, offset):
                    check.out_of_order.append(ident)
                latest[origin] = max(latest.get(origin, (-1, -1)), (epoch, offset))
                want = wanted.get(ident)
                check.tombstones += record.value is None
                if want is None:
                    check.unexpected.append(f"{topic}/{partition}@{record.offset}")
                elif not _same(record, want, stream.encoding.value):
                    check.different.append(ident)
                stamps[ident] = record.timestamp_ms
    check.missing = sorted((ident for ident in wanted if ident not in seen), key=str)
    with KafkaLog(bootstrap, stream.source.topic) as source_log:
        for origin, epoch in epochs.items():
            for record in _all(source_log, origin):
                ident = identity(origin, record.offset, epoch)
                if ident in stamps:
                    check.timestamps_compared += 1
                    if stamps[ident] != record.timestamp_ms:
                        check.different.append(ident)
    return check


def _all(log: KafkaLog, partition: PartitionId) -> Iterator[Record]:
    try:
        yield from log.records(partition, 0, 2**62)
    except NotRetainedError:  # an empty partition: nothing at offset 0
        return


def _same(record: Record, want: ExpectedRecord, encoding: str) -> bool:
    headers = tuple(pair for pair in record.headers if pair[0] not in _TIDEMARK_HEADERS)
    if want.meta is None or record.key != want.meta.key or headers != want.meta.headers:
        return False
    if record.value is None or want.value is None:  # a tombstone must come back as one
        return record.value is want.value
    if encoding == "json" and want.hour is not None:  # archived as JSON text; dead letters keep their bytes
        return bool(orjson.loads(record.value) == orjson.loads(want.value))
    return record.value == want.value
