"""tidemark.partitioning: partition values become safe folder levels; records pick their folders."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from tidemark.buffers import BufferKey
from tidemark.config.model import PartitionByConfig
from tidemark.exceptions import UnsafePathError
from tidemark.partitioning import EMPTY, MISSING, MissingPartitionValue, Partitioner, safe_level, valid_folders
from tidemark.records.model import Record


@pytest.mark.parametrize(
    ("value", "level"),
    [
        (b"US", "US"),
        (b"a-b_c.d", "a-b_c.d"),
        (b"../../x", "..%2F..%2Fx"),
        (b"/etc/passwd", "%2Fetc%2Fpasswd"),
        (b".", "%2E"),
        (b"..", "%2E%2E"),
        (b"...", "%2E%2E%2E"),
        (b"", EMPTY),
        (b"__missing__", "%5F_missing__"),  # a real value never poses as the marker
        (b"__empty__", "%5F_empty__"),
        ("Zürich".encode(), "Z%C3%BCrich"),
        (b"a b=c%", "a%20b%3Dc%25"),
        (b"\x00\xff", "%00%FF"),
    ],
)
def test_safe_level(value: bytes, level: str) -> None:
    assert safe_level(value) == level
    assert valid_folders(level)


def test_long_values_are_cut_with_a_hash_suffix_and_never_collide() -> None:
    a, b = b"x" * 10_000, b"x" * 9_999 + b"y"
    level_a, level_b = safe_level(a), safe_level(b)
    assert len(level_a) == 64 and level_a != level_b
    assert level_a.endswith("~" + hashlib.sha256(a).hexdigest()[:16])
    assert "~" not in safe_level(b"x" * 47)  # whole values never carry the suffix character


def test_cutting_never_splits_an_escape() -> None:
    level = safe_level("é".encode() * 100, max_length=32)
    head = level.split("~")[0]
    assert all(part[:2].isalnum() and len(part) >= 2 for part in head.split("%")[1:])


@pytest.mark.parametrize("folders", ["..", ".", "a/../b", "a//b", "/a", "a/", "a b", "x/\n"])
def test_unsafe_folders_are_refused(folders: str) -> None:
    assert not valid_folders(folders)
    with pytest.raises(UnsafePathError):
        BufferKey("raw", "2026-11-21T07", folders)


def test_dead_letter_buffers_have_no_folders() -> None:
    with pytest.raises(UnsafePathError):
        BufferKey("errors", "2026-11-21T07", "US")


def record(value: object, *, key: bytes | None = b"k-1", headers: tuple[tuple[str, bytes], ...] = ()) -> Record:
    return Record("orders", 3, 42, 0, orjson.dumps(value), key, headers)


def folders(config: dict[str, object], rec: Record) -> str:
    partitioner = Partitioner(PartitionByConfig.model_validate(config))
    return partitioner.folders(rec, orjson.loads(rec.value))


def test_values_and_keys_and_values_styles() -> None:
    rec = record({"country": "US", "meta": {"tier": 2}}, headers=(("tenant", b"acme"), ("tenant", b"beta")))
    fields = ["_value.country", "_value.meta.tier", "_header.tenant", "_key", "_topic", "_partition"]
    assert folders({"fields": fields}, rec) == "US/2/beta/k-1/orders/3"  # the last header of a name wins
    assert (
        folders({"fields": fields, "style": "keys_and_values"}, rec)
        == "country=US/tier=2/tenant=beta/record_key=k-1/source_topic=orders/source_partition=3"
    )


def test_missing_fields_go_to_the_missing_folder_or_are_refused() -> None:
    rec = record({"country": None}, key=None)
    assert folders({"fields": ["_value.country", "_value.city", "_key", "_header.x"]}, rec) == "/".join([MISSING] * 4)
    with pytest.raises(MissingPartitionValue, match=r"_value\.city"):
        folders({"fields": ["_value.city"], "missing": "dead_letter"}, rec)


def test_non_string_values_are_their_json_text() -> None:
    rec = record({"n": 12.5, "b": True, "o": {"a": [1]}})
    assert folders({"fields": ["_value.n", "_value.b", "_value.o"]}, rec) == "12.5/true/%7B%22a%22%3A%5B1%5D%7D"


def test_ten_thousand_distinct_values_keep_the_cache_bounded() -> None:
    partitioner = Partitioner(PartitionByConfig.model_validate({"fields": ["_key"]}))
    seen = {partitioner.folders(record({}, key=f"tenant-{n}".encode()), None) for n in range(10_000)}
    assert len(seen) == 10_000
    assert len(partitioner._cache) <= 10_000
    big = {partitioner.folders(record({}, key=b"x" * 1000 + str(n).encode()), None) for n in range(50)}
    assert len(big) == 50 and len(partitioner._cache) <= 10_000  # long values are not remembered
    assert all(len(level.split("/")[0]) == 64 for level in big)


def test_the_smallest_max_value_length_still_cuts() -> None:
    level = safe_level(b"x" * 500, max_length=24)
    assert len(level) <= 24 and "~" in level
