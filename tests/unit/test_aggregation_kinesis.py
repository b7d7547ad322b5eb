"""jobs.aggregation's Arrow reader over Kinesis objects (pure Arrow; no Spark): every format
reads into the same records, ``partition`` the shard id and ``offset`` the sequence number's
exact decimal digits as strings (above 2**64, above 10**38, 129 digits); Kafka records keep
their int32/int64; an object of the other source kind, or a sequence number that is not
canonical digits, is an error, never a row of nulls.

The helpers here render Kinesis objects with the real format writers under the keys
``object_key(..., digits=129)`` gives; tests/integration/test_aggregation_kinesis.py uses them too.
"""

from __future__ import annotations

import gzip
import io
import random
from dataclasses import dataclass

import orjson
import pyarrow as pa
import pytest

from jobs.aggregation.formats import (
    checked_text_positions,
    read_csv,
    read_envelopes,
    read_jsonl,
    split_envelope,
    split_kinesis_envelope,
)
from jobs.aggregation.reader import EnvelopeError, read_object, records_schema, value_schema
from tests.support.format_objects import BASE_MS, HOUR_MS, ORDER_SCHEMA, VALUE_PATHS, VARIANTS, Variant, order_value
from tidemark.eventtime import iso_utc
from tidemark.formats import RenderSpec, format_of
from tidemark.objects.keys import object_key, positions_of_key, source_of_key
from tidemark.sources import KAFKA, KINESIS, KINESIS_POSITION_DIGITS
from tidemark.staging.frames import RAW, Frame

STREAM = "clicks"
SHARDS = ("shardId-000000000000", "shardId-000000000001")
HOURS = ("2026-11-21T08", "2026-11-21T09")
PER_OBJECT = 4
#: where each (shard, hour)'s sequence numbers start: across 2**64 (shard 0, hour 0), a real
#: 56-digit one (beyond 10**38: Spark's decimals), and the API's widest, 129 digits
FIRST_SEQUENCE = {
    (SHARDS[0], HOURS[0]): 2**64 - 2,
    (SHARDS[0], HOURS[1]): 2**64 + 10**12,
    (SHARDS[1], HOURS[0]): 49590338271490256608559692538361571095921575989136588898,
    (SHARDS[1], HOURS[1]): 10**128 + 12345,
}
STEP = 1_000_000_007  # sequence numbers are never contiguous

KINESIS_VARIANTS = {
    variant.name: variant
    for variant in (
        Variant("jsonl-gzip", "jsonl", "gzip"),
        Variant("jsonl-zstd", "jsonl", "zstd"),
        Variant("jsonl-none", "jsonl", "none"),
        Variant("parquet", "parquet", "snappy"),
        Variant("parquet-typed", "parquet", "snappy", value_schema=ORDER_SCHEMA),
        Variant("avro", "avro", "deflate"),
        Variant("avro-typed", "avro", "zstandard", value_schema=ORDER_SCHEMA),
        Variant("csv-gzip", "csv", "gzip"),  # the default columns: the Kinesis envelope's
        Variant("csv-paths-gzip", "csv", "gzip", columns=("sequence_number", "shard_id", *VALUE_PATHS, "event_time")),
        Variant("bytes", "bytes", "gzip"),
    )
}


def kinesis_spec(variant: Variant) -> RenderSpec:
    """The render spec a Kinesis stream archiving in ``variant``'s format stages its buffers under."""
    schema = ",".join(f"{column.name}:{column.type}{'?' if column.nullable else ''}" for column in variant.value_schema)
    return RenderSpec(
        variant.format, variant.codec, 6, STREAM, "text", "json", "text", schema, ",".join(variant.columns), KINESIS
    )


def render(variant: Variant, frames: list[Frame], shard: str, key: str) -> bytes:
    out = io.BytesIO()
    spec = kinesis_spec(variant)
    format_of(spec).write(iter(frames), spec.context(shard, key), out)
    return out.getvalue()


def kinesis_key(variant: Variant, hour: str, shard: str, frames: list[Frame], epoch: int) -> str:
    return object_key(
        "raw",
        STREAM,
        hour,
        shard,
        frames[0].offset,
        frames[-1].offset,
        variant.extension,
        epoch,
        digits=KINESIS_POSITION_DIGITS,
    )


