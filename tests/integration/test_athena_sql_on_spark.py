"""The README's Athena queries, run by Spark SQL over a local archive read through the catalog.

Athena cannot run here. Instead: records are routed (event hour, partition-by folders) and
rendered by the real writers into a temp directory in the archive's layout, and a Spark view is
registered from the *catalog description* alone -- its columns (as the read schema), its partition
keys, and its ``storage.location.template`` turned into a path pattern that finds the objects and
extracts their partition values. The README's SQL, verbatim, must then give exactly the rows the
input says. A template that does not spell the folders the writers make finds no objects; a
column type that does not match what a writer wrote fails the read.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tidemark.catalog import TableDescription, describe_table
from tidemark.clock import ManualClock
from tidemark.config.model import ArchiveSettings, StreamConfig
from tidemark.formats import RenderSpec, format_of
from tidemark.objects.keys import object_key
from tidemark.records.model import Record
from tidemark.staging.frames import Frame
from tidemark.staging.segment import decode_segment
from tidemark.writer.stream import StreamContext

REPO = Path(__file__).resolve().parents[2]
BUCKET = "tidemark-archive"
HOUR_MS = 3_600_000
START_MS = 1_795_244_400_000  # 2026-11-21T07:00:00Z
# three event hours: 2026-11-21T07, 2026-11-21T08 and 2026-11-22T07 (another day)
HOURS_MS = [START_MS, START_MS + HOUR_MS, START_MS + 24 * HOUR_MS]
COUNTRIES = ["US", "DE", "US", "C/D", None]  # "C/D" is folder C%2FD; no country is folder __missing__
PRICES = [12.5, 3.25, 7.75, 20.0]

# The README's queries ("Query the archive with Athena"), verbatim.
ORDERS_SQL = """SELECT country, hour, count(*) AS orders, round(sum(value.price * value.quantity), 2) AS revenue
FROM orders
WHERE year = '2026' AND month = '11' AND day = '21' AND country = 'US'
GROUP BY 1, 2
ORDER BY 2"""
SHIPMENTS_SQL = """SELECT country, hour, count(*) AS shipments,
       round(sum(CAST(value_price AS double) * CAST(value_quantity AS bigint)), 2) AS revenue
FROM shipments
WHERE year = '2026' AND month = '11' AND day = '21' AND country IN ('US', 'C%2FD', '__missing__')
GROUP BY 1, 2
ORDER BY 1, 2"""

VALUE_FIELDS = [
    {"name": "order_id", "type": "string"},
    {"name": "price", "type": "double"},
    {"name": "quantity", "type": "long"},
    {"name": "country", "type": "string", "nullable": True},
]


def stream(name: str, **sections: Any) -> StreamConfig:
    return StreamConfig.model_validate(
        {"name": name, "source": {"kind": "kafka", "topic": name, "bootstrap_servers": ["b:9092"]}, **sections}
    )


ORDERS = stream(  # parquet, partition folders as plain values, plain hour folders
    "orders",
    format={"type": "parquet", "value_schema": {"fields": VALUE_FIELDS}},
    partition_by={"fields": ["_value.country"]},
)
SHIPMENTS = stream(  # gzip CSV, Hive-style folders for both
    "shipments",
    format={"type": "csv", "compression": "gzip", "columns": ["partition", "offset", "value.price", "value.quantity"]},
    partition_by={"fields": ["_value.country"], "style": "keys_and_values", "hour_folders": "hive"},
)


def records(topic: str, count: int = 40) -> list[Record]:
    offsets = [0, 0]
    out = []
    for i in range(count):
        partition = i % 2
        value: dict[str, Any] = {"order_id": f"o-{i}", "price": PRICES[i % 4], "quantity": 1 + i % 3}
        if COUNTRIES[i % 5] is not None:
            value["country"] = COUNTRIES[i % 5]
        timestamp = HOURS_MS[i % 3] + 1000 * i
        out.append(Record(topic, partition, offsets[partition], timestamp, orjson.dumps(value), f"k{i}".encode()))
        offsets[partition] += 1
    return out


def write_archive(config: StreamConfig, root: Path, batch: list[Record]) -> list[str]:
    """Route and render ``batch`` as the archiver does; return the object keys written."""
    context = StreamContext.build(config, ArchiveSettings(), ManualClock())
    spec = RenderSpec.decode(context.spec)
    fmt = format_of(spec)
    groups: dict[tuple[str, str, int], list[Frame]] = defaultdict(list)
    for record in batch:
        routed = context.router.route(record)
        assert routed.reason == "", routed.reason
        (segment,) = context.encoder.encode([record], [routed])
        groups[(routed.buffer.hour, routed.buffer.folders, record.partition)] += decode_segment(segment.encoded)
    keys = []
    for (hour, folders, partition), frames in sorted(groups.items()):
        key = object_key(
            "raw",
            config.name,
            hour,
            partition,
            frames[0].offset,
            frames[-1].offset,
            fmt.extension,
            folders=folders,
            hive_hours=config.partition_by.hour_folders == "hive",
        )
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            assert fmt.write(frames, spec.context(partition, key), out) == len(frames)
        keys.append(key)
    return keys


def template_pattern(template: str) -> re.Pattern[str]:
    """``raw/orders/${country}/${year}/...`` -> a pattern of the object keys under it, one named
    group per partition key."""
    parts = re.split(r"\$\{([a-z_][a-z0-9_]*)\}", template)
    pattern = "".join(re.escape(part) if index % 2 == 0 else f"(?P<{part}>[^/]+)" for index, part in enumerate(parts))
    return re.compile(pattern + r"[^/]+")


def register_view(spark: Any, table: TableDescription, root: Path) -> list[str]:
    """Register ``table`` as a Spark view over the objects under ``root`` that its location
    template finds, each row's partition values extracted from its object's path; return the
    keys found."""
    from pyspark.sql import functions as F

    template = table.location_template.removeprefix(f"s3://{BUCKET}/")
    pattern = template_pattern(template)
    names = [key.name for key in table.partition_keys]
    assert sorted(pattern.groupindex) == sorted(names)
    found = sorted(
        key
        for key in (path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file())
        if pattern.fullmatch(key)
    )
    schema = ", ".join(f"`{column.name}` {column.type}" for column in table.columns)
    frame = read(spark, table, schema, [str(root / key) for key in found])
    # Spark names each row's file as a URI (a folder C%2FD is C%252FD there): decoded, the same
    # pattern (Java's named-group syntax) extracts the values from the end of the path.
    path = F.expr("url_decode(input_file_name())")
    java_pattern = "/" + pattern.pattern.replace("(?P<", "(?<") + "$"
    for name in names:
        frame = frame.withColumn(name, F.regexp_extract(path, java_pattern, pattern.groupindex[name]))
    frame.createOrReplaceTempView(table.name)
    return found


def read(spark: Any, table: TableDescription, schema: str, files: list[str]) -> Any:
    """Spark's own reader of the table's SerDe, with the table's columns as the schema."""
    reader = spark.read.schema(schema)
    if table.serde.endswith("ParquetHiveSerDe"):
        return reader.parquet(*files)
    if table.serde.endswith("OpenCSVSerde"):
        serde = table.serde_parameters
        return reader.csv(
            files,
            sep=serde["separatorChar"],
            quote=serde["quoteChar"],
            escape=serde["escapeChar"],
            header=table.parameters.get("skip.header.line.count") == "1",
        )
    if table.serde.endswith("JsonSerDe"):
        return reader.json(files)
    raise AssertionError(f"no Spark reader for {table.serde}")


