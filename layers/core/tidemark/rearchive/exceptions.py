"""Why a rearchive refused; every one leaves the ledger and the bucket as they were."""

from __future__ import annotations

from tidemark.exceptions import TidemarkError


class RearchiveError(TidemarkError):
    """Base class of the rearchive's refusals."""


class NothingToRearchiveError(RearchiveError):
    """No quarantined flush of the partition lies in the range (already rearchived, or another range)."""


class RangeSplitsFlushError(RearchiveError):
    """The range cuts through a quarantined flush: a flush is rearchived whole or not at all."""


class RefetchMismatchError(RearchiveError):
    """What the source holds now is not what was staged: records missing (compacted, deleted),
    other bytes at an offset, another epoch's log, or a configuration that routes them elsewhere."""


class UnsupportedSourceError(RearchiveError):
    """The stream's source cannot be read again by this command (Kinesis), or not as it was
    delivered (a schema registry integration decoded the values)."""
