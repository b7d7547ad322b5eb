"""Issue 30, "aggregates you can trust": values that used to become wrong figures silently --
integers beyond int64, long digit strings in CSV cells, one number rendered as text several
ways, nested ISO timestamps -- read through both readers (the Arrow reader over moto, Spark's
own over a ``file://`` root) and aggregated; the whole result is compared with a plain-Python
computation over the values that were archived."""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest

from jobs.aggregation.job import run_aggregation
from jobs.aggregation.reader import ObjectStore, value_schema
from jobs.aggregation.sink import AggregateSink, aggregates_table_schema
from jobs.aggregation.transforms import aggregate, read_records
from tests.support.format_objects import BASE_MS, Variant, store
from tests.support.harness import small_config
from tidemark.config.model import AggregationConfig
from tidemark.ledger.model import HourMark
from tidemark.objects.keys import object_key
from tidemark.staging.frames import RAW, Frame

HOUR = "2026-11-21T08"
JSONL = Variant("jsonl-none", "jsonl", "none")  # Spark's reader takes it natively
JSONL_ZSTD = Variant("jsonl-zstd", "jsonl", "zstd")  # always the Arrow reader


def objects_of(values: list[list[bytes]], variant: Variant) -> list[tuple[str, str, bytes]]:
    """One object per list of values, partition by partition, as the archive writes them."""
    found = []
    for partition, object_values in enumerate(values):
        frames = [
            Frame(RAW, offset, BASE_MS + offset, BASE_MS + offset, b"k", value, (), "")
            for offset, value in enumerate(object_values)
        ]
        key = object_key("raw", "orders", HOUR, partition, 0, len(frames) - 1, variant.extension)
        found.append((key, HOUR, variant.render(frames, partition, key)))
    return found


def aggregated(spark: Any, archive: Any, tmp_path: Path, objects, aggregation: AggregationConfig, *, native: bool):
    """The aggregation's rows (dicts, numbers as Python values) read by the Arrow reader from
    moto, or with ``native`` by Spark's readers from a ``file://`` copy."""
    if native:
        store(tmp_path, objects)
        root = f"file://{tmp_path}"
    else:
        for key, _hour, body in objects:
            archive.s3.put_object(Bucket=archive.bucket, Key=key, Body=body)
        root = f"s3://{archive.bucket}"
    planned = [(key, hour) for key, hour, _body in objects]
    reader = ObjectStore(root)
    values = value_schema((key, reader.read(key)) for key, _hour in planned)
    records = read_records(spark, planned, root, tasks=2, values=values, native=native)
    rows = [row.asDict(recursive=True) for row in aggregate(records.frame, aggregation).collect()]
    return sorted(rows, key=repr), records.readers


BOTH = pytest.mark.parametrize("native", [False, True], ids=["arrow", "spark"])


@BOTH
def test_integers_beyond_int64_are_counted_and_compared_exactly(spark, archive, tmp_path, native):
    """40 distinct u64 ids (and a few small ones, and ids beyond decimal(38,0), kept as text)
    count as 40 + 3, and max is the exact largest, never a double."""
    big = [2**64 - 1 - n for n in range(40)]
    huge = [10**45 + n for n in range(3)]  # beyond 38 digits: text, exact
    values = [
        [json.dumps({"user_id": n, "tag": "big"}).encode() for n in big],
        [json.dumps({"user_id": n, "tag": "small"}).encode() for n in (1, 2, 3)],
        [json.dumps({"account": n}).encode() for n in huge],
    ]
    objects = objects_of(values, JSONL)
    by_tag = AggregationConfig(
        name="users",
        group_by=["tag"],
        metrics={"users": "count(distinct user_id)", "top": "max(user_id)", "accounts": "count(distinct account)"},
    )
    rows, readers = aggregated(spark, archive, tmp_path, objects, by_tag, native=native)
    assert readers == ({"spark-json": 3} if native else {"arrow": 3})
    assert rows == sorted(
        [
            {"hour": HOUR, "tag": "big", "users": 40, "top": Decimal(max(big)), "accounts": 0},
            {"hour": HOUR, "tag": "small", "users": 3, "top": Decimal(3), "accounts": 0},
            {"hour": HOUR, "tag": None, "users": 0, "top": None, "accounts": 3},
        ],
        key=repr,
    )


@BOTH
def test_csv_cells_of_long_digit_strings_stay_distinct(spark, archive, tmp_path, native):
    """20 distinct 20-digit order numbers in a ``value.order_no`` column count as 20."""
    numbers = [12345678901234567890 + n for n in range(20)]
    variant = Variant("csv-paths", "csv", "gzip", columns=("partition", "offset", "event_time", "value.order_no"))
    objects = objects_of([[json.dumps({"order_no": n}).encode() for n in numbers]], variant)
    orders = AggregationConfig(
        name="orders", group_by=[], metrics={"orders": "count(distinct order_no)", "last": "max(order_no)"}
    )
    rows, _readers = aggregated(spark, archive, tmp_path, objects, orders, native=native)
    assert rows == [{"hour": HOUR, "orders": 20, "last": Decimal(max(numbers))}]


