"""``tidemark.records.kafka._columns`` (msgspec, a group at a time) accepts exactly what the
per-record path ``_convert`` accepts, with the same records of the same types; where it declines
(``None``) the caller's per-record path decides. Generated groups of awkward records cover
base64 that ``a2b_base64(strict_mode=True)`` and msgspec treat differently, ints that are not
exactly ``int``, header lists that are equal (``==``) but not alike, and fields of odd types."""

from __future__ import annotations

import base64
import copy
import enum
from collections import UserDict
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.exceptions import MalformedEventError
from tidemark.records import kafka
from tidemark.records.kafka import _columns, _convert, parse_kafka_event
from tidemark.records.model import Record

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WEB = [{"source": [119, 101, 98]}]


class Flag(enum.IntEnum):
    ONE = 1


class Text(str):
    __slots__ = ()


class Numbers(list[int]):
    pass


class Record_(dict[str, Any]):
    pass


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def typed(value: Any) -> Any:
    """``value`` with the type of every part, so ``==`` also compares types (``1 == True``)."""
    if isinstance(value, tuple | list):
        return (type(value), tuple(typed(item) for item in value))
    return (type(value), value)


def per_record(chunk: list[Any]) -> list[Record] | None:
    """The reference: the per-record path alone, ``None`` where it rejects the group."""
    topics: set[str] = set()
    try:
        return [_convert(raw, index, topics) for index, raw in enumerate(chunk)]
    except (MalformedEventError, TypeError):  # TypeError: an unhashable topic, rejected all the same
        return None


def assert_agrees(chunk: list[Any]) -> list[Record] | None:
    before = repr(chunk)
    got = _columns(chunk, set())
    assert repr(chunk) == before  # the input is not modified
    expected = per_record(chunk)
    if got is not None:
        assert expected is not None, "the column path accepted a group the per-record path rejects"
        assert all(type(record) is Record for record in got)
        assert typed(got) == typed(expected)
    return got


# -- strategies ----------------------------------------------------------------------------------

