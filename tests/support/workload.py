"""Deterministic order workloads: event times over several hours, late and malformed records.

Expected hours are computed here with plain ``datetime`` arithmetic, independently of the
code under test.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from tidemark.records.model import Record
from tidemark.sources import KAFKA, KINESIS, PartitionId
from tidemark.verify import ExpectedRecord, RecordMeta

BASE_MS = 1_795_248_000_000  # 2026-11-21T08:00:00Z
HOUR_MS = 3_600_000


#: a real Kinesis sequence number (56 digits, far above 2**64): Kinesis workloads start here
KINESIS_FIRST_SEQUENCE = 49590338271490256608559692538361571095921575989136588898
KINESIS_STREAM_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"


@dataclass
class Workload:
    records: dict[PartitionId, list[Record]]  # by partition, offsets ascending
    expected: list[ExpectedRecord]
    kind: str = KAFKA  # the source kind the records came from (tidemark.sources)

    def all_records(self) -> list[Record]:
        return [record for partition in sorted(self.records) for record in self.records[partition]]


def utc_hour(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H")


COUNTRIES = ("US", "DE", "FR", "JP", "BR")


def make_orders(
    *,
    partitions: int = 2,
    per_partition: int = 200,
    hours: int = 3,
    late_share: float = 0.05,
    bad_share: float = 0.02,
    seed: int = 7,
    topic: str = "orders",
    start_offset: int = 0,
    base_ms: int = BASE_MS,
    kind: str = KAFKA,
    tombstone_share: float = 0.0,
) -> Workload:
    """Orders over ``hours`` hours in ``partitions`` partitions. ``kind="kinesis"``: shards
    ``shardId-00000000000<n>``, sequence numbers of 56 digits with random gaps between them (never
    contiguous), no headers -- and otherwise the very same records."""
    rng = random.Random(seed)
    gaps = random.Random(seed + 1)  # its own draws: a Kafka workload stays what it always was
    deletes = random.Random(seed + 2)  # tombstones' draws: a workload without them is unchanged
    records: dict[PartitionId, list[Record]] = {}
    expected: list[ExpectedRecord] = []
    span = hours * HOUR_MS
    kinesis = kind == KINESIS
    for number in range(partitions):
        batch: list[Record] = []
        partition: PartitionId = f"shardId-{number:012d}" if kinesis else number
        sequence = KINESIS_FIRST_SEQUENCE + number * 10**30 + start_offset
        for index in range(per_partition):
            sequence += gaps.randint(1, 10**21)
            offset = sequence if kinesis else start_offset + index
            produced_ms = base_ms + (span * index) // per_partition
            event_ms = produced_ms - rng.randint(0, 120_000)
            if rng.random() < late_share:
                event_ms -= rng.randint(2, 6) * HOUR_MS  # hours late
            roll = rng.random()
            hour: str | None = utc_hour(event_ms)
            if roll < bad_share / 2:
                value = b"{not json " + str(offset).encode()
                hour = None
            elif roll < bad_share:
                value = orjson.dumps({"order_id": f"o-{partition}-{offset}", "price": 1.0, "quantity": 1})
                hour = None  # no created_at: no event time
            else:
                created: object = (
                    event_ms if rng.random() < 0.5 else datetime.fromtimestamp(event_ms / 1000, UTC).isoformat()
                )
                value = orjson.dumps(
                    {
                        "order_id": f"o-{partition}-{offset}",
                        "customer_id": f"c-{rng.randint(1, 50)}",
                        "product_id": f"p-{rng.randint(1, 8)}",
                        "price": round(rng.uniform(1, 200), 2),
                        "quantity": rng.randint(1, 5),
                        "created_at": created,
                        "country": COUNTRIES[(index * 7 + start_offset * 7 + number) % len(COUNTRIES)],  # no rng
                    }
                )
            record = Record(
                topic=topic,
                partition=partition,
                offset=offset,
                timestamp_ms=produced_ms,
                value=value,
                key=f"o-{partition}-{offset}".encode(),
                headers=(("source", b"web"),) if index % 3 == 0 and not kinesis else (),
            )
            if tombstone_share and index and deletes.random() < tombstone_share:
                # A tombstone (Kafka only): the delete of an earlier order's key, a null value, a
                # null header value among its headers; filed under its record timestamp's hour.
                deleted = batch[deletes.randrange(len(batch))].key
                record = record._replace(value=None, key=deleted, headers=(("op", b"d"), ("trace", None)))
                value, hour = None, utc_hour(produced_ms)
            batch.append(record)
            expected.append(
                ExpectedRecord(partition, offset, value, hour, RecordMeta(topic, record.key, record.headers))
            )
        records[partition] = batch
    return Workload(records, expected, kind)


def batches(records: list[Record], size: int) -> list[list[Record]]:
    return [records[i : i + size] for i in range(0, len(records), size)]
