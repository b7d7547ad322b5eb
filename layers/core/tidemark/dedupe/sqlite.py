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

import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from tidemark.dedupe.base import DedupeIndex
from tidemark.dedupe.exceptions import DedupeIndexDamagedError, DedupeIndexUnavailableError
from tidemark.staging.store import fsync_dir

BUSY_TIMEOUT_S = 30.0
CACHE_KIB = 16 * 1024  # pages kept between invocations of a warm container (SQLite's default: 2 MiB)
#: SQLite's primary result codes for a file that is damaged, or not a database at all
_DAMAGED = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
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
            except sqlite3.Error as exc:
                raise self._failed(exc) from None
            except OSError as exc:
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
            raise self._failed(exc) from None
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
            raise self._failed(exc) from None
        return max(deleted, 0)

    def _indexed_through(self) -> int:
        try:
            with self._lock:
                row = self._db().execute("SELECT value FROM meta WHERE name = 'indexed_through'").fetchone()
        except sqlite3.Error as exc:
            raise self._failed(exc) from None
        return -1 if row is None else int(row[0])

    def _failed(self, exc: sqlite3.Error) -> DedupeIndexUnavailableError:
        """The error to raise: damaged (the connection is dropped, so a replaced file is opened
        afresh by the next call), or unavailable (a lock, the mount: a retry may cure it)."""
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _DAMAGED:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
            return DedupeIndexDamagedError(f"dedupe index {self.path} is damaged: {exc}")
        return DedupeIndexUnavailableError(f"dedupe index {self.path}: {exc}")

    def _replace(self, entries: Sequence[tuple[bytes, int, int]], through: int) -> str | None:
        """A new file holding ``entries``, built beside the index, synced, then renamed over it;
        the file it replaces is kept as ``<name>.damaged-<ns>``."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
            fresh = self.path.with_name(self.path.name + ".rebuilding")
            fresh.unlink(missing_ok=True)
            try:
                with closing(sqlite3.connect(fresh, isolation_level=None)) as db:
                    db.execute("PRAGMA journal_mode=PERSIST")
                    db.execute("PRAGMA synchronous=FULL")
                    db.executescript(_SCHEMA)
                    db.execute("BEGIN IMMEDIATE")
                    db.executemany(
                        "INSERT INTO ids (digest, position, accepted_ms) VALUES (?, ?, ?) "
                        "ON CONFLICT (digest) DO UPDATE SET position = max(position, excluded.position), "
                        "accepted_ms = max(accepted_ms, excluded.accepted_ms)",
                        sorted(entries),
                    )
                    db.execute("INSERT INTO meta (name, value) VALUES ('indexed_through', ?)", (through,))
                    db.execute("COMMIT")
                kept = None
                if self.path.exists():
                    kept = str(self.path.with_name(f"{self.path.name}.damaged-{time.time_ns()}"))
                    os.replace(self.path, kept)
                os.replace(fresh, self.path)
                fsync_dir(self.path.parent)
            except (OSError, sqlite3.Error) as exc:
                raise DedupeIndexUnavailableError(f"dedupe index {self.path}: rebuild failed: {exc}") from None
            return kept

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