@dataclass(frozen=True)
class KinesisArchive:
    """Records per (shard, hour), in sequence number order; ``objects`` renders them, plus one
    object written again over part of the same records (they must dedupe)."""

    frames: dict[tuple[str, str], list[Frame]]

    def objects(self, variant: Variant, epoch: int = 0) -> list[tuple[str, str, bytes]]:
        """``(key, hour, body)`` of every object, the last one repeating records of another."""
        found = []
        for (shard, hour), frames in sorted(self.frames.items()):
            key = kinesis_key(variant, hour, shard, frames, epoch)
            found.append((key, hour, render(variant, frames, shard, key)))
        shard, hour = SHARDS[1], HOURS[0]
        again = self.frames[(shard, hour)][1:]  # a flush retried over part of the same records
        key = kinesis_key(variant, hour, shard, again, epoch)
        found.append((key, hour, render(variant, again, shard, key)))
        return found

    @property
    def duplicates(self) -> int:
        """Records the last object of :meth:`objects` repeats."""
        return PER_OBJECT - 1


def make_kinesis_archive(seed: int = 23) -> KinesisArchive:
    rng = random.Random(seed)
    frames: dict[tuple[str, str], list[Frame]] = {}
    for shard_index, shard in enumerate(SHARDS):
        for hour_index, hour in enumerate(HOURS):
            batch = []
            for index in range(PER_OBJECT):
                sequence = FIRST_SEQUENCE[(shard, hour)] + index * STEP
                event_ms = BASE_MS + hour_index * HOUR_MS + index * 61_001 + shard_index * 7
                value = order_value(rng, shard_index, sequence, event_ms)
                batch.append(Frame(RAW, sequence, event_ms + 5, event_ms, f"user-{index % 3}".encode(), value))
            frames[(shard, hour)] = batch
    return KinesisArchive(frames)


ARCHIVE = make_kinesis_archive()


def expected_records(archive: KinesisArchive, epoch: int = 0) -> list[tuple[object, ...]]:
    """Every record once, as the job's rows: hour, epoch, shard id, sequence number digits,
    event time, then ORDER_SCHEMA's fields (a missing note null)."""
    rows = []
    for (shard, hour), frames in archive.frames.items():
        for frame in frames:
            order = orjson.loads(frame.value)
            fields = tuple(order.get(column.name) for column in ORDER_SCHEMA)
            rows.append((hour, epoch, shard, str(frame.offset), iso_utc(frame.event_time_ms), *fields))
    return rows


def read_all(objects: list[tuple[str, str, bytes]]) -> list[tuple[object, ...]]:
    schema = value_schema(((key, body) for key, _hour, body in objects), source=KINESIS)
    batches = [read_object(key, body, hour, schema, source=KINESIS) for key, hour, body in objects]
    return [tuple(row.values()) for batch in batches for row in batch.to_pylist()]


# -- the archive is what the brief says ----------------------------------------------------------


def test_the_keys_are_kinesis_keys_and_positions_exceed_every_integer_type() -> None:
    objects = ARCHIVE.objects(KINESIS_VARIANTS["parquet"])
    for key, _hour, _body in objects:
        assert source_of_key(key) == KINESIS
        partition, first, last = positions_of_key(key)
        assert partition in SHARDS and first <= last
    sequences = [frame.offset for frames in ARCHIVE.frames.values() for frame in frames]
    assert min(sequences) < 2**64 < max(s for s in sequences if s < 10**38)
    assert any(10**38 < s < 10**56 for s in sequences) and max(len(str(s)) for s in sequences) == 129


# -- every format ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(KINESIS_VARIANTS))
def test_every_format_reads_kinesis_objects_into_the_same_records(name: str) -> None:
    """The records of every object, the repeated ones included: the shard id and the exact
    sequence number digits as strings, the values typed as for Kafka."""
    found = read_all(ARCHIVE.objects(KINESIS_VARIANTS[name]))
    expected = expected_records(ARCHIVE)
    repeated = [row for row in expected if row[2] == SHARDS[1] and row[0] == HOURS[0]][1:]
    assert sorted(found, key=repr) == sorted(expected + repeated, key=repr)
    assert len(found) == len(expected) + ARCHIVE.duplicates


def test_the_kinesis_records_schema_keeps_positions_as_text_and_kafkas_is_unchanged() -> None:
    values = pa.schema([("offset", pa.string()), ("price", pa.float64())])
    kinesis = records_schema(values, KINESIS)
    assert [(field.name, field.type) for field in kinesis] == [
        ("hour", pa.string()),
        ("epoch", pa.int32()),
        ("partition", pa.string()),
        ("offset", pa.string()),
        ("event_time", pa.string()),
        ("price", pa.float64()),
    ]
    kafka = records_schema(values)
    assert records_schema(values, KAFKA) == records_schema(values, "msk") == kafka
    assert (kafka.field("partition").type, kafka.field("offset").type) == (pa.int32(), pa.int64())


