"""``tidemark recover``: archive, exactly once, the records the event source mapping never
delivered (see ``tidemark.recover.recoverer``)."""

from tidemark.recover.exceptions import RecoverError, RecoverMismatchError, UnsupportedStreamError
from tidemark.recover.plan import Limits
from tidemark.recover.recoverer import LogSource, PartitionRecovery, RecoveredUnit, Recoverer

__all__ = [
    "Limits",
    "LogSource",
    "PartitionRecovery",
    "RecoverError",
    "RecoverMismatchError",
    "RecoveredUnit",
    "Recoverer",
    "UnsupportedStreamError",
]