def folder(country: str | None) -> str:
    return {"C/D": "C%2FD", None: "__missing__"}.get(country, country or "")


def expected(batch: Iterable[Record], countries: set[str], day: str = "2026-11-21") -> list[tuple[Any, ...]]:
    """(country folder, hour, count, revenue) of ``batch`` on ``day`` (UTC), by country and hour."""
    from datetime import UTC, datetime

    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for record in batch:
        value = orjson.loads(record.value)
        when = datetime.fromtimestamp(record.timestamp_ms / 1000, UTC)
        country = folder(value.get("country"))
        if when.date().isoformat() == day and country in countries:
            total = totals[(country, f"{when.hour:02d}")]
            total[0] += 1
            total[1] += value["price"] * value["quantity"]
    return [(country, hour, count, round(revenue, 2)) for (country, hour), (count, revenue) in sorted(totals.items())]


@pytest.fixture
def views(spark: Any) -> Iterator[Any]:
    """The session; the views a test registers are dropped after it."""
    yield spark
    for name in ("orders", "shipments"):
        spark.catalog.dropTempView(name)


def rows(spark: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in spark.sql(sql).collect()]


def test_the_readme_shows_these_queries() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert ORDERS_SQL in readme
    assert SHIPMENTS_SQL in readme


def test_parquet_orders_query(views: Any, tmp_path: Path) -> None:
    spark = views
    batch = records("orders")
    written = write_archive(ORDERS, tmp_path, batch)
    table = describe_table(ORDERS, bucket=BUCKET, raw_prefix="raw")
    assert table is not None
    assert sorted(register_view(spark, table, tmp_path)) == sorted(written)
    assert any("/C%2FD/" in key for key in written) and any("/__missing__/" in key for key in written)

    result = rows(spark, ORDERS_SQL)
    assert result == expected(batch, {"US"})
    assert [hour for _country, hour, _count, _revenue in result] == ["07", "08"]
    # every record is in the view, its columns as the writer wrote them
    assert rows(spark, "SELECT count(*), count(DISTINCT partition, offset) FROM orders") == [(40, 40)]
    first = spark.sql("SELECT * FROM orders WHERE partition = 0 AND offset = 0").collect()[0].asDict(recursive=True)
    assert first["topic"] == "orders" and first["key"] == "k0" and first["timestamp"] == HOURS_MS[0]
    assert first["value"] == {"order_id": "o-0", "price": 12.5, "quantity": 1, "country": "US"}
    assert first["event_time"].timestamp() * 1000 == HOURS_MS[0]
    assert (first["country"], first["year"], first["month"], first["day"], first["hour"]) == (
        "US",
        "2026",
        "11",
        "21",
        "07",
    )


def test_gzip_csv_shipments_query(views: Any, tmp_path: Path) -> None:
    spark = views
    batch = records("shipments")
    written = write_archive(SHIPMENTS, tmp_path, batch)
    assert all(key.endswith(".csv.gz") for key in written)
    table = describe_table(SHIPMENTS, bucket=BUCKET, raw_prefix="raw")
    assert table is not None
    assert sorted(register_view(spark, table, tmp_path)) == sorted(written)
    assert any("/country=C%2FD/year=2026/month=11/day=21/hour=07/" in key for key in written)

    assert rows(spark, SHIPMENTS_SQL) == expected(batch, {"US", "C%2FD", "__missing__"})
    assert rows(spark, "SELECT count(*) FROM shipments") == [(40,)]