payloads = st.binary(max_size=12)
good_base64 = payloads.map(b64)
bad_base64 = st.one_of(
    payloads.filter(bool).map(lambda data: b64(data).rstrip("=")),  # missing padding
    payloads.map(lambda data: b64(data) + "="),  # excess padding ("YWJj=": a2b accepts it)
    payloads.map(lambda data: b64(data) + "=="),
    payloads.filter(bool).map(lambda data: b64(data) + "\n"),  # a trailing newline
    payloads.filter(lambda data: len(data) > 3).map(lambda data: b64(data)[:4] + "\n" + b64(data)[4:]),
    payloads.map(lambda data: base64.urlsafe_b64encode(b"\xfb\xff" + data).decode()),  # "-_" alphabet
    payloads.map(lambda data: b64(data) + "QQ=="),  # characters after padding when data needs padding
    st.sampled_from(["QR==", "QRF=", "YQ", "YQ=", "YQ===", "=", "====", " YWJj", "YW Jj", "\u00e9Wjj", "YWJj\x00"]),
)
# values msgspec treats differently from the per-record checks get branches of their own
encoded = st.one_of(
    good_base64,
    bad_base64,
    st.sampled_from([None, "", 5, ["YWJj"], True]),
    st.sampled_from([b"YWJj", bytearray(b"YWJj"), memoryview(b"YWJj"), Text("YWJj")]),
)
counts = st.one_of(
    st.integers(min_value=-2, max_value=6),
    st.sampled_from([2**63 - 1, 2**63, 2**64, 2**70, -(2**70), "1", None]),
    st.sampled_from([Flag.ONE, True, False, 1.0]),
)
timestamps = st.one_of(
    st.integers(min_value=-2, max_value=2**41),
    st.sampled_from([2**64, -(2**70), 1.5, "1763709153000", None]),
    st.sampled_from([Flag.ONE, True, 1.0]),
)
topics = st.one_of(
    st.sampled_from(["orders", "payments.v2", "a" * 249]),
    st.sampled_from(["x" * 250, "../etc", "", "orders topic", "orders\n", 5, None, ["orders"]]),
    st.just(Text("orders")),
)
header_byte_lists: st.SearchStrategy[Any] = st.one_of(
    st.lists(st.integers(min_value=0, max_value=255), max_size=4),
    st.sampled_from(
        [[-1, 127], [256], [1.0], [True, False], [1, "2"], [None], "web", None, (1, 2), Numbers([1]), b"web", {}]
    ),
)
header_names = st.one_of(st.sampled_from(["source", "trace", "s"]), st.sampled_from([Text("source"), 1]))
header_lists = st.one_of(
    st.sampled_from([None, [], WEB, WEB]),
    st.lists(st.dictionaries(header_names, header_byte_lists, max_size=3), max_size=3),
    st.sampled_from(
        [
            [{"h": [1]}],
            [{"h": [1.0]}],  # == [{"h": [1]}]
            [{"h": [True]}],  # == [{"h": [1]}] too, and the same bytes
            [{"a": [1], "b": [2]}],
            [{"b": [2], "a": [1]}],  # == the one above, in the other order
            [{"h": [1]}, {"h": [2]}],
            ["source"],
            [UserDict({"h": [1]})],
            ({"h": [1]},),
            0,
            "",
            "web",
            {},
            {"h": [1]},
            False,
        ]
    ),
)
# header lists that are == but not alike (or alike and ==, for the control), for one group
equal_families = st.sampled_from(
    [
        [[{"h": [1]}], [{"h": [1.0]}]],
        [[{"h": [1]}], [{"h": [True]}]],
        [[{"a": [1], "b": [2]}], [{"b": [2], "a": [1]}]],
        [[{"h": [1]}], [{"h": Numbers([1])}]],
        [[{"s": [1]}], [{Text("s"): [1]}]],
        [[{"h": [1]}], [UserDict({"h": [1]})]],
        [WEB, [{"source": [119, 101, 98]}]],
    ]
)
extras = st.dictionaries(
    st.sampled_from(["timestampType", "serializedKeySize", "leaderEpoch"]),
    st.one_of(st.sampled_from(["CREATE_TIME", "LOG_APPEND_TIME"]), st.integers(), st.none(), st.booleans()),
    max_size=2,
)
# what a schema registry integration adds (``null`` when a part was not validated), and odd shapes
good_schema = st.one_of(
    st.none(), st.builds(lambda f, i: {"dataFormat": f, "schemaId": i}, st.sampled_from(["AVRO", "JSON"]), st.text())
)
odd_schema = st.one_of(
    st.sampled_from(["AVRO", [], 0, {"dataFormat": "AVRO"}, {"dataFormat": "AVRO", "schemaId": 7}]),
    st.builds(lambda i: UserDict({"dataFormat": "AVRO", "schemaId": i}), st.text(max_size=3)),
)
schema_fields = st.dictionaries(st.sampled_from(["keySchemaMetadata", "valueSchemaMetadata"]), good_schema, max_size=2)


FIELDS = ["topic", "partition", "offset", "timestamp", "value", "key", "headers", "schemas", "record"]


@st.composite
def records(draw: st.DrawFn, headers_pool: list[Any], awkward: bool) -> Any:
    """One raw record: well formed, or (``awkward``) with one or two odd fields."""
    odd = {draw(st.sampled_from(FIELDS))} if awkward else set()
    if awkward and draw(st.booleans()):
        odd.add(draw(st.sampled_from(FIELDS)))
    record: dict[Any, Any] = {
        "topic": draw(topics) if "topic" in odd else "orders",
        "partition": draw(counts) if "partition" in odd else draw(st.integers(min_value=0, max_value=3)),
        "offset": draw(counts) if "offset" in odd else draw(st.integers(min_value=0, max_value=2**40)),
        "timestamp": draw(timestamps) if "timestamp" in odd else draw(st.integers(min_value=-1, max_value=2**41)),
        "value": draw(encoded) if "value" in odd else draw(st.one_of(good_base64, st.none())),
        "key": draw(encoded) if "key" in odd else draw(st.one_of(good_base64, st.none())),
        # deep copies, as json.loads makes them: equal header lists are distinct objects
        "headers": copy.deepcopy(draw(st.sampled_from(headers_pool))),
        **draw(extras),
        **draw(schema_fields),
    }
    if "headers" in odd:
        record["headers"] = draw(header_lists)
    if "schemas" in odd:
        record[draw(st.sampled_from(["keySchemaMetadata", "valueSchemaMetadata"]))] = draw(odd_schema)
    for field in odd & {"topic", "partition", "offset", "timestamp", "value", "key", "headers"}:
        if draw(st.integers(min_value=0, max_value=5)) == 0:
            del record[field]
    if "record" in odd:
        kind = draw(st.sampled_from(["subclass", "UserDict", "int key"]))
        if kind == "subclass":
            return Record_(record)
        if kind == "UserDict":
            return UserDict(record)
        record[1] = 2
    return record


