"""tidemark.valueschema: JSON values against a declared schema (mismatches are dead-lettered)."""

from __future__ import annotations

import pytest

from tidemark.config.model import ValueSchemaConfig
from tidemark.valueschema import ValueSchema

SCHEMA = ValueSchema(
    ValueSchemaConfig.model_validate(
        {
            "fields": [
                {"name": "order_id", "type": "string"},
                {"name": "price", "type": "double"},
                {"name": "quantity", "type": "long"},
                {"name": "gift", "type": "boolean", "nullable": True},
            ]
        }
    ).fields
)


@pytest.mark.parametrize(
    "value",
    [
        {"order_id": "o-1", "price": 12.5, "quantity": 2},
        {"order_id": "o-1", "price": 12, "quantity": 2, "gift": None},  # an int is a double
        {"order_id": "o-1", "price": 1e308, "quantity": -(2**63), "gift": True},
    ],
)
def test_conforming_values(value: object) -> None:
    assert SCHEMA.mismatch(value) is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ([1, 2], "JSON list"),
        ("text", "JSON str"),
        ({"price": 1.0, "quantity": 1}, "'order_id' is missing"),
        ({"order_id": None, "price": 1.0, "quantity": 1}, "'order_id' is null"),
        ({"order_id": "o", "price": "12.5", "quantity": 1}, "'price' is str"),
        ({"order_id": "o", "price": True, "quantity": 1}, "'price' is bool"),
        ({"order_id": "o", "price": 1.0, "quantity": 1.5}, "'quantity' is float"),
        ({"order_id": "o", "price": 1.0, "quantity": 2**63}, "'quantity' is int"),
        ({"order_id": "o", "price": 1.0, "quantity": 1, "gift": "yes"}, "'gift' is str"),
        ({"order_id": "o", "price": 1.0, "quantity": 1, "coupon": "X"}, "undeclared field(s) 'coupon'"),
    ],
)
def test_mismatches_say_why(value: object, why: str) -> None:
    assert why in (SCHEMA.mismatch(value) or "")
