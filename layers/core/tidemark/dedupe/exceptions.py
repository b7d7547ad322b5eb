"""Why the dedupe index could not answer; each fails the invocation (the broker redelivers)."""

from __future__ import annotations

from tidemark.exceptions import TidemarkError


class DedupeError(TidemarkError):
    """Base class of the dedupe index's errors."""


class DedupeIndexUnavailableError(DedupeError):
    """The index file cannot be opened, read or written (the staging mount, a lock held too long)."""