@st.composite
def groups(draw: st.DrawFn) -> list[Any]:
    """A group: well-formed records sharing a few header lists, with none, one or two awkward
    records among them (a lone odd field is what a guard must catch), or awkward throughout."""
    headers_pool = draw(st.one_of(st.lists(header_lists, min_size=1, max_size=3), equal_families))
    size = draw(st.integers(min_value=1, max_value=12))
    shape = draw(st.sampled_from(["well formed", "one awkward", "one awkward", "two awkward", "all awkward"]))
    awkward = set(range(size)) if shape == "all awkward" else set()
    if shape != "well formed":
        awkward |= {draw(st.integers(min_value=0, max_value=size - 1)) for _ in range(shape.count("two") + 1)}
    return [draw(records(headers_pool, index in awkward)) for index in range(size)]


# -- properties ----------------------------------------------------------------------------------


@settings(PROPERTY, max_examples=600)
@given(groups())
def test_column_path_agrees_with_the_per_record_path(chunk: list[Any]) -> None:
    assert_agrees(chunk)


@PROPERTY
@given(st.lists(st.sampled_from([[], WEB, None]), min_size=1, max_size=30), st.data())
def test_well_formed_groups_take_the_column_path(headers: list[Any], data: st.DataObject) -> None:
    chunk = [data.draw(records([item], awkward=False)) for item in headers]
    assert assert_agrees(chunk) is not None


# values where msgspec alone would disagree with the per-record checks, field by field
SENSITIVE: dict[str, list[Any]] = {
    "topic": [Text("orders")],
    "partition": [Flag.ONE, True, 1.0, 2**70],
    "offset": [Flag.ONE, False, 1.0, 2**64],
    "timestamp": [Flag.ONE, True, 1.0, -(2**70)],
    "value": [b"YWJj", bytearray(b"YWJj"), memoryview(b"YWJj"), "YWJj=", "YWJj==", "QR==", Text("YWJj")],
    "key": [b"YWJj", bytearray(b"YWJj"), memoryview(b"YWJj"), "YWJj=", "QRF="],
    "headers": [[{"h": [1.0]}], [{"h": [True]}], [{"h": Numbers([1])}], [{Text("h"): [1]}], [{1: [1]}]],
}


@PROPERTY
@given(
    st.lists(st.sampled_from([[{"h": [1]}], [{"a": [1], "b": [2]}], [{"b": [2], "a": [1]}]]), min_size=1, max_size=12),
    st.data(),
)
def test_one_msgspec_sensitive_field_in_a_well_formed_group(headers: list[Any], data: st.DataObject) -> None:
    chunk = [data.draw(records([item], awkward=False)) for item in headers]
    field = data.draw(st.sampled_from(sorted(SENSITIVE)))
    chunk[data.draw(st.integers(min_value=0, max_value=len(chunk) - 1))][field] = data.draw(
        st.sampled_from(SENSITIVE[field])
    )
    assert_agrees(chunk)


def per_record_only(event: Any) -> Any:
    with patch.object(kafka, "_columns", lambda chunk, topics: None):
        return outcome(event)


def outcome(event: Any) -> Any:
    try:
        return [
            (typed(batch.records), batch.topic, batch.partition, batch.source) for batch in parse_kafka_event(event)
        ]
    except MalformedEventError as exc:
        return ("MalformedEventError", str(exc))
    except TypeError:  # the same crash either way: an unhashable topic
        return ("TypeError",)


@PROPERTY
@given(st.lists(groups(), max_size=4))
def test_parse_kafka_event_agrees_with_the_per_record_path(chunks: list[list[Any]]) -> None:
    event = {
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:eu-west-1:123456789012:cluster/demo/abc",
        "records": {f"orders-{index}": chunk for index, chunk in enumerate(chunks)},
    }
    assert outcome(event) == per_record_only(event)


# -- pinned differences between msgspec and the per-record checks ----------------------------------


def one(**fields: Any) -> dict[str, Any]:
    return {"topic": "orders", "partition": 0, "offset": 1, "timestamp": 5, "value": b64(b"v"), **fields}


