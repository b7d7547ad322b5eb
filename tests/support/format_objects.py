"""The same orders rendered as archive objects in every format the aggregation job reads, with
the real format writers (``tidemark.formats``) under real object keys."""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tidemark.formats import RenderContext, ValueColumn, format_for
from tidemark.objects.keys import object_key
from tidemark.staging.frames import RAW, Frame

BASE_MS = 1_795_248_000_000  # 2026-11-21T08:00:00Z
HOUR_MS = 3_600_000
ORDER_SCHEMA = ValueColumn.parse_all(
    "order_id:string,customer_id:string,product_id:string,price:double,quantity:long,created_at:string,"
    "gift:boolean,note:string?"
)
VALUE_PATHS = tuple(f"value.{column.name}" for column in ORDER_SCHEMA)


@dataclass(frozen=True)
class Variant:
    """One way of archiving: a format, its codec, what else the render context says."""

    name: str
    format: str
    codec: str
    value_schema: tuple[ValueColumn, ...] = ()
    columns: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tells_tombstones(self) -> bool:
        """Whether its objects tell a tombstone from a record lacking every field: all but CSV
        without a ``value`` column (``tidemark.formats.csv``)."""
        return self.format != "csv" or not self.columns or "value" in self.columns

    @property
    def extension(self) -> str:
        return format_for(self.format, self.codec).extension

    def render(self, frames: list[Frame], partition: int, key: str) -> bytes:
        context = RenderContext(
            topic="orders",
            partition=partition,
            value_schema=self.value_schema,
            columns=self.columns,
            object_key=key,
        )
        out = io.BytesIO()
        format_for(self.format, self.codec).write(iter(frames), context, out)
        return out.getvalue()


VARIANTS = {
    variant.name: variant
    for variant in (
        Variant("jsonl-gzip", "jsonl", "gzip"),
        Variant("jsonl-zstd", "jsonl", "zstd"),
        Variant("jsonl-none", "jsonl", "none"),
        Variant("parquet", "parquet", "snappy"),
        Variant("parquet-typed", "parquet", "snappy", value_schema=ORDER_SCHEMA),
        Variant("avro", "avro", "deflate"),
        Variant("avro-typed", "avro", "zstandard", value_schema=ORDER_SCHEMA),
        Variant("csv-gzip", "csv", "gzip"),
        Variant("csv-paths", "csv", "zstd", columns=("partition", "offset", "event_time", *VALUE_PATHS)),
        Variant("csv-paths-gzip", "csv", "gzip", columns=("offset", "partition", *VALUE_PATHS, "event_time")),
        Variant("bytes", "bytes", "gzip"),
    )
}


def order_value(rng: random.Random, partition: int, offset: int, event_ms: int) -> bytes:
    """A value that fits ``ORDER_SCHEMA`` (so typed formats can hold it): whole prices too
    (``12.0``), a boolean, a nullable note that is sometimes missing, sometimes has a line
    break, a quote or a comma."""
    price = float(rng.randint(1, 40)) if offset % 4 == 0 else round(rng.uniform(1, 200), 2)
    value: dict[str, Any] = {
        "order_id": f"o-{partition}-{offset}",
        "customer_id": f"c-{rng.randint(1, 6)}",
        "product_id": f"p-{rng.randint(1, 3)}",
        "price": price,
        "quantity": rng.randint(1, 5),
        "created_at": f"2026-11-21T{event_ms // HOUR_MS % 24:02d}:{event_ms // 60_000 % 60:02d}:00Z",
        "gift": offset % 3 == 0,
    }
    if offset % 2:
        value["note"] = ['leave "at" door', "line\nbreak", "a,b", ""][offset // 2 % 4]
    return orjson.dumps(value)


@dataclass(frozen=True)
class ArchivedOrders:
    """Objects per (partition, hour): ``frames[(partition, hour)]`` in offset order."""

    frames: dict[tuple[int, str], list[Frame]]

    def without_tombstones(self) -> ArchivedOrders:
        return ArchivedOrders(
            {where: [frame for frame in frames if frame.value is not None] for where, frames in self.frames.items()}
        )

    def objects(
        self, variant: Variant, *, prefix: str = "raw", epoch: int = 0, folders: str = "", hive: bool = False
    ) -> list[tuple[str, str, bytes]]:
        """``(key, hour, body)`` of every object, as the archive would have written them."""
        found = []
        for (partition, hour), frames in sorted(self.frames.items()):
            key = object_key(
                prefix,
                "orders",
                hour,
                partition,
                frames[0].offset,
                frames[-1].offset,
                variant.extension,
                epoch,
                folders=folders,
                hive_hours=hive,
            )
            found.append((key, hour, variant.render(frames, partition, key)))
        return found


def make_archived_orders(
    *, partitions: int = 2, hours: int = 2, per_object: int = 4, seed: int = 11, tombstones: int = 0
) -> ArchivedOrders:
    """``per_object`` orders per (partition, hour), then ``tombstones`` tombstones (a null value:
    the delete of an order's key) after them, which the aggregation job must skip."""
    rng = random.Random(seed)
    frames: dict[tuple[int, str], list[Frame]] = {}
    for partition in range(partitions):
        offset = 100 * partition
        for hour_index in range(hours):
            hour = f"2026-11-21T{8 + hour_index:02d}"
            batch = []
            for index in range(per_object):
                event_ms = BASE_MS + hour_index * HOUR_MS + index * 61_001 + partition * 7
                value = order_value(rng, partition, offset, event_ms)
                headers = (("source", b"web"),) if index % 2 else ()
                batch.append(Frame(RAW, offset, event_ms + 5, event_ms, f"k{offset}".encode(), value, headers, ""))
                offset += 1
            for index in range(tombstones):
                deleted = f"k{batch[index % len(batch)].offset}".encode()
                event_ms = BASE_MS + hour_index * HOUR_MS + 3_000_000 + index
                batch.append(Frame(RAW, offset, event_ms, event_ms, deleted, None, (("op", b"d"),), ""))
                offset += 1
            frames[(partition, hour)] = batch
    return ArchivedOrders(frames)


def store(root: Path, objects: list[tuple[str, str, bytes]]) -> None:
    """Write objects under a directory in their key layout (what ``file://`` roots read)."""
    for key, _hour, body in objects:
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
