"""Tombstones (a Kafka record whose value is null: compacted topics, CDC deletes) are records,
not errors: archived with a null value in every format, distinct from an empty value, checked
by the archive checker, replayed as a null value, and read by Spark's CSV reader as null."""

from __future__ import annotations

import base64
import gzip
from typing import Any

import orjson
import pytest

from tests.conftest import Archive
from tests.support.events import msk_event
from tests.support.harness import small_config, small_config_data
from tests.support.kafka import new_topic
from tests.support.workload import BASE_MS, utc_hour
from tidemark.archiver import Archiver
from tidemark.config import TidemarkConfig, parse_config
from tidemark.formats import format_of
from tidemark.formats.base import RenderContext, RenderSpec
from tidemark.formats.csv import CsvFormat
from tidemark.kafka_log import KafkaLog
from tidemark.ledger.dynamodb import DynamoDBLedger
from tidemark.records.model import Record
from tidemark.replay import KafkaTarget, Replayer
from tidemark.staging.frames import RAW, Frame
from tidemark.verify import ExpectedRecord, RecordMeta, spec_of_key, verify_archive

TOPIC = "orders"
COUNTRIES = ("US", "DE")


def _order(partition: int, offset: int, key: bytes) -> Record:
    created = BASE_MS // 1000 + offset * 60
    value = orjson.dumps(
        {
            "order_id": f"o-{offset}",
            "created_at": created,
            "product_id": "p",
            "price": 2.5,
            "quantity": 1,
            "customer_id": "c",
            "country": COUNTRIES[offset % 2],
        }
    )
    return Record(TOPIC, partition, offset, BASE_MS + offset, value, key, (("source", b"web"),))


def _event_with_tombstones() -> dict[str, Any]:
    """Offsets 0..3: an order, a tombstone whose ``value`` is omitted, one whose ``value`` is
    ``null`` (both shapes are seen from event source mappings), and an empty value. The
    tombstones carry a header; the empty value is for a ``json`` stream not JSON at all."""
    records = [_order(0, 0, b"k0"), _order(0, 1, b"k1"), _order(0, 2, b"k2"), _order(0, 3, b"k3")]
    event = msk_event(records)
    (group,) = event["records"].values()
    del group[1]["value"]
    group[2]["value"] = None
    group[3]["value"] = ""
    group[1]["headers"] = [{"op": list(b"d")}]
    return event


def _objects(archive: Any, prefix: str) -> list[tuple[str, bytes]]:
    listed = archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix=prefix).get("Contents", [])
    return [
        (item["Key"], archive.s3.get_object(Bucket=archive.bucket, Key=item["Key"])["Body"].read()) for item in listed
    ]


def test_a_tombstone_is_archived_with_a_null_value_and_never_dead_lettered(archive):
    """The finding: a json stream dead-lettered tombstones ``invalid_value_encoding`` (and fired
    ``DeadLetters``); both event shapes must be archived with ``"value": null``."""
    config = small_config(format={"type": "jsonl", "compression": "none"})
    runtime = archive.runtime(config)
    outcome = Archiver(runtime).handle(_event_with_tombstones())["orders"]
    runtime.writer(config.streams[0], 0).drain()

    assert dict(outcome.dead_lettered) == {"invalid_value_encoding": 1}  # the empty value only
    (raw,) = _objects(archive, "raw/orders/")
    lines = [orjson.loads(line) for line in raw[1].splitlines()]
    by_offset = {line["offset"]: line for line in lines}
    assert sorted(by_offset) == [0, 1, 2]
    assert by_offset[1]["value"] is None and by_offset[2]["value"] is None
    assert by_offset[1]["tombstone"] is True and "tombstone" not in by_offset[0]
    assert by_offset[1]["headers"] == [{"key": "op", "value": "d"}]
    assert by_offset[0]["value"]["order_id"] == "o-0"
    # a tombstone's event time is its record timestamp: it has no created_at to read
    assert by_offset[1]["event_time"] == "2026-11-21T08:00:00.001Z"
    (dead,) = _objects(archive, "errors/orders/")
    errors = [orjson.loads(line) for line in gzip.decompress(dead[1]).splitlines()]
    assert [(line["offset"], line["value_base64"]) for line in errors] == [(3, base64.b64encode(b"").decode())]

    spec = spec_of_key(raw[0], RenderSpec("jsonl", "none", 6, TOPIC, "text", "json", "text"))
    values = {envelope.offset: envelope.value for envelope in format_of(spec).read(raw[1], spec.context(0))}
    assert values[1] is None and values[2] is None and values[0] is not None


