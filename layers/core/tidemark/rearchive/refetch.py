"""A quarantined flush's records, fetched again from the source and checked against the ledger.

A flush is a buffer's segments: each holds the records of one accepted chunk that the router sent
to the buffer (its kind, event hour and partition-by folders), from the segment's first offset to
its last. Fetching each segment's offset range again and routing it with the stream's router
gives back those records -- and only those -- if the log still holds them unchanged and the
configuration routes them as it did. Each segment is checked before any of its frames is handed
on: the same count, first and last offset as the ledger's, and the same fingerprint wherever the
ledger's window still has one. The frames are then encoded and decoded exactly as staging does,
so the object renders from what staging would have held. One segment is in memory at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from tidemark.clock import ManualClock
from tidemark.eventtime import hour_end_ms
from tidemark.ledger.model import SealedFlush
from tidemark.rearchive.exceptions import RefetchMismatchError
from tidemark.records.model import Record
from tidemark.resets import fingerprint
from tidemark.routing import Router
from tidemark.sources import PartitionId
from tidemark.staging.frames import Frame
from tidemark.staging.segment import decode_segment, take
from tidemark.writer.stream import StreamContext


class RecordSource(Protocol):
    """The source log, read again (``tidemark.kafka_log.KafkaLog``)."""

    def records(self, partition: PartitionId, first: int, last: int) -> Iterator[Record]:
        """The records at positions ``first..last``, ascending; raises ``NotRetainedError`` when
        the log no longer holds ``first``."""
        ...


class RefetchedFlush:
    """Call it for the flush's frames (``PartitionWriter.rearchive`` renders them)."""

    def __init__(
        self,
        stream: StreamContext,
        partition: PartitionId,
        flush: SealedFlush,
        source: RecordSource,
        fingerprints: Mapping[int, int],
    ) -> None:
        self._stream = stream
        self._partition = partition
        self._flush = flush
        self._source = source
        self._fingerprints = fingerprints
        key = flush.buffer.key
        # A processing-time stream routed each record by the time it was archived: the router
        # is given a clock standing inside the buffer's hour, so its records route back to it
        # (and a dead letter without a usable timestamp is filed there too, as it was).
        clock = ManualClock(hour_end_ms(key.hour, stream.config.event_time.timezone) - 1)
        self._router = Router(stream.config, clock)

    def __call__(self) -> Iterator[Frame]:
        for segment in self._flush.buffer.segments:
            fetched = list(self._source.records(self._partition, segment.first, segment.last))
            self._check_fingerprints(fetched)
            routes = self._router.route_batch(fetched)
            mine = [index for index, route in enumerate(routes) if route.buffer == self._flush.buffer.key]
            offsets = [fetched[index].offset for index in mine]
            if len(mine) != segment.records or (offsets[0], offsets[-1]) != (segment.first, segment.last):
                where = f"{self._stream.name}/{self._partition} offsets {segment.first}..{segment.last}"
                held = f"{len(fetched)} records there, {len(mine)} of them for {self._flush.buffer.key}"
                raise RefetchMismatchError(
                    f"{where}: the source holds {held}; {segment.records} were staged "
                    f"({segment.first}..{segment.last}). Records compacted or deleted, or a configuration that "
                    "routes them elsewhere now: not rearchived"
                )
            [pending] = self._stream.encoder.encode(take(fetched, mine), take(routes, mine))
            yield from decode_segment(pending.encoded)

    def _check_fingerprints(self, records: list[Record]) -> None:
        for record in records:
            known = self._fingerprints.get(record.offset)
            if known is not None and known != fingerprint(record):
                raise RefetchMismatchError(
                    f"{self._stream.name}/{self._partition} offset {record.offset}: the source holds another record "
                    "than the one archived there (a recreated topic?): not rearchived"
                )
