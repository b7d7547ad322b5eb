"""``tidemark replay``: read a stream's archived objects back and produce them into a Kafka topic
exactly once, resumable after a crash.

* :mod:`~tidemark.replay.plan` -- which committed objects, and refusing formats that cannot be replayed;
* :mod:`~tidemark.replay.reader` -- a source partition's records in position order (a k-way merge);
* :mod:`~tidemark.replay.partitioner` -- the target partition of each record (``same`` or ``key``: murmur2);
* :mod:`~tidemark.replay.tail` -- where a rerun resumes, read back from the target topic's tail;
* :mod:`~tidemark.replay.kafka` -- the target topic on Kafka (an idempotent, gapless producer);
* :mod:`~tidemark.replay.replayer` -- the produce loop and its report (what the CLI and the demo call).
"""

from __future__ import annotations

from tidemark.replay.exceptions import (
    ArchiveOrderError,
    DeliveryError,
    ReplayError,
    TooFewPartitionsError,
    UnreplayableFormatError,
)
from tidemark.replay.kafka import KafkaTarget
from tidemark.replay.partitioner import KEY, PARTITIONERS, SAME, Partitioning, murmur2, partition_for_key
from tidemark.replay.plan import ReplayPlan, plan_replay, replay_id
from tidemark.replay.replayer import PartitionReport, Replayer, ReplayReport, ReplayTarget
from tidemark.replay.tail import REPLAY_HEADER, SOURCE_HEADER

__all__ = [
    "KEY",
    "PARTITIONERS",
    "REPLAY_HEADER",
    "SAME",
    "SOURCE_HEADER",
    "ArchiveOrderError",
    "DeliveryError",
    "KafkaTarget",
    "PartitionReport",
    "Partitioning",
    "ReplayError",
    "ReplayPlan",
    "ReplayReport",
    "ReplayTarget",
    "Replayer",
    "TooFewPartitionsError",
    "UnreplayableFormatError",
    "murmur2",
    "partition_for_key",
    "plan_replay",
    "replay_id",
]
