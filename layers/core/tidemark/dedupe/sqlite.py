"""The dedupe index in an SQLite file on the staging mount (EFS), one per partition.

Why SQLite on EFS: the index needs point lookups for a batch's ids and one durable write per
batch, at any window size; DynamoDB would cost a write per message (or rewrite items that grow
with the window), and the staging mount is already the durable, shared disk every invocation
of the partition has. SQLite's rollback journal makes each ``record`` atomic across crashes
(``synchronous=FULL``); its POSIX locks, which EFS (NFSv4.1) supports, serialise writers. WAL
mode is not used: it needs shared memory, which a network file system does not have.

Schema::

    ids(digest BLOB PRIMARY KEY, position INTEGER, accepted_ms INTEGER) WITHOUT ROWID
    ids_by_age ON ids(accepted_ms)
    meta(name TEXT PRIMARY KEY, value INTEGER)          -- indexed_through
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from tidemark.dedupe.base import DedupeIndex
from tidemark.dedupe.exceptions import DedupeIndexUnavailableError

BUSY_TIMEOUT_S = 30.0
CACHE_KIB = 16 * 1024  # pages kept between invocations of a warm container (SQLite's default: 2 MiB)
_LOOKUP_CHUNK = 500  # digests per SELECT (SQLite allows 999 parameters by default)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS ids (digest BLOB PRIMARY KEY, position INTEGER NOT NULL, accepted_ms INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ids_by_age ON ids (accepted_ms);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


class SqliteDedupeIndex(DedupeIndex):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._connection: sqlite3.Connection | None = None
        # One connection per process, kept warm across invocations, which may run on any thread
        # (the archiver's partition pool): it is used under this lock, never by two at once.
        self._lock = threading.RLock()

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                connection = sqlite3.connect(
                    self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
                )
                # PERSIST: the journal's header is zeroed at commit, not the file deleted (on NFS a
                # delete and a create are round trips of their own); still a rollback journal.
                connection.execute("PRAGMA journal_mode=PERSIST")
                connection.execute("PRAGMA synchronous=FULL")
                connection.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
                connection.executescript(_SCHEMA)
            except (OSError, sqlite3.Error) as exc:
                raise DedupeIndexUnavailableError(f"dedupe index {self.path}: {exc}") from None
            self._connection = connection
        return self._connection

    def _seen(self, digests: set[bytes], since_ms: int) -> set[bytes]:
        with self._lock:
            return self._seen_locked(digests, since_ms)

    def _seen_locked(self, digests: set[bytes], since_ms: int) -> set[bytes]:
        wanted = sorted(digests)
        found: set[bytes] = set()
        try:
            db = self._db()
            for start in range(0, len(wanted), _LOOKUP_CHUNK):
                chunk = wanted[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))  # placeholders only: the digests are parameters
                rows = db.execute(
                    f"SELECT digest FROM ids WHERE digest IN ({marks}) AND accepted_ms >= ?",
                    (*chunk, since_ms),
                )
                found.update(bytes(row[0]) for row in rows)
        except sqlite3.Error as exc:
            raise DedupeIndexUnavailableError(f"dedupe index {self.path}: {exc}") from None
        return found

    def _record(
        self, entries: Sequence[tuple[bytes, int]], through: int, now_ms: int, expired_before_ms: int, prune_limit: int
    ) -> int:
        with self._lock:
            return self._record_locked(entries, through, now_ms, expired_before_ms, prune_limit)

    def _record_locked(
        self, entries: Sequence[tuple[bytes, int]], through: int, now_ms: int, expired_before_ms: int, prune_limit: int
    ) -> int:
        try:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                # An id accepted again after its entry expired (a duplicate older than the window,
                # archived again) starts a new window; a live entry keeps its first acceptance
                # (indexing the same positions twice changes nothing).
                db.executemany(
                    "INSERT INTO ids (digest, position, accepted_ms) VALUES (?, ?, ?) ON CONFLICT (digest) DO UPDATE "
                    "SET position = excluded.position, accepted_ms = excluded.accepted_ms WHERE accepted_ms < ?",
                    # in key order: neighbouring digests share B-tree pages
                    [(digest, position, now_ms, expired_before_ms) for digest, position in sorted(entries)],
                )
                db.execute(
                    "INSERT INTO meta (name, value) VALUES ('indexed_through', ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)",
                    (through,),
                )
                deleted = db.execute(
                    "DELETE FROM ids WHERE digest IN "
                    "(SELECT digest FROM ids WHERE accepted_ms < ? ORDER BY accepted_ms LIMIT ?)",
                    (expired_before_ms, prune_limit),
                ).rowcount
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise DedupeIndexUnavailableError(f"dedupe index {self.path}: {exc}") from None
        return max(deleted, 0)

    def _indexed_through(self) -> int:
        try:
            with self._lock:
                row = self._db().execute("SELECT value FROM meta WHERE name = 'indexed_through'").fetchone()
        except sqlite3.Error as exc:
            raise DedupeIndexUnavailableError(f"dedupe index {self.path}: {exc}") from None
        return -1 if row is None else int(row[0])

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