@pytest.mark.parametrize(
    ("chunk", "column_path"),
    [
        # a2b_base64(strict_mode=True) accepts padding after a complete quantum; msgspec does not
        pytest.param([one(value="YWJj=")], False, id="excess-padding-value"),
        pytest.param([one(key="YWJj==")], False, id="excess-padding-key"),
        # both ignore non-zero trailing bits, alike
        pytest.param([one(value="QR=="), one(value="QRF=")], True, id="non-canonical-trailing-bits"),
        pytest.param([one(value="", key="")], True, id="empty-base64"),
        pytest.param([one(value="YW Jj")], False, id="whitespace"),
        pytest.param([one(value="YWJj\n")], False, id="newline"),
        pytest.param([one(value="-_-_")], False, id="url-safe-alphabet"),
        # msgspec takes bytes-likes as they are; a2b_base64 decodes them
        pytest.param([one(value=b"YWJj")], False, id="bytes-value"),
        pytest.param([one(key=bytearray(b"YWJj"))], False, id="bytearray-key"),
        pytest.param([one(value=memoryview(b"YWJj"))], False, id="memoryview-value"),
        # msgspec reads an int subclass as an int; the per-record path rejects it
        pytest.param([one(partition=Flag.ONE)], False, id="intenum-partition"),
        pytest.param([one(offset=Flag.ONE)], False, id="intenum-offset"),
        pytest.param([one(timestamp=Flag.ONE)], False, id="intenum-timestamp"),
        pytest.param([one(partition=True)], False, id="bool-partition"),
        pytest.param([one(timestamp=1.0)], False, id="float-timestamp"),
        pytest.param([one(offset="1")], False, id="string-offset"),
        pytest.param([one(offset=-1)], False, id="negative-offset"),
        pytest.param([one(partition=2**70, offset=2**64, timestamp=-(2**70))], True, id="huge-ints"),
        # msgspec keeps a str subclass as it is
        pytest.param([one(), one(topic=Text("orders"))], False, id="str-subclass-topic"),
        pytest.param([one(topic="orders topic")], False, id="invalid-topic"),
        # header lists that are == but not alike: 1.0 == 1 (bytes() rejects a float)
        pytest.param([one(headers=[{"h": [1]}]), one(headers=[{"h": [1.0]}])], False, id="float-header-byte"),
        # True == 1 and bytes([True]) == b"\x01" on both paths
        pytest.param([one(headers=[{"h": [1]}]), one(headers=[{"h": [True]}])], True, id="bool-header-byte"),
        # dict == ignores order; the headers keep it
        pytest.param(
            [one(headers=[{"a": [1], "b": [2]}])] * 3 + [one(headers=[{"b": [2], "a": [1]}])],
            True,
            id="header-order",
        ),
        pytest.param([one(headers=[{"h": [1]}]), one(headers=[{"h": Numbers([1])}])], False, id="list-subclass"),
        pytest.param([one(headers=[{1: [1]}])], False, id="non-string-header-name"),
        pytest.param([one(headers=[{Text("h"): [1]}])], False, id="str-subclass-header-name"),
        pytest.param([one(headers=[{"h": [-1]}])], False, id="signed-header-bytes"),
        pytest.param([one(headers=[{"h": [256]}])], False, id="header-byte-out-of-range"),
        pytest.param([one(headers=({"h": [1]},))], False, id="header-tuple"),
        pytest.param([one(headers=0)], False, id="falsy-headers"),
        pytest.param([one(headers=None), one(headers=[]), {**one(), "headers": WEB}], True, id="null-empty-headers"),
        pytest.param([one(value=None, key=None), {k: v for k, v in one().items() if k != "value"}], True, id="nulls"),
        pytest.param([one(timestampType="CREATE_TIME", leaderEpoch=None)], True, id="extra-fields"),
        pytest.param([Record_(one())], False, id="dict-subclass-record"),
        pytest.param([UserDict(one())], False, id="mapping-record"),
        pytest.param([{**one(), 1: 2}], False, id="non-string-field-name"),
    ],
)
def test_pinned_cases(chunk: list[Any], column_path: bool) -> None:
    got = assert_agrees(chunk)
    assert (got is not None) == column_path


def test_groups_of_mixed_headers_share_conversions() -> None:
    """Each of the three header paths: the same on every record, a few shared, one each."""
    rows = [one(offset=offset, headers=[{"n": [offset % 3]}]) for offset in range(40)]
    for chunk in ([one(offset=offset, headers=WEB) for offset in range(40)], rows, [*rows[:1], *rows]):
        got = assert_agrees(chunk)
        assert got is not None
    unique = [one(offset=offset, headers=[{"n": list(str(offset).encode())}]) for offset in range(40)]
    assert assert_agrees(unique) is not None
    assert assert_agrees([*unique, one(headers=[{"n": [1.0]}])]) is None
