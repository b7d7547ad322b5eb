"""tidemark.staging.store: the pure segment-name parser (no files are touched here)."""

from __future__ import annotations

import pytest

from tidemark.buffers import BufferKey
from tidemark.staging.store import SegmentFile, parse_segment_name

NAME = "raw_2026-11-21T07_00000000000000000100-00000000000000000199_1763712000000_0123456789ab.seg"


def test_parses_a_segment_name() -> None:
    assert parse_segment_name(NAME) == SegmentFile(
        name=NAME,
        buffer=BufferKey("raw", "2026-11-21T07"),
        first=100,
        last=199,
        created_ms=1_763_712_000_000,
    )


def test_parses_an_errors_segment_with_a_long_creation_time() -> None:
    name = "errors_1970-01-01T00_00000000000000000000-09223372036854775807_17637120000001_ffffffffffff.seg"
    assert parse_segment_name(name) == SegmentFile(
        name=name,
        buffer=BufferKey("errors", "1970-01-01T00"),
        first=0,
        last=9_223_372_036_854_775_807,
        created_ms=17_637_120_000_001,
    )


@pytest.mark.parametrize(
    "name",
    [
        "",
        "README",
        NAME.replace(".seg", ".tmp"),
        NAME.replace("raw_", "dead_"),
        NAME.replace("0123456789ab", "0123456789AB"),  # nonce is lowercase hex
        NAME.replace("0123456789ab", "0123456789a"),
        NAME.replace("_1763712000000_", "_176371200000_"),  # created ms needs 13+ digits
        NAME.replace("00000000000000000100", "100"),  # offsets are zero-padded to 20 digits
        NAME.replace("2026-11-21T07", "2026-11-21"),
        "../" + NAME,
        NAME + ".bak",
        NAME + "\n",  # trailing newline
    ],
)
def test_other_names_are_not_segments(name: str) -> None:
    assert parse_segment_name(name) is None
