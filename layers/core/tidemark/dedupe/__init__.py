"""Exactly once without offsets: the ids a partition has accepted (RabbitMQ), see ``base``.

The SQLite backend (``tidemark.dedupe.sqlite``) is not imported here: only functions serving a
queue open an index, so the others do not pay for ``sqlite3`` at cold start."""

from __future__ import annotations

from tidemark.dedupe.base import DedupeIndex
from tidemark.dedupe.exceptions import DedupeError, DedupeIndexUnavailableError
from tidemark.dedupe.ids import digest, message_id

__all__ = ["DedupeError", "DedupeIndex", "DedupeIndexUnavailableError", "digest", "message_id"]
