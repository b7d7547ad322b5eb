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
    source_of_key,
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


# -- Kinesis keys: shard ids and 129-digit sequence numbers ---------------------------------------

SHARD = "shardId-000000000006"
SEQUENCE = 49590338271490256608559692538361571095921575989136588898


def _pad(position: int) -> str:
    return str(position).rjust(129, "0")


def test_kinesis_key_of_a_small_example() -> None:
    key = object_key("raw", "orders", "2026-11-21T07", SHARD, 100, 199, "jsonl.gz", digits=129)
    assert key == (
        "raw/orders/2026/11/21/07/orders+shardId-000000000006+" + "0" * 126 + "100-" + "0" * 126 + "199.jsonl.gz"
    )


def test_kinesis_key_pads_sequence_numbers_to_129_digits() -> None:
    key = object_key("raw", "orders", "2026-11-21T07", SHARD, SEQUENCE, SEQUENCE + 9, "parquet", 2, digits=129)
    assert key == (f"raw/orders/2026/11/21/07/orders+{SHARD}+e2+{'0' * 73}{SEQUENCE}-{'0' * 73}{SEQUENCE + 9}.parquet")
    widest = object_key("raw", "orders", "2026-11-21T07", SHARD, 10**129 - 1, 10**129 - 1, "avro", digits=129)
    assert widest == f"raw/orders/2026/11/21/07/orders+{SHARD}+{'9' * 129}-{'9' * 129}.avro"


def test_kinesis_keys_sort_by_position() -> None:
    ranges = [(0, 9), (10, 10**20), (2**64, SEQUENCE - 1), (SEQUENCE, SEQUENCE + 5), (10**128, 10**129 - 1)]
    keys = [
        object_key("raw", "orders", "2026-11-21T07", SHARD, first, last, "jsonl.gz", digits=129)
        for first, last in ranges
    ]
    assert sorted(keys) == keys
    assert sorted(reversed(keys)) == keys


@pytest.mark.parametrize("hive", [False, True])
@pytest.mark.parametrize("epoch", [0, 3])
def test_kinesis_keys_read_back(epoch: int, hive: bool) -> None:
    key = object_key(
        "raw",
        "orders",
        "2026-11-21T07",
        SHARD,
        SEQUENCE,
        SEQUENCE + 9,
        "jsonl.gz",
        epoch,
        folders="country=DE",
        hive_hours=hive,
        digits=129,
    )
    assert positions_of_key(key) == (SHARD, SEQUENCE, SEQUENCE + 9)
    assert epoch_of_key(key) == epoch
    assert hour_of_key(key) == "2026-11-21T07"
    assert source_of_key(key) == "kinesis"
    assert folders_of_key(key) == "country=DE"
    hours = "year=2026/month=11/day=21/hour=07" if hive else "2026/11/21/07"
    assert hour_folder_of_key(key) == f"raw/orders/country=DE/{hours}/"


def test_source_of_kafka_keys_and_a_shard_with_kafka_widths() -> None:
    kafka = object_key("raw", "orders", "2026-11-21T07", 3, 100, 199, "jsonl.gz", 1)
    assert (source_of_key(kafka), positions_of_key(kafka), epoch_of_key(kafka)) == ("kafka", (3, 100, 199), 1)
    narrow = object_key("raw", "orders", "2026-11-21T07", SHARD, 100, 199, "jsonl.gz")
    assert narrow == f"raw/orders/2026/11/21/07/orders+{SHARD}+00000000000000000100-00000000000000000199.jsonl.gz"
    assert (source_of_key(narrow), positions_of_key(narrow)) == ("kafka", (SHARD, 100, 199))


@pytest.mark.parametrize(
    "key",
    [
        "",
        "raw/orders/2026/11/21/07/orders+shard/6+" + _pad(1) + "-" + _pad(2) + ".jsonl",
        "raw/orders/2026/11/21/07/orders+" + SHARD + "+" + _pad(1)[1:] + "-" + _pad(2) + ".jsonl",  # 128 digits
        "raw/orders/2026/11/21/07/orders+" + SHARD + "+" + _pad(1) + "-" + "0" * 20 + ".jsonl",  # mixed widths
    ],
    ids=["empty", "slash-in-shard", "128-digits", "mixed-widths"],
)
def test_what_is_not_a_kinesis_key_is_refused(key: str) -> None:
    with pytest.raises(UnsafePathError) as caught:
        positions_of_key(key)
    assert str(caught.value) == f"not a Tidemark object key: {key!r}"
    with pytest.raises(UnsafePathError) as caught:
        source_of_key(key)
    assert str(caught.value) == f"not a Tidemark object key: {key!r}"


def test_a_zero_padded_partition_is_not_read_as_a_shard() -> None:
    key = "raw/orders/2026/11/21/07/orders+0123+" + "0" * 20 + "-" + "0" * 20 + ".jsonl"
    with pytest.raises(UnsafePathError) as caught:
        positions_of_key(key)
    assert str(caught.value) == f"not a Tidemark object key: {key!r}"


@pytest.mark.parametrize(
    ("partition", "first", "last", "digits"),
    [
        (SHARD, 0, 10**129, 129),  # a position beyond 129 digits
        (SHARD, 10**129, 10**129, 129),
        (SHARD, 0, 10**20, 20),  # a position beyond the key's width
        (SHARD, 0, 1, 21),  # only the widths of the source kinds
        (SHARD, 0, 1, 128),
        ("shard/6", 0, 1, 129),
        ("s" * 129, 0, 1, 129),
        ("", 0, 1, 129),
        ("0006", 0, 1, 129),  # digits are a Kafka partition's, written as a number
        ("shard 6", 0, 1, 129),
        ("shardId-6\n", 0, 1, 129),
        (SHARD, SEQUENCE + 1, SEQUENCE, 129),  # first > last
    ],
)
def test_kinesis_key_refusals(partition: str, first: int, last: int, digits: int) -> None:
    with pytest.raises(UnsafePathError) as caught:
        object_key("raw", "orders", "2026-11-21T07", partition, first, last, "jsonl.gz", digits=digits)
    assert str(caught.value) == (f"refusing object key for partition={partition!r} epoch=0 offsets {first!r}..{last!r}")
