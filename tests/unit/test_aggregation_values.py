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