@BOTH
def test_a_mixed_field_renders_each_number_as_its_json_token(spark, archive, tmp_path, native):
    """``code`` is a number in some records and text in others: the 15 records of 1000.0 are
    one group (``1000.0``, the token archived), wherever and however they were read."""
    values = [
        [b'{"code":1000.0}'] * 10,  # an object of numbers only
        [b'{"code":1000.0}'] * 5 + [b'{"code":"abc"}', b'{"code":1e22}'],  # a mixed object
    ]
    objects = objects_of(values, JSONL)
    by_code = AggregationConfig(name="codes", group_by=["code"], metrics={"n": "count(*)"})
    rows, _readers = aggregated(spark, archive, tmp_path, objects, by_code, native=native)
    expected = defaultdict(int)
    for object_values in values:
        for value in object_values:
            token = value.decode()[len('{"code":') : -1]
            expected[json.loads(token) if token.startswith('"') else token] += 1
    assert expected == {"1000.0": 15, "abc": 1, "1e22": 1}
    assert rows == sorted([{"hour": HOUR, "code": code, "n": n} for code, n in expected.items()], key=repr)


@BOTH
def test_nested_iso_timestamps_stay_the_text_archived(spark, archive, tmp_path, native):
    """``meta.at`` is ISO text in the value: it stays that text, whatever the session's time
    zone, through both readers (the Arrow reader used to fail on it)."""
    stamps = ["2026-11-21T08:00:00Z", "2026-11-21T08:30:00Z", "2026-11-21T09:15:00Z"]
    objects = objects_of([[json.dumps({"meta": {"at": at, "n": 1}}).encode() for at in stamps]], JSONL)
    first = AggregationConfig(name="first", group_by=[], metrics={"first": "min(meta.at)", "n": "sum(meta.n)"})
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        rows, _readers = aggregated(spark, archive, tmp_path, objects, first, native=native)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert rows == [{"hour": HOUR, "first": min(stamps), "n": 3}]


class FakeLedger:
    """The ledger calls a run makes, over fixed marks and objects: which hours it cleared."""

    def __init__(self, objects: list[tuple[str, str, bytes]]) -> None:
        self.objects = objects
        self.cleared: list[str] = []
        self.runs: list[dict[str, Any]] = []

    def hour_marks(self, stream: str) -> list[HourMark]:
        hours = sorted({hour for _key, hour, _body in self.objects})
        return [HourMark(stream, hour, commits=1) for hour in hours]

    def committed_objects(self, stream: str, hour: str) -> list[Any]:
        return [SimpleNamespace(key=key, hour=h, kind="raw") for key, h, _body in self.objects if h == hour]

    def record_aggregated(self, mark: HourMark) -> bool:
        self.cleared.append(mark.hour)
        return True

    def record_run(self, stream: str, run_id: str, finished_ms: int, report: dict[str, Any]) -> None:
        self.runs.append(report)


def test_a_field_that_changes_type_in_an_object_no_sample_holds_is_read_and_a_bad_hour_fails_alone(
    spark, archive, moto_endpoint
):
    """Every object's schema counts (not 8 samples': here object 19 of 20 is the one where
    ``code`` is text), and an object that cannot be read fails its hour only: the other hour
    is written and cleared, the bad one stays dirty and is reported."""
    hour, bad_hour = HOUR, "2026-11-21T09"
    values = [[json.dumps({"code": n % 3}).encode()] * 3 for n in range(19)] + [[b'{"code":"x"}']]
    objects = objects_of(values, JSONL_ZSTD)
    frames = [Frame(RAW, 0, BASE_MS + 3_600_000, BASE_MS + 3_600_000, b"k", b'{"code": nope}', (), "")]
    key = object_key("raw", "orders", bad_hour, 0, 0, 0, JSONL_ZSTD.extension)
    objects.append((key, bad_hour, JSONL_ZSTD.render(frames, 0, key)))
    for key, _hour, body in objects:
        archive.s3.put_object(Bucket=archive.bucket, Key=key, Body=body)
    resource = boto3.resource("dynamodb", endpoint_url=moto_endpoint)
    name = f"{archive.table}-aggregates"
    resource.meta.client.create_table(**aggregates_table_schema(name))
    by_code = AggregationConfig(name="codes", group_by=["code"], metrics={"n": "count(*)"})
    stream = small_config().streams[0].model_copy(update={"aggregations": [by_code]})
    ledger = FakeLedger(objects)

    report = run_aggregation(
        spark, stream, ledger=ledger, bucket=archive.bucket, sink=AggregateSink(name, resource=resource), tasks=2
    )

    expected: dict[str, int] = defaultdict(int)
    for object_values in values:
        for value in object_values:
            expected[str(json.loads(value)["code"])] += 1
    items = resource.Table(name).scan(ConsistentRead=True)["Items"]
    assert {(item["hour"], item["group"]["code"]): item["metrics"]["n"] for item in items} == {
        (hour, code): n for code, n in expected.items()
    }
    assert ledger.cleared == [hour] and report.cleared == [hour]
    assert list(report.failed) == [bad_hour] and "not JSON" in report.failed[bad_hour]
    assert bad_hour not in report.still_dirty and ledger.runs[0]["failed"] == report.failed
