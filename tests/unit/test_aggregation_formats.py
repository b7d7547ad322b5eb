"""jobs.aggregation.formats and .values: every archive format read into the same envelope
columns and typed value fields (pure Arrow; no Spark)."""

from __future__ import annotations

import gzip
import io
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.aggregation.formats import (
    ObjectKind,
    iso_of_timestamps,
    kind_of_key,
    read_csv,
    read_envelopes,
    read_parquet,
)
from jobs.aggregation.native import plan_reads
from jobs.aggregation.reader import ObjectStore, read_object, records_schema, value_schema
from jobs.aggregation.values import EnvelopeError, conform, infer_text, nest_paths, parse_values, unify, widen
from tests.support.format_objects import VARIANTS, Variant, make_archived_orders, store
from tidemark.eventtime import iso_utc
from tidemark.formats import JsonLinesFormat, RenderContext, format_for
from tidemark.staging.frames import RAW, Frame

ORDERS = make_archived_orders(partitions=2, hours=1, per_object=6)
JSONL = VARIANTS["jsonl-gzip"]


def batches(variant: Variant) -> list[dict[str, object]]:
    """Every record of the variant's objects, read with the run schema its objects give."""
    objects = ORDERS.objects(variant)
    schema = value_schema((key, body) for key, _hour, body in objects)
    return [row for key, hour, body in objects for row in read_object(key, body, hour, schema).to_pylist()]


@pytest.mark.parametrize("name", [name for name in VARIANTS if name != "jsonl-gzip"])
def test_every_format_reads_into_the_same_records_as_json_lines(name: str) -> None:
    """Same columns in the same order, same types, same values: event time as the ISO text
    JSON Lines holds, whole prices as doubles, booleans, a missing note as null, an empty one
    as the empty string, and a note with a line break, a quote or a comma intact."""
    expected = batches(JSONL)
    found = batches(VARIANTS[name])
    assert found == expected
    assert {row["note"] for row in expected} == {None, "", "a,b", 'leave "at" door', "line\nbreak"}
    assert expected[0]["event_time"] == iso_utc(1_795_248_000_000)


def test_the_run_schema_is_the_same_whichever_formats_it_is_sampled_from() -> None:
    samples = [(key, body) for variant in VARIANTS.values() for key, _hour, body in ORDERS.objects(variant)[:1]]
    mixed = value_schema(samples)
    assert mixed == value_schema(samples[:1])
    assert [(field.name, str(field.type)) for field in mixed] == [
        ("order_id", "string"),
        ("customer_id", "string"),
        ("product_id", "string"),
        ("price", "double"),
        ("quantity", "int64"),
        ("created_at", "string"),
        ("gift", "bool"),
        ("note", "string"),
    ]


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("raw/s/2026/11/21/07/s+0+00000000000000000000-00000000000000000001.jsonl.gz", ObjectKind("jsonl", "gzip")),
        ("raw/s/2026/11/21/07/s+0+e2+00000000000000000000-00000000000000000001.jsonl", ObjectKind("jsonl", "none")),
        ("raw/s/c=US/year=2026/month=11/day=21/hour=07/s+0+0-1.csv.zst", ObjectKind("csv", "zstd")),
        ("raw/s/2026/11/21/07/s+0+00000000000000000000-00000000000000000001.parquet", ObjectKind("parquet", "inside")),
        ("raw/s/2026/11/21/07/s+0+00000000000000000000-00000000000000000001.avro", ObjectKind("avro", "inside")),
        ("raw/s/2026/11/21/07/s+0+00000000000000000000-00000000000000000001.bin.gz", ObjectKind("bytes", "gzip")),
        ("raw/s/2026/11/21/07/s+0+00000000000000000000-00000000000000000001.txt.zst", ObjectKind("text", "zstd")),
    ],
)
def test_the_key_tells_the_format_and_codec(key: str, kind: ObjectKind) -> None:
    assert kind_of_key(key) == kind


