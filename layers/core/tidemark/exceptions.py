"""Every error Tidemark raises derives from :class:`TidemarkError`."""

from __future__ import annotations

from tidemark.sources import PartitionId


class TidemarkError(Exception):
    """Base class of all Tidemark errors."""


class ConfigError(TidemarkError):
    """The stream configuration is invalid; the message names the offending field."""


class MalformedEventError(TidemarkError):
    """The Lambda event is not an MSK / self-managed Kafka event source mapping event."""


class UnknownTopicError(TidemarkError):
    """A record arrived for a topic that no configured stream archives."""


class UnsafePathError(TidemarkError):
    """A value would have produced a path outside the staging root or the stream's prefix."""


class CorruptSegmentError(TidemarkError):
    """A ledger-accepted staging segment does not hold what the ledger says it holds.

    Accepted segments were fsync'd before the ledger accepted them, so this is never a torn
    write of ours: it is storage damage or tampering, and archiving of the partition stops
    rather than silently losing records.
    """


class UnsupportedSegmentError(TidemarkError):
    """A staging segment in a format this version does not know: written by a newer version
    (a rollback, or an upgrade still rolling out). Not damage: the flush stays sealed and is
    retried (``FlushErrors``) until a version that reads it runs, never quarantined."""


class MissingSegmentError(CorruptSegmentError):
    """A segment the ledger accepted (and has not committed) is gone from the staging mount."""


class LedgerError(TidemarkError):
    """Base class of ledger errors."""


class LedgerConflictError(LedgerError):
    """A conditional write lost: someone else changed the partition state first."""

    def __init__(self, message: str, current: object | None = None) -> None:
        super().__init__(message)
        #: The state that won, when DynamoDB returned it (``ReturnValuesOnConditionCheckFailure``).
        self.current = current


class DoubleCommitError(LedgerError):
    """An object record already exists for a flush that was still sealed: never expected."""


class LedgerItemTooLargeError(LedgerError):
    """A partition state would not fit in one ledger item (DynamoDB's 400 KB, or the configured
    budget). The writer splits its work so this never reaches the store; raised before sending."""


class LedgerFullError(LedgerError):
    """No record of the batch fits in the partition's ledger item: its sealed flushes are waiting
    for S3 (an outage). The batch fails and is redelivered once uploads go through again."""


class PositionResetError(TidemarkError):
    """A partition's positions went backwards, or its source changed, in a way a redelivery cannot
    explain (a topic recreated or changed, a cluster migrated, a log truncated).

    The batch is refused -- neither dropped as duplicates nor archived over the old records --
    until an operator starts a new epoch (``tidemark epoch start``)."""

    def __init__(self, message: str, *, stream: str, partition: PartitionId, kind: str, offset: int) -> None:
        super().__init__(message)
        self.stream = stream
        self.partition = partition
        self.kind = kind  # source_changed | bytes_differ | below_window
        self.offset = offset


class ObjectConflictError(TidemarkError):
    """An object already exists under a flush's key with other records: it is never overwritten."""


class InvalidTransitionError(LedgerError):
    """A partition state transition was asked for that the state machine does not allow."""


class StagingConflictError(TidemarkError):
    """A batch could not be accepted after repeated conflicts; the batch fails and is redelivered."""


class StaleNumberingError(StagingConflictError):
    """A queue's batch was numbered after a position another writer has since moved (see
    ``PartitionWriter.number``): renumbered from a fresh read if none of it was accepted yet,
    else the batch fails and is redelivered."""


class SourceUnavailableError(TidemarkError):
    """The source log cannot be asked (brokers unreachable, no client library)."""


class NotRetainedError(TidemarkError):
    """The source log no longer holds the positions asked for (retention, a recreated topic)."""
