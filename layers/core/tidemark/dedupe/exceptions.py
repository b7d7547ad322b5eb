"""Why the dedupe index could not answer; each fails the invocation (the broker redelivers)."""

from __future__ import annotations

from tidemark.exceptions import TidemarkError


class DedupeError(TidemarkError):
    """Base class of the dedupe index's errors."""


class DedupeIndexUnavailableError(DedupeError):
    """The index file cannot be opened, read or written (the staging mount, a lock held too long)."""


class DedupeIndexDamagedError(DedupeIndexUnavailableError):
    """The index file is not an SQLite database any more, or a damaged one ("file is not a
    database", "database disk image is malformed"): no retry cures it. The archiver refuses the
    queue's batches (the broker keeps them), the sweeper keeps flushing what is accepted and
    rebuilds the index (``QueueNumbering``; DESIGN.md, "RabbitMQ")."""
