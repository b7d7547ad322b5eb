"""Why a recovery refused. A refusal before a claim changes nothing; one while finishing a claimed
unit leaves the unit pending, for a rerun to finish once its cause is gone."""

from __future__ import annotations

from tidemark.exceptions import TidemarkError


class RecoverError(TidemarkError):
    """Base class of the recovery's refusals."""


class UnsupportedStreamError(RecoverError):
    """The stream's records cannot be read again by position (Kinesis, RabbitMQ), or its objects
    keep no positions (``text``): which positions are missing cannot be known."""


class RecoverMismatchError(RecoverError):
    """What the source holds now is not what the claimed unit was planned from: records compacted
    or deleted, another epoch's log, or a configuration that routes them elsewhere now."""
