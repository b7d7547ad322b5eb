"""tidemark.dedupe: the ids a queue's partition accepted, in an SQLite file (no broker, no AWS)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tidemark.dedupe import digest, message_id
from tidemark.dedupe.ids import CONTENT_SHA256, MESSAGE_ID
from tidemark.dedupe.sqlite import SqliteDedupeIndex
from tidemark.records.model import Record


def record(key: bytes | None = b"m-1", value: bytes = b"{}", headers: tuple[tuple[str, bytes], ...] = ()) -> Record:
    return Record("orders::/", 0, -1, 0, value, key, headers)


def test_each_rule_reads_its_id() -> None:
    with_header = record(b"m-1", b"body", (("x-id", b"h-9"), ("other", b"")))
    assert message_id(with_header, MESSAGE_ID) == b"m-1"
    assert message_id(with_header, "header:x-id") == b"h-9"
    assert message_id(with_header, "header:other") is None  # empty: no id
    assert message_id(with_header, "header:absent") is None
    assert message_id(record(None), MESSAGE_ID) is None
    assert len(message_id(with_header, CONTENT_SHA256) or b"") == 32


def test_digests_tell_ids_from_bodies() -> None:
    """A message without an id is known by its body; that digest never equals an id's, even
    when the id's bytes are the body's."""
    assert digest(record(b"x"), MESSAGE_ID) == digest(record(b"x", b"other body"), MESSAGE_ID)
    assert digest(record(None, b"x"), MESSAGE_ID) != digest(record(b"x"), MESSAGE_ID)
    assert len(digest(record(), MESSAGE_ID)) == 16


def index(tmp_path: Path) -> SqliteDedupeIndex:
    return SqliteDedupeIndex(tmp_path / "stream" / "dedupe" / "p0.sqlite")


def test_recorded_ids_are_seen_within_the_window_and_survive_a_reopen(tmp_path: Path) -> None:
    first = index(tmp_path)
    assert first.indexed_through() == -1
    assert first.record([(b"a" * 16, 0), (b"b" * 16, 1)], 1, 1_000, expired_before_ms=0, prune_limit=10) == 0
    first.close()
    again = index(tmp_path)  # another container, after a crash
    assert again.indexed_through() == 1
    assert again.seen([b"a" * 16, b"c" * 16], since_ms=1_000) == {b"a" * 16}
    assert again.seen([b"a" * 16], since_ms=1_001) == set()  # accepted before the window


def test_indexing_the_same_positions_twice_changes_nothing(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.record([(b"a" * 16, 5)], 5, 1_000, expired_before_ms=0, prune_limit=10)
    idx.record([(b"a" * 16, 5)], 3, 2_000, expired_before_ms=0, prune_limit=10)  # a late writer's catch-up
    assert idx.indexed_through() == 5  # never moves back
    with sqlite3.connect(idx.path) as db:
        assert db.execute("SELECT position, accepted_ms FROM ids").fetchall() == [(5, 1_000)]  # its first acceptance


def test_an_expired_id_accepted_again_starts_a_new_window(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.record([(b"a" * 16, 0)], 0, 1_000, expired_before_ms=0, prune_limit=0)
    idx.record([(b"a" * 16, 7)], 7, 90_000, expired_before_ms=30_000, prune_limit=0)
    assert idx.seen([b"a" * 16], since_ms=60_000) == {b"a" * 16}


def test_pruning_deletes_at_most_its_limit_oldest_first(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.record([(bytes([n]) * 16, n) for n in range(10)], 9, 1_000, expired_before_ms=0, prune_limit=0)
    idx.record([(b"z" * 16, 10)], 10, 100_000, expired_before_ms=50_000, prune_limit=4)
    with sqlite3.connect(idx.path) as db:
        assert db.execute("SELECT count(*) FROM ids").fetchone()[0] == 7  # 10 old - 4 + 1 new
    assert idx.record([], 10, 100_001, expired_before_ms=50_000, prune_limit=100) == 6


def test_a_lookup_of_many_ids_is_answered_in_chunks(tmp_path: Path) -> None:
    idx = index(tmp_path)
    digests = [n.to_bytes(16, "big") for n in range(1_500)]  # more than SQLite's parameters per query
    idx.record([(d, n) for n, d in enumerate(digests)], 1_499, 5, expired_before_ms=0, prune_limit=0)
    assert idx.seen([*digests, b"x" * 16], since_ms=0) == set(digests)


def test_an_unusable_index_file_is_a_clear_error(tmp_path: Path) -> None:
    from tidemark.dedupe import DedupeIndexUnavailableError

    path = tmp_path / "dedupe" / "p0.sqlite"
    path.parent.mkdir()
    path.write_bytes(b"not a database, and long enough to be read as one's header" * 4)
    with pytest.raises(DedupeIndexUnavailableError, match=r"p0\.sqlite"):
        SqliteDedupeIndex(path).indexed_through()
