"""``tidemark status``: where each partition of a stream stands, from the ledger (and the source).

Per partition: the staged offset (accepted into staging), the offset up to which everything is
committed to S3, the open buffers (hour, records, bytes, age), the sealed and quarantined
flushes, the watermark -- and, where the source can be asked, its end offset and the lag.

A partition is *stale* when it holds records that should have reached S3 by now: an open buffer
older than the flush policy's ``max_age`` plus a grace (the sweeper flushes idle buffers), a
sealed flush older than the grace (its upload keeps failing), any quarantined flush (an operator
must re-archive it), a recovery claimed and not finished (``tidemark recover`` died, or refused
it), or -- when the source is known -- a lag while nothing was accepted for the
grace period (a stopped or failing mapping).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tidemark.config.model import StreamConfig
from tidemark.ledger.base import Ledger
from tidemark.ledger.model import OpenBuffer, PartitionState, Recovery
from tidemark.sources import KAFKA, PartitionId, partition_sort_key

#: how much later than its rule a buffer may still be waiting before the partition is stale
DEFAULT_GRACE_MS = 15 * 60_000


#: an offset lag up to this many is counted record by record (a transaction's commit marker
#: takes an offset but is no record: a quiet transactional partition shows an offset lag of 1)
COUNTED_LAG = 1_000


class EndOffsets(Protocol):
    """The source's end position of a partition (the next offset a producer's record gets), and
    how many records it holds in a range (``tidemark.kafka_log.KafkaLog``)."""

    def end_offset(self, partition: PartitionId) -> int: ...

    def records_between(self, partition: PartitionId, first: int, last: int) -> int | None: ...


@dataclass
class BufferStatus:
    hour: str
    kind: str
    folders: str
    records: int
    bytes: int
    first: int
    last: int
    age_s: float  # since it opened
    state: str  # open, sealed or quarantined
    detail: str = ""  # a seal's reason, a quarantine's error


@dataclass
class PartitionStatus:
    partition: PartitionId
    epoch: int
    staged_offset: int
    committed_through: int
    watermark_ms: int
    updated_ms: int
    buffers: list[BufferStatus] = field(default_factory=list)
    end_offset: int | None = None  # the source's, when it could be asked
    lag: int | None = None  # records the source holds beyond the staged offset
    stale: list[str] = field(default_factory=list)  # why the partition needs attention

    @property
    def open_buffers(self) -> int:
        return sum(buffer.state == "open" for buffer in self.buffers)


@dataclass
class StreamStatus:
    stream: str
    now_ms: int
    partitions: list[PartitionStatus]

    @property
    def stale(self) -> list[PartitionStatus]:
        return [partition for partition in self.partitions if partition.stale]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stale_partitions"] = [partition.partition for partition in self.stale]
        return data


def stream_status(
    stream: StreamConfig,
    ledger: Ledger,
    now_ms: int,
    *,
    partitions: Iterable[PartitionId] = (),
    source: EndOffsets | None = None,
    grace_ms: int = DEFAULT_GRACE_MS,
) -> StreamStatus:
    """Every partition the ledger registered (plus ``partitions``), in order."""
    known = set(ledger.partitions(stream.name)) | set(partitions)
    recovers = stream.source.shape.kind == KAFKA  # only a Kafka log is read again by ``tidemark recover``
    rows = [
        partition_status(
            stream,
            ledger.load(stream.name, partition),
            now_ms,
            source=source,
            grace_ms=grace_ms,
            recovery=ledger.recovery(stream.name, partition) if recovers else None,
        )
        for partition in sorted(known, key=partition_sort_key)
    ]
    return StreamStatus(stream.name, now_ms, rows)


def partition_status(
    stream: StreamConfig,
    state: PartitionState,
    now_ms: int,
    *,
    source: EndOffsets | None = None,
    grace_ms: int = DEFAULT_GRACE_MS,
    recovery: Recovery | None = None,
) -> PartitionStatus:
    row = PartitionStatus(
        state.partition,
        state.epoch,
        state.staged_offset,
        state.committed_through(),
        state.watermark_ms,
        state.updated_ms,
    )
    for buffer in state.buffers.values():
        row.buffers.append(_buffer(buffer, "open", now_ms))
    for flush in state.sealed.values():
        row.buffers.append(
            _buffer(flush.buffer, "sealed", now_ms, f"{flush.reason}, sealed {_age(now_ms, flush.sealed_ms)}")
        )
    for held in state.quarantined.values():
        row.buffers.append(_buffer(held.flush.buffer, "quarantined", now_ms, held.error))
    row.buffers.sort(key=lambda buffer: (buffer.hour, buffer.kind, buffer.folders, buffer.first))
    max_age_ms = stream.flush.max_age_ms
    for buffer in state.buffers.values():
        if now_ms - buffer.opened_ms > max_age_ms + grace_ms:
            row.stale.append(
                f"buffer {buffer.key} open for {_age(now_ms, buffer.opened_ms)} (max_age {stream.flush.max_age})"
            )
    for flush in state.sealed.values():
        if now_ms - flush.sealed_ms > grace_ms:
            row.stale.append(f"flush {flush.object_key} sealed {_age(now_ms, flush.sealed_ms)} ago, not uploaded")
    for held in state.quarantined.values():
        buffer = held.flush.buffer
        row.stale.append(
            f"flush {held.flush.object_key} quarantined: tidemark rearchive --stream {state.stream} "
            f"-p {state.partition} --from-offset {buffer.first} --to-offset {buffer.last} --bootstrap-servers ..."
        )
    unit = recovery.pending if recovery is not None else None
    if unit is not None:
        row.stale.append(
            f"a recovery of {unit.records} records at offsets {unit.ranges[0][0]}..{unit.ranges[-1][1]} was claimed "
            f"{_age(now_ms, unit.claimed_ms)} ago and not finished: tidemark recover --stream {state.stream} "
            f"-p {state.partition} --bootstrap-servers ..."
        )
    if source is not None:
        row.end_offset = source.end_offset(state.partition)
        row.lag = max(row.end_offset - 1 - state.staged_offset, 0)
        if 0 < row.lag <= COUNTED_LAG:
            row.lag = source.records_between(state.partition, state.staged_offset + 1, row.end_offset - 1) or 0
        # A partition the ledger never saw (a mapping started at LATEST, a new partition) lags
        # without being stale: nothing of it was ever accepted.
        if row.lag and state.version and now_ms - state.updated_ms > grace_ms:
            row.stale.append(f"{row.lag} records behind and nothing accepted for {_age(now_ms, state.updated_ms)}")
    return row


def _buffer(buffer: OpenBuffer, state: str, now_ms: int, detail: str = "") -> BufferStatus:
    key = buffer.key
    return BufferStatus(
        key.hour, key.kind, key.folders, buffer.records, buffer.size, buffer.first, buffer.last,
        round((now_ms - buffer.opened_ms) / 1000, 1), state, detail,
    )  # fmt: skip


def _age(now_ms: int, then_ms: int) -> str:
    seconds = max(now_ms - then_ms, 0) // 1000
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
