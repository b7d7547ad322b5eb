"""Issue 30, "aggregates you can trust": values that used to become wrong figures silently --
integers beyond int64, long digit strings in CSV cells, one number rendered as text several
ways, nested ISO timestamps -- read through both readers (the Arrow reader over moto, Spark's
own over a ``file://`` root) and aggregated; the whole result is compared with a plain-Python
computation over the values that were archived."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pyarrow as pa
import pytest
from boto3.dynamodb.types import TypeDeserializer

from jobs.aggregation.job import run_aggregation
from jobs.aggregation.reader import ObjectStore, value_schema
from jobs.aggregation.sink import AggregateSink, aggregates_table_schema, group_text
from jobs.aggregation.transforms import aggregate, read_records
from tests.support.format_objects import BASE_MS, VARIANTS, Variant, store
from tests.support.harness import small_config
from tidemark.config.model import AggregationConfig
from tidemark.ledger.model import HourMark
from tidemark.objects.keys import object_key
from tidemark.staging.frames import RAW, Frame

HOUR = "2026-11-21T08"
JSONL = Variant("jsonl-none", "jsonl", "none")  # Spark's reader takes it natively
JSONL_ZSTD = Variant("jsonl-zstd", "jsonl", "zstd")  # always the Arrow reader


def objects_of(
    values: list[list[bytes]], variant: Variant, hour: str = HOUR, *, partition: int = 0, first_offset: int = 0
) -> list[tuple[str, str, bytes]]:
    """One object per list of values of ``hour``, partition by partition from ``partition``
    (each object's offsets from ``first_offset``), as the archive writes them."""
    found = []
    at = BASE_MS + (int(hour[-2:]) - int(HOUR[-2:])) * 3_600_000
    for index, object_values in enumerate(values):
        frames = [
            Frame(RAW, first_offset + n, at + n, at + n, b"k", value, (), "") for n, value in enumerate(object_values)
        ]
        last = first_offset + len(frames) - 1
        key = object_key("raw", "orders", hour, partition + index, first_offset, last, variant.extension)
        found.append((key, hour, variant.render(frames, partition + index, key)))
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
    rows = [row.asDict(recursive=True) for row in aggregate(records.frame, aggregation).frame.collect()]
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


# -- an hour's figures and keys are its own (findings 7, 8, 11, 12) --------------------------------


def run_items(
    spark, archive, tmp_path: Path, objects, aggregations: list[AggregationConfig], *, native: bool, table: str = ""
):
    """``run_aggregation`` (the whole job: per-hour schemas, the job's Spark settings) over
    ``objects`` as a ledger of their hours, read by the Arrow reader from moto or, with
    ``native``, by Spark's readers from a ``file://`` copy; into the aggregates table ``table``
    (a new one unless given). Returns the report, the table's name and its items in DynamoDB's
    own JSON (``{"S": ...}``, ``{"N": ...}``: what the table holds, byte for byte) without
    ``run_id``, keyed by (hour, sort key)."""
    root = None
    if native:
        root = tmp_path / "archive"
        store(root, objects)
    else:
        for key, _hour, body in objects:
            archive.s3.put_object(Bucket=archive.bucket, Key=key, Body=body)
    resource = boto3.resource("dynamodb", endpoint_url=archive.endpoint)
    if not table:
        table = f"{archive.table}-aggregates-{uuid.uuid4().hex[:6]}"
        resource.meta.client.create_table(**aggregates_table_schema(table))
    stream = small_config().streams[0].model_copy(update={"aggregations": aggregations})
    report = run_aggregation(
        spark,
        stream,
        ledger=FakeLedger(objects),
        bucket=archive.bucket,
        sink=AggregateSink(table, resource=resource),
        tasks=2,
        archive_root=f"file://{root}" if root else None,
    )
    scanned = archive.dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    items = {(item["hour"]["S"], item["sk"]["S"]): {k: v for k, v in item.items() if k != "run_id"} for item in scanned}
    return report, table, items


def plain(items) -> dict[tuple[str, str], dict[str, Any]]:
    """Items' metrics as Python values (numbers as Decimal), by (hour, sort key)."""
    return {where: TypeDeserializer().deserialize(item["metrics"]) for where, item in items.items()}


def reference(
    values: dict[str, list[bytes]], group_by: list[str], metrics: dict[str, Any]
) -> dict[tuple[str, str], dict[str, Any]]:
    """The plain-Python aggregation of the values archived per hour: each parsed as JSON
    (integers exact, fractions ``float``), a value that is no object a record with every field
    missing (null), grouped by hour and ``group_by`` (the sort key: the group's JSON, as the
    sink writes it); ``metrics`` name -> function of a group's records. A field's values are
    taken as they are in the hour: the reference has no notion of other hours."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for hour, hour_values in values.items():
        for value in hour_values:
            parsed = json.loads(value)
            fields = parsed if isinstance(parsed, dict) else {}
            groups[(hour, group_text({column: fields.get(column) for column in group_by}))].append(fields)
    return {where: {name: metric(rows) for name, metric in metrics.items()} for where, rows in groups.items()}


def total(name: str):
    """``sum(name)``: null when no record has a value."""

    def metric(rows: list[dict[str, Any]]) -> Any:
        present = [row[name] for row in rows if row.get(name) is not None]
        return sum(present) if present else None

    return metric


def top(name: str):
    return lambda rows: max((row[name] for row in rows if row.get(name) is not None), default=None)


def count(rows: list[dict[str, Any]]) -> int:
    return len(rows)


def as_numbers(metrics: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Reference figures as DynamoDB gives them back (Decimal; a float by its shortest repr)."""
    return {
        where: {
            name: None if v is None else Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
            for name, v in figures.items()
        }
        for where, figures in metrics.items()
    }


BY_PRODUCT = AggregationConfig(
    name="by_product", group_by=["product_id"], metrics={"n": "count(*)", "total": "sum(n)", "top": "max(n)"}
)
BY_PRODUCT_REFERENCE = {"n": count, "total": total("n"), "top": top("n")}


@BOTH
def test_an_hours_items_are_the_same_alone_and_with_any_other_hours(spark, archive, tmp_path, native):
    """Findings 7 and 8. Hour 08 holds integer ``product_id``s and an ``n`` beyond 2**53; hour 09
    (new) string ids and fractions. The issue's sequence: hour 08 aggregated, then late data for
    it and hour 09 in one run. Hour 08 stays keyed ``{"product_id":1}`` with its ``n`` exact, and
    each hour's items are byte for byte those of the hour aggregated alone, and the reference's.
    Failing first: the run's one schema made ``product_id`` text in hour 08 (``{"product_id":"1"}``)
    and ``n`` a double, whose safe cast failed the Arrow reader's run (``Integer value
    9007199254740993 not in range``) and which Spark's reader rounded."""
    big, later = 2**53 + 1, "2026-11-21T09"
    values = {
        HOUR: [json.dumps({"product_id": 1, "n": big}).encode(), b'{"product_id":2,"n":1}', b'{"product_id":1,"n":3}'],
        later: [b'{"product_id":"1","n":2.5}', b'{"product_id":"x","n":0.5}'],
    }
    first = objects_of([values[HOUR][:2]], JSONL)
    late = objects_of([values[HOUR][2:]], JSONL, partition=1)
    hour_08, hour_09 = first + late, objects_of([values[later]], JSONL, later, partition=2)

    _report, table, _items = run_items(spark, archive, tmp_path / "a", first, [BY_PRODUCT], native=native)
    report, _table, together = run_items(
        spark, archive, tmp_path / "b", hour_08 + hour_09, [BY_PRODUCT], native=native, table=table
    )
    _report, _table, alone_08 = run_items(spark, archive, tmp_path / "c", hour_08, [BY_PRODUCT], native=native)
    _report, _table, alone_09 = run_items(spark, archive, tmp_path / "d", hour_09, [BY_PRODUCT], native=native)

    assert report.failed == {} and sorted(report.cleared) == [HOUR, later]
    assert report.readers == ({"spark-json": 3} if native else {"arrow": 3})
    assert together == {**alone_08, **alone_09}  # byte for byte, run_id aside
    wanted = reference(values, ["product_id"], BY_PRODUCT_REFERENCE)
    assert wanted[(HOUR, '{"product_id":1}')] == {"n": 2, "total": big + 3, "top": big}
    assert plain(together) == as_numbers(wanted)


@BOTH
def test_a_field_of_integers_and_fractions_in_one_hour_is_a_double_there(spark, archive, tmp_path, native):
    """Finding 7 within one hour: an object of integers (one beyond 2**53) and an object of
    fractions make ``n`` a double in that hour, as one object holding both reads in every
    reader (the integer rounded to the nearest double, as in the reference's float
    arithmetic); the Arrow reader's safe cast used to fail the run instead."""
    big = 2**53 + 1
    values = [json.dumps({"product_id": 1, "n": big}).encode(), b'{"product_id":1,"n":0.5}']
    objects = objects_of([values[:1], values[1:]], JSONL)
    report, _table, items = run_items(spark, archive, tmp_path, objects, [BY_PRODUCT], native=native)
    assert report.failed == {} and report.cleared == [HOUR]
    mixed = {"n": count, "total": lambda rows: sum(float(row["n"]) for row in rows), "top": top("n")}
    wanted = reference({HOUR: values}, ["product_id"], mixed)
    wanted[(HOUR, '{"product_id":1}')]["top"] = float(big)  # a double field: max of the doubles
    assert plain(items) == as_numbers(wanted)


NOT_OBJECTS = [
    b'{"tag":"a","price":2}',
    b"[1,2]",
    b"5",
    b'"text"',
    b'"{\\"tag\\":\\"a\\",\\"price\\":3}"',  # a string holding JSON is a string
    b"true",
    b"null",
    b'{"price":4}',
]
NATIVE_OF = {"jsonl-none": "spark-json", "parquet": "spark-parquet", "csv-gzip": "spark-csv"}


@BOTH
@pytest.mark.parametrize("variant", ["jsonl-none", "parquet", "csv-gzip"])
def test_values_that_are_not_objects_are_records_without_fields_in_both_readers(
    spark, archive, tmp_path, native, variant
):
    """Finding 11: arrays, scalars, strings (one holding JSON) and ``null`` values are records
    whose every value field is null, in both readers and in the reference. Failing first:
    Spark's readers failed the run (``MALFORMED_RECORD_IN_PARSING``)."""
    objects = objects_of([NOT_OBJECTS[:4], NOT_OBJECTS[4:]], VARIANTS[variant])
    by_tag = AggregationConfig(
        name="by_tag", group_by=["tag"], metrics={"n": "count(*)", "total": "sum(price)", "priced": "count(price)"}
    )
    report, _table, items = run_items(spark, archive, tmp_path, objects, [by_tag], native=native)
    assert report.readers == ({NATIVE_OF[variant]: 2} if native else {"arrow": 2})
    assert report.records == len(NOT_OBJECTS)
    wanted = reference(
        {HOUR: NOT_OBJECTS},
        ["tag"],
        {"n": count, "total": total("price"), "priced": lambda rows: sum("price" in r for r in rows)},
    )
    assert wanted == {
        (HOUR, '{"tag":"a"}'): {"n": 1, "total": 2, "priced": 1},
        (HOUR, '{"tag":null}'): {"n": 7, "total": 4, "priced": 1},
    }
    assert plain(items) == as_numbers(wanted)


CASES = [
    b'{"tag":"a","price":1,"Price":10}',
    b'{"tag":"a","price":2}',
    b'{"Tag":"a","Price":20}',
    b'{"tag":"b","Tag":"B","price":3,"Price":30}',
]
CASE_PATHS = Variant(
    "csv-case",
    "csv",
    "gzip",
    columns=("partition", "offset", "event_time", *(f"value.{n}" for n in ("tag", "Tag", "price", "Price"))),
)


@BOTH
@pytest.mark.parametrize("variant", [JSONL, CASE_PATHS], ids=["jsonl", "csv-paths"])
def test_field_names_that_differ_only_in_case_are_different_fields(spark, archive, tmp_path, native, variant):
    """Finding 12: ``price`` and ``Price`` (and ``tag``, ``Tag``) are four fields, in both
    readers and the reference. Failing first: Spark resolved them as one name
    (``AMBIGUOUS_REFERENCE``); the job's session is case-sensitive now."""
    objects = objects_of([CASES[:2], CASES[2:]], variant)
    by_tag = AggregationConfig(
        name="by_tag",
        group_by=["tag", "Tag"],
        metrics={"n": "count(*)", "lower": "sum(price)", "upper": "sum(Price)"},
    )
    report, _table, items = run_items(spark, archive, tmp_path, objects, [by_tag], native=native)
    assert report.readers == ({"spark-json" if variant is JSONL else "spark-csv": 2} if native else {"arrow": 2})
    wanted = reference({HOUR: CASES}, ["tag", "Tag"], {"n": count, "lower": total("price"), "upper": total("Price")})
    assert wanted == {
        (HOUR, '{"tag":"a","Tag":null}'): {"n": 2, "lower": 3, "upper": 10},
        (HOUR, '{"tag":null,"Tag":"a"}'): {"n": 1, "lower": None, "upper": 20},
        (HOUR, '{"tag":"b","Tag":"B"}'): {"n": 1, "lower": 3, "upper": 30},
    }
    assert plain(items) == as_numbers(wanted)
    assert spark.conf.get("spark.sql.caseSensitive") == "false"  # the shared session's own setting is back


def test_spark_reader_still_fails_a_line_that_does_not_fit(spark, tmp_path):
    """Finding 11 keeps Spark's JSON Lines reader loud: only a value that is no object reads as
    a record of nulls; a value object that does not fit the hour's schema, or a line cut short
    inside a value, fails the query (as FAILFAST did), never a row of nulls."""
    ((key, hour, body),) = objects_of([[b'{"price":"x"}']], JSONL)
    store(tmp_path / "unfit", [(key, hour, body)])
    ((short_key, _hour, short),) = objects_of([[b"[1,2]"]], JSONL, partition=1)
    store(tmp_path / "unfit", [(short_key, hour, short[: short.index(b"[1,") + 3] + b"\n")])
    values = pa.schema([pa.field("price", pa.int64())])
    for planned, error in ((key, "does not fit the hour's value schema"), (short_key, "MALFORMED_RECORD_IN_PARSING")):
        read = read_records(spark, [(planned, hour)], f"file://{tmp_path / 'unfit'}", 1, values, native=True)
        assert read.readers == {"spark-json": 1}
        with pytest.raises(Exception, match=error):
            read.frame.collect()
