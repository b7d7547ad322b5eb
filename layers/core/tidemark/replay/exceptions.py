"""The ways a replay refuses to start or stops: each a one-line ``TidemarkError`` (exit code 2)."""

from __future__ import annotations

from tidemark.exceptions import TidemarkError


class ReplayError(TidemarkError):
    """A replay cannot start or cannot go on; the message says why and what to do."""


class UnreplayableFormatError(ReplayError):
    """Objects in a format that does not keep the record (text, csv, typed value columns):
    refused while planning, before anything is produced."""


class TooFewPartitionsError(ReplayError):
    """``--partitioner same`` into a topic without a partition for every source partition."""


class ArchiveOrderError(ReplayError):
    """The objects of a partition hold a position twice, or out of the order their keys name:
    the archive is not whole (``tidemark audit`` names the objects); nothing past it is produced."""


class DeliveryError(ReplayError):
    """The target topic refused records. The producer stops at the first one (gapless), so no
    later record of that partition landed and a rerun of the same command resumes correctly."""


class HoursNotArchivedError(ReplayError):
    """Records of the hours are still staged (open, sealed or quarantined): not in S3 yet."""


class TargetChangedError(ReplayError):
    """The target topic's partition count changed since this ``key``-partitioned replay began:
    records would land elsewhere than the resume points say."""
