"""jobs.aggregation.values: numbers read exactly (never through a double they do not fit), one
text rendering per JSON token, ISO text kept as text at any depth; compared with plain-Python
readings of the same values."""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa
import pytest

from jobs.aggregation.reader import value_schema
from jobs.aggregation.transforms import refuse_shadowed_fields
from jobs.aggregation.values import (
    DECIMAL,
    EnvelopeError,
    complete,
    conform,
    infer_text,
    mixed_fields,
    parse_values,
    unify,
    widen,
)
from tidemark.config.model import AggregationConfig
from tidemark.exceptions import ConfigError


def test_u64_ids_are_exact_decimals_and_one_of_them_does_not_turn_the_field_into_doubles() -> None:
    ids = [2**64 - 1 - n for n in range(40)]
    values = [json.dumps({"user_id": n, "price": 1.5}).encode() for n in [*ids, 7]]
    table = parse_values(values)
    assert table.schema.field("user_id").type == DECIMAL
    assert table.column("user_id").to_pylist() == [Decimal(n) for n in [*ids, 7]]
    assert len(set(table.column("user_id").to_pylist())) == len(set(ids)) + 1
    assert table.column("price").to_pylist() == [1.5] * 41
    beyond = parse_values([json.dumps({"n": 10**40 + n}).encode() for n in range(3)])
    assert beyond.column("n").to_pylist() == [str(10**40 + n) for n in range(3)]  # text, exact


def test_integers_meet_in_decimal_and_never_in_double_with_floats() -> None:
    assert widen(pa.int64(), DECIMAL) == DECIMAL
    assert widen(DECIMAL, pa.int32()) == DECIMAL
    assert widen(pa.int64(), pa.float64()) == pa.float64()
    assert widen(DECIMAL, pa.float64()) == pa.string()
    small = parse_values([b'{"n":1}', b'{"n":2}'])
    run = unify([small, parse_values([b'{"n":18446744073709551615}'])])
    assert run.field("n").type == DECIMAL
    assert conform(small, list(run), 2)[0].to_pylist() == [Decimal(1), Decimal(2)]


def test_csv_cells_of_long_digit_strings_are_exact() -> None:
    numbers = [str(12345678901234567890 + n) for n in range(20)]
    column = infer_text(pa.array(numbers))
    assert column.type == DECIMAL and column.to_pylist() == [Decimal(n) for n in numbers]
    assert len(set(column.to_pylist())) == 20
    assert infer_text(pa.array(["1" * 40, "2"])).to_pylist() == ["1" * 40, "2"]
    assert infer_text(pa.array([numbers[0], "1.5"])).to_pylist() == [numbers[0], "1.5"]  # never a double
    assert infer_text(pa.array(["3", "1.5"])).to_pylist() == [3.0, 1.5]


def test_a_mixed_field_renders_each_number_as_its_json_token_in_every_object() -> None:
    numbers_only = [b'{"code":1000.0}', b'{"code":1e22}', b'{"code":7}']
    mixed = [b'{"code":1000.0}', b'{"code":"abc"}', b'{"code":{"a":1.50}}']
    run = unify([parse_values(numbers_only), parse_values(mixed)])
    assert run.field("code").type == pa.string() and mixed_fields(run) == ["code"]
    tokens = [value.decode()[len('{"code":') : -1] for value in numbers_only + mixed]
    expected = [json.loads(token) if token.startswith('"') else token for token in tokens]
    found = (
        parse_values(numbers_only, run).column("code").to_pylist() + parse_values(mixed, run).column("code").to_pylist()
    )
    assert found == expected == ["1000.0", "1e22", "7", "1000.0", "abc", '{"a":1.50}']


def test_integers_and_booleans_in_text_are_not_mixed_fields() -> None:
    """Spark's readers render integers and booleans as their tokens too."""
    run = unify([parse_values([b'{"a":18446744073709551615,"b":true}']), parse_values([b'{"a":"x","b":"y"}'])])
    assert [field.type for field in run] == [pa.string(), pa.string()] and mixed_fields(run) == []


@pytest.mark.parametrize("value", [b'{"meta":{"at":"2026-11-21T08:00:00Z","n":1}}', b'{"l":["2026-11-21T08:00:00Z"]}'])
def test_iso_text_stays_text_at_any_depth(value: bytes) -> None:
    table = parse_values([value, value])
    assert table.to_pylist() == [json.loads(value)] * 2


