"""The guards of ``tidemark.jsonscan``: each catches what msgspec's skipping reader accepts and
orjson (the reference reader) refuses, and lets the rest through; and where neither flags a value,
msgspec and orjson agree on it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark import jsonscan
from tidemark.clock import ManualClock
from tidemark.config import load_config
from tidemark.config.model import EventTimeConfig
from tidemark.records.model import Record
from tidemark.routing import Router

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "tidemark.yaml"


def orjson_reads(value: bytes) -> bool:
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return True


def msgspec_reads(value: bytes) -> bool:
    try:
        jsonscan.document_decoder.decode(value)
    except (msgspec.DecodeError, RecursionError):
        return False
    return True


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


@contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


# -- overflowing numbers ---------------------------------------------------------------------------

OVERFLOWING = [
    b"1e400", b"-1e400", b"1E400", b"1e+400", b"1E+400", b"1e0400", b"1.5e+999", b"1.7976931348623159e308",
    b"1" * 400, b"-" + b"9" * 400, b"1" * 400 + b".5", b"9" * 309, b"1" * 310, b"1e99999999999999999999999",
]  # fmt: skip
FINITE = [
    b"1e99", b"1e+99", b"1E99", b"1e-400", b"-1e-400", b"1e-99999999999999999999", b"0.5", b"-0", b"1.0E+2",
    b"1700000000", b"18446744073709551616", b"1" * 99, b"0." + b"9" * 99, b"9" * 99 + b"e99", b"1.5e-7",
]  # fmt: skip


@pytest.mark.parametrize("number", OVERFLOWING)
def test_numbers_orjson_reads_as_infinity_are_flagged_where_msgspec_skips_them(number: bytes) -> None:
    for value in (b'{"x":' + number + b',"t":1}', b'{"t":1,"x":[' + number + b"]}", b'{"x":{"y":' + number + b"}}"):
        assert not orjson_reads(value) and msgspec_reads(value), value  # the difference guarded against
        assert jsonscan.overflowing([value]) == [0]
        assert jsonscan.risky([value]) == {0}
    assert jsonscan.overflowing([number]) == [0]  # a top-level number, which msgspec.Raw reads too


@pytest.mark.parametrize("number", FINITE)
def test_finite_numbers_pass(number: bytes) -> None:
    value = b'{"x":' + number + b"}"
    assert orjson_reads(value) and msgspec_reads(value)
    assert jsonscan.overflowing([value]) == []
    assert jsonscan.overflowing([number, number]) == []


@pytest.mark.parametrize(
    "value",
    [
        b'{"id":"6dcca6c2fd52d6cd9a10f4d8cf999b71"}',  # digit-e-digits in hex, ended by a quote
        b'{"id":"3e400"}',
        b'{"id":"3e-400,"}',
        b'{"x":-1e-400}',
    ],
)
def test_strings_that_only_look_like_big_exponents_pass(value: bytes) -> None:
    assert jsonscan.overflowing([value]) == []


@pytest.mark.parametrize(
    "value", [b'{"id":"3e400,"}', b'{"id":"3E+400 x"}', b'{"id":"+123,"}', b'{"id":"' + b"7" * 100 + b'"}']
)
def test_strings_that_look_exactly_like_them_are_false_alarms(value: bytes) -> None:
    """Harmless: the value only goes through ``route``, which reads it with orjson."""
    assert orjson_reads(value)
    assert jsonscan.overflowing([value]) == [0]


def test_overflowing_names_each_value_once_in_any_position() -> None:
    ok, bad = b'{"x":1}', b'{"x":1e400,"y":' + b"1" * 400 + b',"z":2E+500}'
    assert jsonscan.overflowing([bad, ok, ok, bad, bad, ok, b"1e400"]) == [0, 3, 4, 6]
    assert jsonscan.overflowing([ok] * 5) == []
    assert jsonscan.overflowing([]) == []
    # a number ending one value is not read as continuing into the next one
    assert jsonscan.overflowing([b"[1e4", b"00]"]) == []
    assert jsonscan.overflowing([b"1" * 60, b"1" * 60]) == []
    values = [ok, bad]
    assert jsonscan.overflowing(values, jsonscan._SEPARATOR.join(values)) == [1]


number_texts = st.builds(
    lambda sign, whole, fraction, mark, exponent_sign, zeros, exponent: (
        sign
        + whole
        + (b"." + fraction if fraction else b"")
        + (mark + exponent_sign + zeros + exponent if mark else b"")
    ),
    st.sampled_from([b"", b"-"]),
    st.one_of(st.just(b"0"), st.integers(1, 10**400).map(lambda number: str(number).encode())),
    st.one_of(st.just(b""), st.text("0123456789", min_size=1, max_size=120).map(str.encode)),
    st.sampled_from([b"", b"e", b"E"]),
    st.sampled_from([b"", b"+", b"-"]),
    st.sampled_from([b"", b"0", b"000"]),
    st.integers(0, 2000).map(lambda number: str(number).encode()),
)


@settings(max_examples=1500, deadline=None)
@given(number=number_texts)
def test_every_number_orjson_refuses_is_flagged(number: bytes) -> None:
    value = b'{"t":1,"x":' + number + b"}"
    assert msgspec_reads(value)
    if not orjson_reads(value):
        assert jsonscan.overflowing([value]) == [0]


# -- text that is not UTF-8 ---------------------------------------------------------------------

NOT_UTF8 = [b"\xff", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xc0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"]
UTF8 = [b"caf\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xef\xbb\xbf", b"\xf4\x8f\xbf\xbf", b"\x7f"]


@pytest.mark.parametrize("junk", NOT_UTF8)
def test_text_that_is_not_utf8_is_flagged_in_strings_and_keys(junk: bytes) -> None:
    for value in (b'{"s":"' + junk + b'","t":1}', b'{"' + junk + b'":1,"t":1}'):
        assert not orjson_reads(value), value
        assert jsonscan.not_utf8([b"{}", value]) == [1]
        assert jsonscan.risky([b"{}", value]) == {1}


@pytest.mark.parametrize("text", UTF8)
def test_utf8_text_passes(text: bytes) -> None:
    value = b'{"s":"' + text + b'","t":1}'
    assert orjson_reads(value) and msgspec_reads(value)
    assert jsonscan.not_utf8([value]) == []
    assert jsonscan.risky([value, b"{}"]) == set()


# -- nesting ----------------------------------------------------------------------------------------


def test_nesting_orjson_refuses_is_flagged() -> None:
    objects = b'{"a":' * 1024 + b"1" + b"}" * 1024  # 1024 levels, 1025 with the outer one
    for inner in (deep(1024), deep(1100), b"[" * 600 + objects[: 5 * 500] + b"1" + b"}" * 500 + b"]" * 600, objects):
        value = b'{"t":1,"x":' + inner + b"}"
        assert not orjson_reads(value)
        with recursion_limit(20_000):
            assert msgspec_reads(value)  # msgspec's limit is the interpreter's
        assert jsonscan.too_deep([b"{}", value]) == [1]
        assert jsonscan.risky([b"{}", value]) == {1}


def test_nesting_orjson_reads_passes() -> None:
    value = b'{"t":1,"x":' + deep(1023) + b"}"  # 1024 levels
    assert orjson_reads(value)
    assert jsonscan.too_deep([value]) == []
    assert jsonscan.too_deep([b'{"s":"' + b"[" * 1024 + b'"}']) == []  # too short to hold 1025 pairs
    assert jsonscan.too_deep([b'{"s":"' + b"[" * 2100 + b'"}']) == [0]  # a false alarm: brackets in a string
    assert jsonscan.too_deep([]) == []


# -- the readers --------------------------------------------------------------------------------------


def field(value: bytes, name: str = "created_at") -> Any:
    return jsonscan.field_decoder(name).decode(value).value


def test_the_field_decoder_reads_one_member_as_orjson_does() -> None:
    assert field(b'{"created_at":1,"created_at":2}') == 2  # the last duplicate wins
    assert field(b'{"created_at":1,"created\\u005fat":2}') == 2  # the same key, with an escape
    assert field(b'{"created\\u005fat":2,"created_at":1}') == 1
    assert field(b'{"\\u0063reated_at":"x"}') == "x"
    assert field(b'{"created_at":"\\u0031\\ud83d\\ude00"}') == "1\U0001f600"
    assert field(b'{"other":1}') is None
    assert field(b'{"created_At":1}') is None
    assert field(b'{"created_at":null}') is None
    assert field(b'{"created_at":-0}') == 0
    assert type(field(b'{"created_at":1.0}')) is float
    assert field(b'{"created_at":18446744073709551616}') == 2**64  # orjson: a float (out of range either way)
    assert field(b'{"x":1,"created_at":1}', "x") == 1
    assert field(b'{"a.b":1}', "a.b") == 1
    for not_an_object in (b"[1]", b"1", b'"created_at"', b"null"):
        with pytest.raises(msgspec.ValidationError):
            field(not_an_object)
    for not_json in (b'{"created_at":1e400}', b'{"created_at":"\\ud800"}', b"\xef\xbb\xbf{}", b"{}x", b""):
        with pytest.raises(msgspec.DecodeError):
            field(not_json)


json_documents = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.sampled_from(["created_at", "a", "\u00e9"]), children)
    ),
    max_leaves=12,
)
json_texts = st.builds(
    lambda document, ascii_only: json.dumps(document, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"),
    json_documents,
    st.booleans(),
)
MUTATIONS = [
    b"e400", b"E+400", b"1" * 310, b"\xff", b"\xed\xa0\x80", b"\\u005f", b"\\ud800", b'"', b",", b":", b"{", b"}",
    b"[", b"]", b" ", b"\x0c", b"0", b"-", b".", b"e", b"\\", b"\x00", b'"created_at":', b"\xef\xbb\xbf",
]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    value = bytearray(draw(json_texts))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(value)))
        cut = draw(st.integers(0, 2))
        value[at : at + cut] = draw(st.sampled_from(MUTATIONS))
    return bytes(value)


@settings(max_examples=3000, deadline=None)
@given(value=mutated())
def test_where_no_guard_flags_a_value_msgspec_and_orjson_agree(value: bytes) -> None:
    """Accepted by msgspec and not flagged: orjson reads it too, and the same time field (an int
    or a str; floats are left to ``route``)."""
    if jsonscan.risky([value]):
        return
    if msgspec_reads(value):
        assert orjson_reads(value)
    try:
        read = field(value)
    except msgspec.DecodeError:
        return
    parsed = orjson.loads(value)
    assert type(parsed) is dict
    if type(read) is int and not -(2**63) <= read < 2**64:  # the one difference: a time out of range either way
        assert type(parsed["created_at"]) is float
    elif type(read) in (int, str):
        assert parsed.get("created_at") == read and type(parsed.get("created_at")) is type(read)


# -- the router, with a raised recursion limit -------------------------------------------------------


def test_the_batch_path_refuses_deep_values_whatever_the_recursion_limit() -> None:
    base = load_config(EXAMPLE).streams[0]
    plain = Record("orders", 3, 0, 1_700_000_000_000, b'{"created_at":1700000000}', b"o-1", ())
    for source in ("json_field", "record_timestamp"):
        event_time = EventTimeConfig(
            source=source,  # type: ignore[arg-type]
            field="created_at" if source == "json_field" else None,
            format="auto",
            timezone="UTC",
        )
        router = Router(base.model_copy(update={"event_time": event_time}), ManualClock())
        for levels in (1023, 1024, 1100):
            record = plain._replace(offset=1, value=b'{"x":' + deep(levels) + b',"created_at":1700000000}')
            with recursion_limit(20_000):
                routed = router.route_batch([plain, record, plain])
                assert routed == [router.route(plain), router.route(record), router.route(plain)]
            assert (routed[1].reason == "") is (levels == 1023)
