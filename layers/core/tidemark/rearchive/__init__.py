"""``tidemark rearchive``: archive a quarantined flush from its records fetched again from Kafka
(see ``tidemark.rearchive.rearchiver``)."""

from tidemark.rearchive.exceptions import (
    NothingToRearchiveError,
    RangeSplitsFlushError,
    RearchiveError,
    RefetchMismatchError,
)
from tidemark.rearchive.rearchiver import Rearchiver, RearchiveReport, RecordSource

__all__ = [
    "NothingToRearchiveError",
    "RangeSplitsFlushError",
    "RearchiveError",
    "RearchiveReport",
    "Rearchiver",
    "RecordSource",
    "RefetchMismatchError",
]