# -- every format, end to end --------------------------------------------------------------------


def _workload() -> tuple[list[Record], list[ExpectedRecord]]:
    """Two partitions of orders; every third record a tombstone of an earlier key (one with a
    null header value), one a tombstone without a key."""
    records: list[Record] = []
    expected: list[ExpectedRecord] = []
    for partition in (0, 1):
        for offset in range(30):
            record = _order(partition, offset, b"k%d-%d" % (partition, offset))
            hour = utc_hour(BASE_MS // 1000 * 1000 + offset * 60_000)
            if offset % 3 == 2:
                headers: Any = (("op", b"d"), ("trace", None)) if offset == 5 else (("op", b"d"),)
                key = None if offset == 29 else b"k%d-%d" % (partition, offset - 2)
                record = record._replace(value=None, key=key, headers=headers)
                hour = utc_hour(record.timestamp_ms)
            records.append(record)
            expected.append(
                ExpectedRecord(partition, offset, record.value, hour, RecordMeta(TOPIC, record.key, record.headers))
            )
    return records, expected


def _archive(archive: Archive, config: TidemarkConfig, records: list[Record]) -> None:
    runtime = archive.runtime(config)
    archiver = Archiver(runtime)
    for start in range(0, len(records), 20):
        outcome = archiver.handle(msk_event(records[start : start + 20]))["orders"]
        assert not outcome.dead_lettered, outcome.dead_lettered
    for partition in (0, 1):
        runtime.writer(config.streams[0], partition).drain()


FORMATS = {
    "jsonl": {"type": "jsonl", "compression": "gzip"},
    "parquet": {"type": "parquet", "compression": "zstd"},
    "avro": {"type": "avro", "compression": "snappy"},
    "csv": {"type": "csv", "compression": "none"},
    "text": {"type": "text", "compression": "zstd"},
    "bytes": {"type": "bytes", "compression": "gzip"},
}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_archives_tombstones_and_the_checker_tells_them_from_values(archive, fmt):
    data = small_config_data(format=FORMATS[fmt], max_records=1000)
    if fmt == "text":
        del data["streams"][0]["aggregations"]  # (text keeps no positions to aggregate by)
    config = parse_config(data)
    records, expected = _workload()
    _archive(archive, config, records)
    stream = config.streams[0]
    report = verify_archive(archive.s3, archive.bucket, "orders", expected, config=stream)
    assert report.ok and report.archived == 60 and report.dead_lettered == 0, report.summary()
    if fmt == "text":
        return  # text keeps values only: a json stream's empty line is a tombstone (unit tests)
    # The checker is not lenient: a tombstone claimed to be a value, or the reverse, is corrupt.
    swapped = [
        item if item.offset not in (2, 3) else ExpectedRecord(item.partition, item.offset, b"{}", item.hour, item.meta)
        for item in expected
    ]
    swapped[3] = ExpectedRecord(0, 3, None, expected[3].hour, expected[3].meta)
    report = verify_archive(archive.s3, archive.bucket, "orders", swapped, config=stream)
    assert (0, 2) in report.corrupted and (0, 3) in report.corrupted


def test_value_partitioning_files_tombstones_under_missing_even_when_missing_dead_letters(archive):
    config = small_config(
        format={"type": "parquet", "compression": "snappy"},
        partition_by={"fields": ["_value.country"], "missing": "dead_letter", "style": "keys_and_values"},
        max_records=1000,
    )
    records, expected = _workload()
    _archive(archive, config, records)
    report = verify_archive(archive.s3, archive.bucket, "orders", expected, config=config.streams[0])
    assert report.ok and report.dead_lettered == 0, report.summary()
    folders = {key.split("/")[2] for key, _body in _objects(archive, "raw/orders/")}
    assert folders == {"country=US", "country=DE", "country=__missing__"}


# -- replay --------------------------------------------------------------------------------------


def test_a_replay_produces_a_tombstone_as_a_null_value(archive, kafka_bootstrap):
    """Restoring a compacted topic from the archive must delete keys: a tombstone comes back with
    a null value (not an empty one), its key and headers, a null header value null."""
    config = small_config(format={"type": "avro", "compression": "deflate"}, max_records=1000)
    records, _expected = _workload()
    _archive(archive, config, records)
    marks = DynamoDBLedger(archive.table, client=archive.dynamodb).hour_marks("orders")
    topic = new_topic(kafka_bootstrap, 2)
    with KafkaTarget(kafka_bootstrap, topic) as target:
        report = Replayer(
            config, "orders", DynamoDBLedger(archive.table, client=archive.dynamodb), archive.s3, archive.bucket,
            target, topic=topic, first_hour=marks[0].hour, last_hour=marks[-1].hour,
        ).run()  # fmt: skip
    assert report.produced == 60
    with KafkaLog(kafka_bootstrap, topic) as log:
        got = [record for partition in (0, 1) for record in log.records(partition, 0, 29)]
    wanted = {(record.partition, record.offset): record for record in records}
    by_source = {}
    for record in got:
        source = dict(record.headers)["tidemark.source"]
        assert source is not None
        _stream, partition, _epoch, offset = source.decode().split("/")
        by_source[(int(partition), int(offset))] = record
    assert sorted(by_source) == sorted(wanted)
    for position, record in by_source.items():
        want = wanted[position]
        assert (record.key, record.value, record.headers[:-2]) == (want.key, want.value, want.headers), position
    assert sum(record.value is None for record in got) == 20
    assert by_source[(0, 5)].headers[:2] == (("op", b"d"), ("trace", None))


# -- Spark's CSV reader --------------------------------------------------------------------------


def test_sparks_csv_reader_reads_a_tombstone_as_null_and_an_empty_value_as_empty(spark, tmp_path):
    """The CSV convention (a null is an empty unquoted cell, the empty string ``""``) read by
    Spark's own CSV reader with the options a reader of RFC 4180 sets. A tombstone is null
    whatever the options; the empty string is null too with Spark's defaults (its ``nullValue``
    is ``""``), and ``""`` once ``nullValue`` is a text no cell holds (the job sets
    ``emptyValue`` to a marker instead: ``jobs.aggregation.native``)."""
    frames = [
        Frame(RAW, 1, BASE_MS, BASE_MS, b"k1", None, (("op", b"d"),)),
        Frame(RAW, 2, BASE_MS, BASE_MS, b"k2", b""),
        Frame(RAW, 3, BASE_MS, BASE_MS, None, b'say "hi", twice'),
    ]
    context = RenderContext(TOPIC, 0, "text", "text", "text")
    path = tmp_path / "object.csv"
    with path.open("wb") as out:
        CsvFormat("none").write(iter(frames), context, out)

    def read(**options: str) -> list[Any]:
        reader = spark.read.option("header", True).option("multiLine", True).option("escape", '"')
        for name, setting in options.items():
            reader = reader.option(name, setting)
        return reader.csv(str(path)).orderBy("offset").collect()

    rows = read(nullValue="\u0000")
    assert [(row["offset"], row["key"], row["value"]) for row in rows] == [
        ("1", "k1", None),
        ("2", "k2", ""),
        ("3", None, 'say "hi", twice'),
    ]
    assert rows[0]["headers"] == '[{"key":"op","value":"d"}]'
    assert [row["value"] for row in read()] == [None, None, 'say "hi", twice']  # Spark's defaults
