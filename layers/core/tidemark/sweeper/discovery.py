"""Which partitions the sweeper visits: every one with a staging directory, and every one it has
ever seen (the ledger's registry), so an idle partition still counts for hour completeness."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tidemark.runtime import Runtime
from tidemark.sources import PartitionId, partition_sort_key


@dataclass(frozen=True, slots=True)
class PartitionRef:
    stream: str
    partition: PartitionId

    def to_dict(self) -> dict[str, object]:
        return {"stream": self.stream, "partition": self.partition}


def discover(runtime: Runtime, stream: str, listed: Iterable[PartitionId] = ()) -> list[PartitionRef]:
    """Partitions of ``stream`` with staging, plus those the source ``listed`` (a Kinesis stream's
    shards, some of which may never have received a record), registered in the ledger as a side
    effect: only the new ones, so a sweep that finds nothing new writes nothing."""
    seen = set(runtime.staging.partitions(stream)) | set(listed)
    known = runtime.ledger.partitions(stream)
    runtime.ledger.register_partitions(stream, seen - known)
    return [PartitionRef(stream, partition) for partition in sorted(seen | known, key=partition_sort_key)]


def discover_all(runtime: Runtime) -> list[PartitionRef]:
    return [ref for stream in runtime.config.streams for ref in discover(runtime, stream.name)]