@pytest.mark.parametrize("key", ["raw/s/x.json", "raw/s/x", "raw/s/x.jsonl.bz2", "raw/s/x.orc"])
def test_a_key_of_no_archive_format_is_refused(key: str) -> None:
    with pytest.raises(EnvelopeError):
        kind_of_key(key)


def test_text_objects_cannot_be_aggregated() -> None:
    key = "raw/s/2026/11/21/07/s+0+00000000000000000000-00000000000000000001.txt.gz"
    with pytest.raises(EnvelopeError, match="no partition or offset"):
        read_envelopes(key, gzip.compress(b"{}\n"))


@pytest.mark.parametrize("variant", ["jsonl-gzip", "jsonl-zstd", "parquet", "avro", "csv-gzip", "bytes"])
def test_a_damaged_object_is_an_envelope_error(variant: str) -> None:
    key, _hour, body = ORDERS.objects(VARIANTS[variant])[0]
    with pytest.raises(EnvelopeError):
        read_envelopes(key, body[: len(body) // 2] + b"\x00garbage")


def test_event_times_are_formatted_by_arrow_as_iso_utc() -> None:
    millis = [0, 1_795_248_753_123, 1_795_248_753_000, 253_402_214_399_999]
    stamps = pa.array(millis, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    assert iso_of_timestamps(stamps).to_pylist() == [iso_utc(ms) for ms in millis]
    assert iso_of_timestamps(pa.array(millis, pa.int64())).to_pylist() == [iso_utc(ms) for ms in millis]


def test_a_parquet_string_value_is_parsed_without_leaving_arrow_raw_line_breaks_and_all() -> None:
    """The JSON Lines writer blanks a value's raw line breaks; Parquet keeps the value as
    produced, so the reader blanks them (insignificant whitespace in valid JSON)."""
    frames = [
        Frame(RAW, 7, 1, 1_795_248_000_000, None, b'{"a":\n1,\r\n"s":"x\\ny"}'),
        Frame(RAW, 8, 1, 1_795_248_000_001, None, b'{"a": 2}'),
    ]
    out = io.BytesIO()
    format_for("parquet", "none").write(iter(frames), RenderContext(topic="t", partition=4), out)
    envelopes = read_parquet(out.getvalue())
    assert envelopes.partition.to_pylist() == [4, 4] and envelopes.offset.to_pylist() == [7, 8]
    assert envelopes.values.to_pylist() == [{"a": 1, "s": "x\ny"}, {"a": 2, "s": None}]
    assert read_parquet(out.getvalue(), limit=1).values.to_pylist() == [{"a": 1, "s": "x\ny"}]


def test_a_typed_parquet_value_is_flattened_to_its_fields() -> None:
    key, _hour, body = ORDERS.objects(VARIANTS["parquet-typed"])[0]
    assert pa.types.is_struct(pq.read_schema(io.BytesIO(body)).field("value").type)
    values = read_envelopes(key, body).values
    assert values.column_names == [
        "order_id",
        "customer_id",
        "product_id",
        "price",
        "quantity",
        "created_at",
        "gift",
        "note",
    ]
    assert values.schema.field("quantity").type == pa.int64()


def test_parse_values_takes_a_column_with_nulls_and_non_objects() -> None:
    column = pa.array(['{"a": 1}', None, '{"a": 2.5}'])
    assert parse_values(column).to_pylist() == [{"a": 1.0}, {"a": None}, {"a": 2.5}]
    mixed = pa.array(['{"a": 1}', '{"a": "x"}', "[1]"])  # types vary, one is no object: Python path
    assert parse_values(mixed).to_pylist() == [{"a": "1"}, {"a": "x"}, {"a": None}]
    with pytest.raises(EnvelopeError, match="not JSON"):
        parse_values(pa.array(["{not json"]))


def csv_of(rows: list[list[str | None]]) -> bytes:
    table = pa.table({name: pa.array([row[i] for row in rows[1:]], pa.string()) for i, name in enumerate(rows[0])})
    import pyarrow.csv as pacsv

    out = pa.BufferOutputStream()
    pacsv.write_csv(table, out, pacsv.WriteOptions(quoting_style="needed"))
    return out.getvalue().to_pybytes()


def test_csv_value_paths_are_typed_by_their_text_and_nested_by_their_path() -> None:
    """The documented rule: every non-empty cell an integer -> long, a number -> double,
    true/false -> boolean, else text; ``value.a.b`` is field ``b`` of a struct ``a`` (as JSON
    ``{"a": {"b": ..}}`` reads); an empty unquoted cell is null, a quoted one the empty string."""
    data = csv_of(
        [
            ["partition", "offset", "value.n", "value.x", "value.ok", "value.s", "value.meta.region", "value.meta.n"],
            ["1", "5", "3", "2.5", "true", "007", "eu", "1"],
            ["1", "6", "4", "3", "false", "", None, None],
            ["1", "7", None, None, None, "a", "us", "2.5"],
        ]
    )
    envelopes = read_csv(data)
    assert envelopes.offset.type == pa.int64() and envelopes.partition.type == pa.int32()
    assert envelopes.event_time.null_count == 3  # no event_time column
    values = envelopes.values
    assert [(field.name, str(field.type)) for field in values.schema] == [
        ("n", "int64"),
        ("x", "double"),
        ("ok", "bool"),
        ("s", "string"),
        ("meta", "struct<region: string, n: double>"),
    ]
    assert values.column("s").to_pylist() == ["007", "", "a"]
    assert values.column("meta").to_pylist() == [
        {"region": "eu", "n": 1.0},
        {"region": None, "n": None},
        {"region": "us", "n": 2.5},
    ]
    assert values.column("n").to_pylist() == [3, 4, None]


def test_a_csv_object_without_positions_cannot_be_aggregated() -> None:
    with pytest.raises(EnvelopeError, match="'offset' column"):
        read_csv(csv_of([["partition", "value"], ["1", "{}"]]))
    with pytest.raises(EnvelopeError, match="not integers"):
        read_csv(csv_of([["partition", "offset", "value"], ["1", "x", "{}"]]))


def test_infer_text_and_nest_paths() -> None:
    assert infer_text(pa.array(["1", None, "-2"])).type == pa.int64()
    assert infer_text(pa.array(["1", "1e3"])).to_pylist() == [1.0, 1000.0]
    assert infer_text(pa.array(["true", None])).to_pylist() == [True, None]
    for text in ("nan", "inf", "+5", "1.", "0x10"):  # Arrow casts them; JSON never renders a number so
        assert infer_text(pa.array([text, "1"])).to_pylist() == [text, "1"]
    assert infer_text(pa.array(["1", "x"])).to_pylist() == ["1", "x"]
    assert infer_text(pa.array([None, None], pa.string())).type == pa.null()
    leaf = pa.array(["{}"])
    nested = nest_paths({"meta": leaf, "meta.region": pa.array(["eu"]), "top": pa.array([1])})
    assert nested.to_pylist() == [{"meta": {"region": "eu"}, "top": 1}]  # the struct wins over the leaf


def test_structs_widen_field_by_field_and_conform_with_nulls_for_missing_fields() -> None:
    a = pa.struct([("region", pa.string()), ("n", pa.int64())])
    b = pa.struct([("n", pa.float64()), ("zone", pa.null())])
    merged = widen(a, b)
    assert merged == pa.struct([("region", pa.string()), ("n", pa.float64()), ("zone", pa.string())])
    assert unify([pa.table({"m": pa.array([{"region": "eu", "n": 1}], a)})]).field("m").type == a
    column = pa.array([{"n": 2.5, "zone": None}, None], b)
    (conformed,) = conform(pa.table({"m": column}), [pa.field("m", merged)], 2)
    assert conformed.to_pylist() == [{"region": None, "n": 2.5, "zone": None}, None]


def test_json_lines_with_nested_objects_of_different_fields_keep_a_struct() -> None:
    key = "raw/orders/2026/11/21/08/orders+0+00000000000000000000-00000000000000000000.jsonl"
    samples = []
    for value in (b'{"meta":{"region":"eu"},"n":1}', b'{"meta":{"zone":3},"n":2}'):
        out = io.BytesIO()
        JsonLinesFormat("none").write([Frame(RAW, 0, 0, 0, None, value)], RenderContext("orders", 0), out)
        samples.append((key, out.getvalue()))
    schema = value_schema(samples)
    assert schema.field("meta").type == pa.struct([("region", pa.string()), ("zone", pa.int64())])
    rows = [read_object(key, body, "h", schema).column("meta").to_pylist()[0] for key, body in samples]
    assert rows == [{"region": "eu", "zone": None}, {"region": None, "zone": 3}]


def test_records_schema_puts_the_envelope_first_and_drops_value_fields_that_shadow_it() -> None:
    values = pa.schema([("offset", pa.string()), ("price", pa.float64())])
    assert records_schema(values).names == ["hour", "epoch", "partition", "offset", "event_time", "price"]
    assert records_schema(values).field("offset").type == pa.int64()


def test_the_object_store_reads_a_file_root_and_refuses_others(tmp_path) -> None:
    objects = ORDERS.objects(VARIANTS["avro"])
    store(tmp_path, objects)
    key, _hour, body = objects[0]
    assert ObjectStore(f"file://{tmp_path}/").read(key) == body
    assert ObjectStore("s3://bucket/some/prefix").prefix == "some/prefix"
    for root in ("bucket", "hdfs://nn/x", "s3://", "file:relative"):
        with pytest.raises(ValueError, match="archive root"):
            ObjectStore(root)


def test_only_parquet_json_lines_and_csv_with_safe_keys_go_to_spark() -> None:
    orders = make_archived_orders(partitions=1, hours=1, per_object=1)
    objects = [(key, hour) for variant in VARIANTS.values() for key, hour, _body in orders.objects(variant, hive=True)]
    escaped = orders.objects(JSONL, folders="country=United%20States")[0][:2]
    plan = plan_reads([*objects, escaped], native=True)
    assert {reader: [kind_of_key(key).format for key, _ in group] for reader, group in plan.native.items()} == {
        "json": ["jsonl", "jsonl"],
        "parquet": ["parquet", "parquet"],
        "csv": ["csv", "csv"],
    }
    assert sorted(kind_of_key(key) for key, _hour in plan.arrow) == sorted(
        [
            ObjectKind("jsonl", "zstd"),
            ObjectKind("avro", "inside"),
            ObjectKind("avro", "inside"),
            ObjectKind("csv", "zstd"),
            ObjectKind("bytes", "gzip"),
            ObjectKind("jsonl", "gzip"),  # the %-escaped folder
        ]
    )
    assert plan_reads(objects, native=False).arrow == objects


def test_an_integer_beyond_int64_is_an_exact_decimal_never_a_double_nor_a_null() -> None:
    from jobs.aggregation.values import python_column

    mixed = parse_values([b'{"a":1}', b'{"a":1180591620717411303425}', b'{"a":"x"}']).column("a").to_pylist()
    assert mixed == ["1", "1180591620717411303425", "x"]  # mixed kinds: text, each its JSON token
    table = parse_values([b'{"a":1}', b'{"a":1180591620717411303425}'])
    assert table.schema.field("a").type == pa.decimal128(38, 0)
    assert table.column("a").to_pylist() == [Decimal(1), Decimal(1180591620717411303425)]
    with pytest.raises(EnvelopeError, match="do not fit int64"):
        python_column([2**70], pa.int64())