def test_split_kinesis_envelope_takes_the_value_bytes_up_to_the_closing_brace() -> None:
    value = orjson.dumps({"s": 'x,"value":y}', "n": 1, "o": {"k": [1]}})  # the markers inside the value
    frames = [Frame(RAW, 10**128 + 7, BASE_MS + 5, BASE_MS, b'pk,"value":1', value)]
    key = kinesis_key(KINESIS_VARIANTS["jsonl-none"], HOURS[0], SHARDS[0], frames, 0)
    (line,) = render(KINESIS_VARIANTS["jsonl-none"], frames, SHARDS[0], key).splitlines()
    assert split_kinesis_envelope(line) == (SHARDS[0], str(10**128 + 7), iso_utc(BASE_MS), value)
    with pytest.raises(EnvelopeError, match="not a Kafka archive envelope"):
        split_envelope(line)


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b'{"stream":"s","shard_id":"shardId-1","sequence_number":7,',  # a number, not its digits
        b'{"stream":"s","shard_id":"shardId-1","sequence_number":"007","approximate_arrival_timestamp":1.000,'
        b'"event_time":"x","partition_key":"k","value":{}}',
        b'{"stream":"s","shard_id":"shardId-1","sequence_number":"7","approximate_arrival_timestamp":1.000,'
        b'"event_time":"x","partition_key":"k"}',
    ],
)
def test_a_line_that_is_not_a_kinesis_envelope_is_an_error(line: bytes) -> None:
    with pytest.raises(EnvelopeError):
        split_kinesis_envelope(line)


# -- the other source kind, and positions that are not canonical ----------------------------------


@pytest.mark.parametrize("name", ["jsonl-gzip", "parquet", "avro", "csv-gzip", "bytes"])
def test_an_object_of_the_other_source_kind_is_an_error(name: str) -> None:
    key, _hour, body = ARCHIVE.objects(KINESIS_VARIANTS[name])[0]
    with pytest.raises(EnvelopeError):
        read_envelopes(key, body)  # a Kinesis object in a Kafka run
    kafka_key, _hour, kafka_body = make_kafka_object(VARIANTS[name])
    with pytest.raises(EnvelopeError):
        read_envelopes(kafka_key, kafka_body, source=KINESIS)
    assert read_envelopes(kafka_key, kafka_body).offset.type == pa.int64()  # and Kafka's reads as ever


def make_kafka_object(variant: Variant) -> tuple[str, str, bytes]:
    from tests.support.format_objects import make_archived_orders

    return make_archived_orders(partitions=1, hours=1, per_object=2).objects(variant)[0]


def csv_of(header: str, *rows: str) -> bytes:
    return "\n".join([header, *rows, ""]).encode()


@pytest.mark.parametrize(
    ("shard", "sequence", "what"),
    [
        ('"shardId-1"', '"0049"', "sequence number"),  # a leading zero: another text for the record
        ('"shardId-1"', '"-49"', "sequence number"),
        ('"shardId-1"', '"4.9"', "sequence number"),
        ('"shardId-1"', "", "sequence number"),  # null
        ('"shard id"', '"49"', "shard id"),
        ("", '"49"', "shard id"),
    ],
)
def test_a_csv_position_that_is_not_a_kinesis_one_is_an_error(shard: str, sequence: str, what: str) -> None:
    data = csv_of('"shard_id","sequence_number","value"', f'{shard},{sequence},"{{}}"')
    with pytest.raises(EnvelopeError, match=f"not a Kinesis {what}"):
        read_csv(data, source=KINESIS)


def test_a_csv_object_without_kinesis_positions_cannot_be_aggregated() -> None:
    with pytest.raises(EnvelopeError, match="'sequence_number' column"):
        read_csv(csv_of('"shard_id","value"', '"shardId-1","{}"'), source=KINESIS)


def test_checked_positions_take_the_widest_sequence_numbers_and_zero() -> None:
    widest = "9" * 129
    shards, sequences = checked_text_positions(pa.array(["shardId-1", "s.2_x"]), pa.array([widest, "0"]))
    assert sequences.to_pylist() == [widest, "0"] and shards.type == pa.string()
    with pytest.raises(EnvelopeError):
        checked_text_positions(pa.array(["shardId-1"]), pa.array(["1" + "0" * 129]))  # 130 digits


def test_kinesis_json_lines_sampled_for_the_run_schema_read_only_the_first_records() -> None:
    key, _hour, body = ARCHIVE.objects(KINESIS_VARIANTS["jsonl-gzip"])[0]
    envelopes = read_jsonl(gzip.decompress(body), 2, source=KINESIS)
    assert envelopes.offset.to_pylist() == [str(2**64 - 2), str(2**64 - 2 + STEP)]
    assert envelopes.partition.to_pylist() == [SHARDS[0]] * 2
    assert value_schema([(key, body)], source=KINESIS).names == [column.name for column in ORDER_SCHEMA]
