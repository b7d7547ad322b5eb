"""msgspec readers for ``Router.route_batch``'s fast path, and the guards that keep them to orjson's verdicts.

Why msgspec: decoding a value into a ``msgspec.Struct`` that holds only the event-time field
skips every other field in C without building Python objects for it, about 0.3 us for a
200-byte value where ``orjson.loads`` plus ``dict.get`` take about 0.8 us. Decoding into
``msgspec.Raw`` validates a whole document the same way without building anything.

But orjson is the reference (``Router.route`` reads values with it, and its verdicts and error
messages are the definition), and msgspec's skipping reader is laxer. Every value msgspec
accepts that orjson might not, or might read differently, must be routed by ``route``. The
differences, and what catches each (``risky`` returns the indices of the values any guard flags):

* Numbers that overflow a double. orjson refuses them ("number is infinity when parsed as
  double"); msgspec skips them unparsed (``{"a":1e400}``, ``-1E+400``, a 400-digit integer).
  A number can only overflow with an exponent of three or more digits or an integer part of
  309 or more digits: ``overflowing`` flags a value with a number whose exponent has three
  digits or more (leading zeros count, a negative exponent never overflows) or with any run
  of ``LONG_DIGITS`` (100) digits. Below both bounds a number is under 1e198.
* Text that is not UTF-8 (a bare ``\\xff``, surrogates encoded as ``\\xed\\xa0\\x80``, the
  overlong ``\\xc0\\x80``): orjson refuses it anywhere, msgspec not in what it skips (keys
  included). ``not_utf8`` flags a value with a byte that Python's strict UTF-8 decoder, which
  refuses exactly these, does not accept (one ``isascii`` on the joined batch in the usual
  all-ASCII case).
* Nesting. orjson refuses more than ``ORJSON_MAX_DEPTH`` (1024) levels; msgspec's limit is
  the interpreter's recursion limit, which may be higher. ``too_deep`` flags a value with
  more than 1024 opening brackets, counted only in values long enough to hold that many
  pairs (2050 bytes).

Not guarded, because they cannot change a verdict the fast path is sure of (see
``Router._field_times``): integers beyond 64 bits, which msgspec returns as ``int`` where
orjson gives a ``float`` (only event times within 0..``MAX_MS`` are sure, and orjson gives
``int`` for all of those), and floats (a float event time is always left to ``route``).
Checked to agree (``tests/unit/test_json_fast_path.py``): duplicate keys (the last wins, the
time field included), keys written with escapes (``"created\\u005fat"`` is the field), lone or
reversed surrogate escapes (both refuse), a byte order mark, control characters, leading zeros,
trailing commas or content (both refuse), and what is JSON whitespace.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from functools import cache
from itertools import accumulate
from typing import Any

import msgspec

ORJSON_MAX_DEPTH = 1024  # orjson refuses a 1025th level of nesting
LONG_DIGITS = 100  # a digit run this long may be an integer part orjson reads as infinity (from 309 digits)
_SEPARATOR = b"\n"  # joins the batch; what a number at a value's end is followed by there

# One byte class per byte: a digit is "0", an exponent mark or a plus sign "e" (so "1e+400" reads
# "0ee000"), what may follow a number in JSON ("," "}" "]" or JSON whitespace) ";", anything else
# "x" (the minus sign too: a negative exponent never overflows).
_CLASSES = bytes(
    ord("0")
    if 0x30 <= byte <= 0x39
    else ord("e")
    if byte in b"eE+"
    else ord(";")
    if byte in b",}] \t\r\n"
    else ord("x")
    for byte in range(256)
)
# An exponent of three digits or more, ending the number: followed by a byte that may end one, or
# the end of the batch. Found without the mantissa (a false alarm such as "x":"e123, y" inside a
# string merely leaves the value to route). Python's re scans the batch for the literal "e000"
# about twice as fast as for "0e", which the digits of every hex identifier contain.
_BIG_EXPONENT = re.compile(rb"e000+(?![^;])")
_DIGIT_RUN = b"0" * LONG_DIGITS

Decodes = msgspec.json.Decoder[Any]


@cache
def field_decoder(field: str) -> Decodes:
    """A decoder of a JSON object into a struct whose ``value`` is the object's ``field`` member
    (None when absent), skipping all other members; anything but an object is an error."""
    struct = msgspec.defstruct("EventTimeField", [("value", object, None)], rename={"value": field}, gc=False)
    return msgspec.json.Decoder(struct)


#: validates one JSON document of any type, building nothing (``msgspec.Raw`` is a view)
document_decoder: msgspec.json.Decoder[msgspec.Raw] = msgspec.json.Decoder(msgspec.Raw)


def risky(values: Sequence[bytes]) -> set[int]:
    """Indices of the values on which msgspec's reader may accept what orjson refuses (see the
    module docstring): these must be decided by ``Router.route``."""
    joined = _SEPARATOR.join(values)
    found = set(overflowing(values, joined))
    if not joined.isascii():
        found.update(not_utf8(values))
    found.update(too_deep(values))
    return found


def not_utf8(values: Sequence[bytes]) -> list[int]:
    """Indices of the values that are not UTF-8 (strictly: no surrogates, no overlong forms)."""
    return [index for index, value in enumerate(values) if not value.isascii() and not _is_utf8(value)]


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def overflowing(values: Sequence[bytes], joined: bytes | None = None) -> list[int]:
    """Indices of the values holding a number that may be infinite as a double: one with an
    exponent of three digits or more, or a run of ``LONG_DIGITS`` digits (anywhere, strings
    included: a false alarm only costs a trip through ``route``). ``joined`` is
    ``_SEPARATOR.join(values)`` when the caller has it."""
    classes = (_SEPARATOR.join(values) if joined is None else joined).translate(_CLASSES)
    end = len(classes)
    found: list[int] = []
    starts: list[int] = []
    position = 0
    while True:  # the first hit from ``position``, then on from the next value's start
        hit = _BIG_EXPONENT.search(classes, position)
        run = classes.find(_DIGIT_RUN, position)
        first = min(hit.start() if hit else end, run if run >= 0 else end)
        if first >= end:
            return found
        if not starts:
            starts = [0, *accumulate(len(value) + len(_SEPARATOR) for value in values)]
        index = bisect_right(starts, first) - 1
        found.append(index)
        position = starts[index + 1]


def too_deep(values: Sequence[bytes]) -> list[int]:
    """Indices of the values that may nest deeper than orjson's ``ORJSON_MAX_DEPTH`` levels:
    more opening brackets than that (only values of at least twice as many bytes can hold them)."""
    shortest = 2 * (ORJSON_MAX_DEPTH + 1)
    if max(map(len, values), default=0) < shortest:
        return []
    return [
        index
        for index, value in enumerate(values)
        if len(value) >= shortest and value.count(b"[") + value.count(b"{") > ORJSON_MAX_DEPTH
    ]
