"""Exactly once without offsets: the ids a partition has accepted (RabbitMQ), see ``base``."""

from __future__ import annotations

from tidemark.dedupe.base import DedupeIndex
from tidemark.dedupe.exceptions import DedupeError, DedupeIndexUnavailableError
from tidemark.dedupe.ids import digest, message_id
from tidemark.dedupe.sqlite import SqliteDedupeIndex

__all__ = ["DedupeError", "DedupeIndex", "DedupeIndexUnavailableError", "SqliteDedupeIndex", "digest", "message_id"]