def test_aggregations_naming_a_value_field_the_envelope_shadows_are_refused() -> None:
    key = "raw/orders/2026/11/21/08/orders+3+00000000000000000010-00000000000000000010.jsonl"
    line = (
        b'{"topic":"orders","partition":3,"offset":10,"timestamp":1,"event_time":"2026-11-21T08:00:00.000Z",'
        b'"key":"k","value":{"hour":"x","offset":3600,"price":2},"headers":[]}\n'
    )
    values = value_schema([(key, line)])
    for aggregation in (
        AggregationConfig(name="a", group_by=["hour"], metrics={"n": "count(*)"}),
        AggregationConfig(name="b", metrics={"s": "sum(offset)"}),
        AggregationConfig(name="c", metrics={"s": "sum(`OFFSET` * price)"}),
    ):
        with pytest.raises(ConfigError, match=f"aggregation '{aggregation.name}' names '(hour|offset)'"):
            refuse_shadowed_fields(values, [aggregation])
    fine = AggregationConfig(name="d", metrics={"s": "sum(price)", "t": "min(event_time)", "l": "max('offset')"})
    refuse_shadowed_fields(values, [fine])  # names neither shadowed field (a literal is no column)


def test_an_hours_schema_keeps_its_own_types_and_gets_the_runs_other_fields_as_nulls() -> None:
    """Findings 7 and 8: an hour is typed by its own objects (``complete``), so another hour's
    text or double never retypes its fields; the fields only other hours have (at any depth)
    are added, so every aggregation resolves in every hour."""
    own = unify([parse_values([b'{"product_id":1,"n":9007199254740993,"meta":{"a":1}}'])])
    other = unify([parse_values([b'{"product_id":"x","n":2.5,"meta":{"b":"y"},"extra":true}'])])
    run = unify([own, other])
    assert run.field("product_id").type == pa.string() and run.field("n").type == pa.float64()
    hour = complete(own, run)
    assert hour.field("product_id").type == pa.int64() and hour.field("n").type == pa.int64()
    assert hour.field("meta").type == pa.struct([("a", pa.int64()), ("b", pa.string())])
    assert hour.field("extra").type == pa.bool_()
    assert complete(other, run).field("meta").type == pa.struct([("b", pa.string()), ("a", pa.int64())])
    assert complete(own, own) == own
    columns = conform(parse_values([b'{"product_id":1,"n":9007199254740993,"meta":{"a":1}}']), hour, 1)
    assert [column.to_pylist() for column in columns] == [[1], [2**53 + 1], [{"a": 1, "b": None}], [None]]


def test_integers_beyond_2_53_conform_to_a_double_field_as_every_reader_rounds_them() -> None:
    """Finding 7: an object of integers in an hour whose field is a double elsewhere rounds
    them to the nearest double (what Arrow's reader, the Python path and Spark's reader do
    with one object holding both), never a failed cast."""
    alone = parse_values([b'{"n":9007199254740993}'])
    both = parse_values([b'{"n":9007199254740993}', b'{"n":0.5}'])
    assert both.column("n").to_pylist() == [float(2**53 + 1), 0.5]
    (column,) = conform(alone, [pa.field("n", pa.float64())], 1)
    assert column.to_pylist() == [float(2**53 + 1)] == both.column("n").to_pylist()[:1]
    with pytest.raises(EnvelopeError, match="is double here but int64"):  # never the other way
        conform(parse_values([b'{"n":0.5}']), [pa.field("n", pa.int64())], 1)


def test_values_that_are_not_objects_are_rows_of_nulls() -> None:
    """Finding 11, the Arrow reader: arrays, scalars, strings and ``null`` are records with
    every field null (the rows are kept: they count)."""
    values = [b'{"price":1}', b"[1,2]", b"5", b'"{\\"price\\":3}"', b"true", b"null"]
    for data in (values, pa.array([value.decode() for value in values])):
        assert parse_values(data).to_pylist() == [{"price": 1}] + [{"price": None}] * 5
    assert parse_values([b"[1]", b"2"]).num_columns == 0  # no field at all: conform adds the hour's as nulls


def test_field_names_that_differ_only_in_case_are_two_fields() -> None:
    """Finding 12, the Arrow reader: ``price`` and ``Price`` are two columns."""
    table = parse_values([b'{"price":1,"Price":10}', b'{"Price":20}'])
    assert table.column_names == ["price", "Price"]
    assert table.to_pylist() == [{"price": 1, "Price": 10}, {"price": None, "Price": 20}]
