"""A quarantined flush's records, fetched again from the source and checked against the ledger.

A flush is a buffer's segments: each holds the records of one accepted chunk that the router sent
to the buffer (its kind, event hour and partition-by folders), from the segment's first offset to
its last. Fetching each segment's offset range again and routing it with the stream's router
gives back those records -- and only those -- if the log still holds them unchanged and the
configuration routes them as it did. Each segment is checked before any of its frames is handed
on: the same count, first and last offset, and encoded size as the ledger's (the size catches a
record swapped for another of the range by a changed configuration, unless their lengths agree
to the byte), and the same fingerprint wherever the ledger's window still has one. The frames are
encoded and decoded exactly as staging does, so the object renders from what staging would have
held. One segment is in memory at a time.

The router's clock stands at the time the segment was staged (its name carries it), within the
buffer's hour: a processing-time stream's records, and dead letters without a usable timestamp,
route back to the buffer they were staged in, and carry that time (milliseconds after the
original routing) as their event time.
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
from tidemark.staging.frames import Frame, encode_meta
from tidemark.staging.segment import decode_segment, take
from tidemark.staging.store import SegmentRef, parse_segment_name
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
        self._hour_end = hour_end_ms(flush.buffer.key.hour, stream.config.event_time.timezone)

    def __call__(self) -> Iterator[Frame]:
        for segment in self._flush.buffer.segments:
            fetched = list(self._source.records(self._partition, segment.first, segment.last))
            self._check_fingerprints(fetched)
            routes = self._router(segment).route_batch(fetched)
            mine = [index for index, route in enumerate(routes) if route.buffer == self._flush.buffer.key]
            offsets = [fetched[index].offset for index in mine]
            where = f"{self._stream.name}/{self._partition} offsets {segment.first}..{segment.last}"
            if len(mine) != segment.records or (offsets[0], offsets[-1]) != (segment.first, segment.last):
                held = f"{len(fetched)} records there, {len(mine)} of them for {self._flush.buffer.key}"
                raise RefetchMismatchError(
                    f"{where}: the source holds {held}; {segment.records} were staged "
                    f"({segment.first}..{segment.last}). Records compacted or deleted, or a configuration that "
                    "routes them elsewhere now: not rearchived"
                )
            [pending] = self._stream.encoder.encode(take(fetched, mine), take(routes, mine))
            encoded = pending.encoded
            frames = decode_segment(encoded)
            if segment.size not in (len(encoded), format_1_size(frames)):
                raise RefetchMismatchError(
                    f"{where}: the records the source holds for {self._flush.buffer.key} take {len(encoded)} bytes "
                    f"staged, the segment took {segment.size}: not the records that were staged (a configuration "
                    "that routes others here now?): not rearchived"
                )
            yield from frames

    def _router(self, segment: SegmentRef) -> Router:
        """A router whose clock stands where the segment's records were routed (see the module
        docstring): its staging time, and never past the buffer's hour."""
        named = parse_segment_name(segment.name)
        staged = named.created_ms if named is not None else self._hour_end - 1
        return Router(self._stream.config, ManualClock(min(staged, self._hour_end - 1)))

    def _check_fingerprints(self, records: list[Record]) -> None:
        for record in records:
            known = self._fingerprints.get(record.offset)
            if known is not None and known != fingerprint(record):
                raise RefetchMismatchError(
                    f"{self._stream.name}/{self._partition} offset {record.offset}: the source holds another record "
                    "than the one archived there (a recreated topic?): not rearchived"
                )


#: bytes of a version-1 frame before its key, value and meta (``tidemark.staging.frames``)
FORMAT_1_HEADER = 43


def format_1_size(frames: list[Frame]) -> int:
    """The size these frames took as a version-1 segment (buffers staged before the upgrade)."""
    return sum(
        FORMAT_1_HEADER
        + len(frame.key or b"")
        + len(frame.value or b"")
        + (
            len(encode_meta(frame.reason, frame.headers, frame.schemas))
            if frame.reason or frame.headers or frame.schemas
            else 0
        )
        for frame in frames
    )
