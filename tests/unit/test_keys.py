"""tidemark.objects.keys: object keys are a pure, safe function of their inputs."""

from __future__ import annotations

from typing import Any

import pytest

from tidemark.exceptions import UnsafePathError
from tidemark.objects.keys import (
    epoch_of_key,
    folders_of_key,
    hour_folder_of_key,
    hour_of_key,
    object_key,
    positions_of_key,
)


def test_documented_example() -> None:
    assert (
        object_key("raw", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz")
        == "raw/orders/2026/11/21/07/orders+3+00000000000000000100-00000000000000000199.jsonl.gz"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("errors", "orders", "2026-01-02T00", 0, 0, 0, "jsonl"),
            "errors/orders/2026/01/02/00/orders+0+00000000000000000000-00000000000000000000.jsonl",
        ),
        (
            ("raw", "click_stream-2", "1999-12-31T23", 12345, 7, 2**63 - 1, "jsonl.gz"),
            "raw/click_stream-2/1999/12/31/23/click_stream-2+12345+00000000000000000007-09223372036854775807.jsonl.gz",
        ),
        (
            ("0archive", "o", "2026-11-21T07", 3, 42, 42, "parquet"),
            "0archive/o/2026/11/21/07/o+3+00000000000000000042-00000000000000000042.parquet",
        ),
    ],
)
def test_key_format_and_zero_padding(args: tuple[Any, ...], expected: str) -> None:
    assert object_key(*args) == expected


def test_keys_sort_by_offset() -> None:
    offsets = [(9, 9), (10, 99), (100, 199), (1000, 1000), (99_999_999_999, 100_000_000_000)]
    keys = [object_key("raw", "orders", "2026-11-21T07", 3, first, last, "jsonl.gz") for first, last in offsets]
    assert sorted(keys) == keys


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(
            ("/raw", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="prefix='/raw'"
        ),  # absolute prefix
        pytest.param(("raw/", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="prefix='raw/'"),
        pytest.param(("..", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="prefix='..'"),
        pytest.param(("raw/../x", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="prefix='raw/../x'"),
        pytest.param(("Raw", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="prefix='Raw'"),
        pytest.param(("", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="prefix=''"),
        pytest.param(
            ("raw\n", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="prefix='raw\\n'"
        ),  # trailing newline
        pytest.param(
            ("raw", "Orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="stream='Orders'"
        ),  # uppercase stream
        pytest.param(("raw", "or/ders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="stream='or/ders'"),
        pytest.param(("raw", "..", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="stream='..'"),
        pytest.param(("raw", "../orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="stream='../orders'"),
        pytest.param(("raw", "1orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="stream='1orders'"),
        pytest.param(("raw", "", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="stream=''"),
        pytest.param(
            ("raw", "orders\n", "2026-11-21T07", 3, 100, 199, "jsonl.gz"), id="stream='orders\\n'"
        ),  # trailing newline
        pytest.param(("raw", "orders", "2026-11-21", 3, 100, 199, "jsonl.gz"), id="hour='2026-11-21'"),
        pytest.param(("raw", "orders", "2026/11/21T07", 3, 100, 199, "jsonl.gz"), id="hour='2026/11/21T07'"),
        pytest.param(("raw", "orders", "../11-21T07", 3, 100, 199, "jsonl.gz"), id="hour='../11-21T07'"),
        pytest.param(("raw", "orders", "2026-11-21T07\n", 3, 100, 199, "jsonl.gz"), id="hour='2026-11-21T07\\n'"),
        pytest.param(
            ("raw", "orders", "2026-11-21T07", -1, 100, 199, "jsonl.gz"), id="partition=-1"
        ),  # negative partition
        pytest.param(("raw", "orders", "2026-11-21T07", "3", 100, 199, "jsonl.gz"), id="partition='3'"),
        pytest.param(("raw", "orders", "2026-11-21T07", 3.0, 100, 199, "jsonl.gz"), id="partition=3.0"),
        pytest.param(
            ("raw", "orders", "2026-11-21T07", True, 100, 199, "jsonl.gz"), id="partition=True"
        ),  # a bool is not a partition
        pytest.param(("raw", "orders", "2026-11-21T07", 3, 200, 199, "jsonl.gz"), id="first=200"),  # first > last
        pytest.param(("raw", "orders", "2026-11-21T07", 3, -1, 199, "jsonl.gz"), id="first=-1"),
        pytest.param(("raw", "orders", "2026-11-21T07", 3, 100, 199, ".jsonl"), id="extension='.jsonl'"),
        pytest.param(("raw", "orders", "2026-11-21T07", 3, 100, 199, "jsonl/../x"), id="extension='jsonl/../x'"),
        pytest.param(("raw", "orders", "2026-11-21T07", 3, 100, 199, ""), id="extension=''"),
        pytest.param(("raw", "orders", "2026-11-21T07", 3, 100, 199, "JSONL"), id="extension='JSONL'"),
    ],
)
def test_unsafe_inputs_are_refused(args: tuple[Any, ...]) -> None:
    with pytest.raises(UnsafePathError):
        object_key(*args)


def test_hour_of_key_inverts_the_folder_of_object_key():
    key = object_key("errors", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz")
    assert hour_of_key(key) == "2026-11-21T07"
    for bad in ("raw/orders/2026/11/21/orders+0+1-2.jsonl", "raw/orders/2026/xx/21/07/o.jsonl", ""):
        with pytest.raises(UnsafePathError):
            hour_of_key(bad)


# -- partition-by folders and Hive hour folders ---------------------------------------------------


def test_partition_folders_go_between_the_stream_and_the_hour() -> None:
    key = object_key("raw", "orders", "2026-11-21T07", 3, 100, 199, "parquet", folders="US/acme")
    assert key == "raw/orders/US/acme/2026/11/21/07/orders+3+00000000000000000100-00000000000000000199.parquet"
    assert (hour_of_key(key), folders_of_key(key), positions_of_key(key)) == ("2026-11-21T07", "US/acme", (3, 100, 199))


def test_hive_hour_folders_and_keys_and_values() -> None:
    key = object_key("raw", "orders", "2026-11-21T07", 3, 100, 199, "avro", 2, folders="country=US", hive_hours=True)
    assert key == (
        "raw/orders/country=US/year=2026/month=11/day=21/hour=07/"
        "orders+3+e2+00000000000000000100-00000000000000000199.avro"
    )
    assert (hour_of_key(key), folders_of_key(key), epoch_of_key(key)) == ("2026-11-21T07", "country=US", 2)
    assert hour_folder_of_key(key) == "raw/orders/country=US/year=2026/month=11/day=21/hour=07/"


@pytest.mark.parametrize("folders", ["..", "../x", "a//b", "/a", "a/", "a b", "é"])
def test_unsafe_folders_are_refused(folders: str) -> None:
    with pytest.raises(UnsafePathError):
        object_key("raw", "orders", "2026-11-21T07", 3, 100, 199, "parquet", folders=folders)


def test_keys_are_a_pure_function_of_their_inputs() -> None:
    args = ("raw", "orders", "2026-11-21T07", 3, 100, 199, "csv.zst")
    assert object_key(*args, folders="a/b") == object_key(*args, folders="a/b")
    assert len({object_key(*args, folders=f) for f in ("a/b", "a", "b/a", "")}) == 4
