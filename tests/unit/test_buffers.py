"""tidemark.buffers: buffer identity and its validation."""

from __future__ import annotations

import pytest

from tidemark.buffers import ERRORS_KIND, KINDS, RAW_KIND, BufferKey
from tidemark.exceptions import UnsafePathError


@pytest.mark.parametrize(("kind", "hour"), [("raw", "2026-11-21T07"), ("errors", "1970-01-01T00")])
def test_valid_keys_render_and_parse_back(kind: str, hour: str) -> None:
    key = BufferKey(kind, hour)
    assert str(key) == f"{kind}/{hour}"
    assert BufferKey.parse(str(key)) == key


def test_kinds() -> None:
    assert (RAW_KIND, ERRORS_KIND, KINDS) == ("raw", "errors", ("raw", "errors"))


@pytest.mark.parametrize(
    ("kind", "hour"),
    [
        ("dead", "2026-11-21T07"),
        ("RAW", "2026-11-21T07"),
        ("", "2026-11-21T07"),
        ("raw", "2026-11-21"),
        ("raw", "2026-11-21T7"),
        ("raw", "2026-11-21 07"),
        ("raw", "2026-11-21T07:00"),
        ("raw", "../2026-11-21T07"),
        ("raw", "2026-11-21T07/.."),
        ("raw", ""),
        ("raw", "2026-11-21T07\n"),  # trailing newline
    ],
)
def test_invalid_keys_are_refused(kind: str, hour: str) -> None:
    with pytest.raises(UnsafePathError, match="invalid buffer key"):
        BufferKey(kind, hour)


@pytest.mark.parametrize("text", ["raw", "raw/", "/2026-11-21T07", "raw-2026-11-21T07", "raw/2026/11/21/07"])
def test_parse_refuses_malformed_text(text: str) -> None:
    with pytest.raises(UnsafePathError):
        BufferKey.parse(text)


def test_keys_are_hashable_ordered_and_immutable() -> None:
    keys = [BufferKey("raw", "2026-11-21T08"), BufferKey("errors", "2026-11-21T09"), BufferKey("raw", "2026-11-21T07")]
    assert sorted(keys) == [
        BufferKey("errors", "2026-11-21T09"),
        BufferKey("raw", "2026-11-21T07"),
        BufferKey("raw", "2026-11-21T08"),
    ]
    assert {BufferKey("raw", "2026-11-21T07"): 1}[BufferKey("raw", "2026-11-21T07")] == 1
    with pytest.raises(AttributeError):
        keys[0].hour = "2026-11-21T09"  # type: ignore[misc]
