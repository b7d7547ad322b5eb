"""Which partition of the target topic a replayed record goes to.

The replayer computes the partition itself and passes it to the producer: resuming after a
crash reads each target partition's tail, so it must know where every record was sent. Two
ways:

* ``same`` (the default): the source partition's number. Order across the topic's partitions
  is as it was; the target needs at least as many partitions as the highest source partition + 1.
* ``key``: Kafka's Java ``DefaultPartitioner`` for keyed records,
  ``(murmur2(key) & 0x7fffffff) % partitions`` -- where a Java or librdkafka ``murmur2``
  producer would have put the key. A record without a key goes to ``source partition %
  partitions`` (a Kinesis shard id without a key: the murmur2 of its id), deterministically,
  where Java's producer would pick a sticky partition at random: a rerun must send it to the
  same place to find it again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tidemark.replay.exceptions import ReplayError, TooFewPartitionsError
from tidemark.sources import PartitionId, partition_sort_key

SAME = "same"
KEY = "key"
PARTITIONERS = (SAME, KEY)

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (MurmurHash2, seed ``0x9747b28c``): the signed 32-bit value
    the Java client computes for ``data``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Where Kafka's Java ``DefaultPartitioner`` puts a keyed record: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class Partitioning:
    """A partitioner over a target topic of ``partitions`` partitions."""

    mode: str
    partitions: int

    def __post_init__(self) -> None:
        if self.mode not in PARTITIONERS:
            raise ReplayError(f"--partitioner {self.mode!r}: one of {', '.join(PARTITIONERS)}")
        if self.partitions < 1:
            raise ReplayError("the target topic has no partitions")

    def target(self, source: PartitionId, key: bytes | None) -> int:
        """The target partition of a record of source partition ``source`` with ``key``."""
        if self.mode == SAME:
            assert isinstance(source, int)  # check() refused shard ids
            return source
        if key is not None:
            return partition_for_key(key, self.partitions)
        if isinstance(source, int):
            return source % self.partitions
        return partition_for_key(source.encode("utf-8"), self.partitions)

    def reach(self, source: PartitionId) -> range:
        """Every target partition a record of ``source`` may go to."""
        if self.mode == SAME:
            assert isinstance(source, int)
            return range(source, source + 1)
        return range(self.partitions)

    def check(self, sources: Iterable[PartitionId], topic: str) -> None:
        """Refuse ``same`` when a source partition has no partition of its number in the target."""
        if self.mode != SAME:
            return
        ordered = sorted(sources, key=partition_sort_key)
        shards = [source for source in ordered if not isinstance(source, int)]
        if shards:
            raise TooFewPartitionsError(
                f"--partitioner same: {shards[0]!r} is a Kinesis shard id, not a partition number: "
                "use --partitioner key"
            )
        if ordered and int(ordered[-1]) >= self.partitions:
            raise TooFewPartitionsError(
                f"topic {topic!r} has {self.partitions} partitions, the archive has partition {ordered[-1]}: "
                f"give it {int(ordered[-1]) + 1} partitions or more, or use --partitioner key"
            )
