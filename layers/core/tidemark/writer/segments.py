"""Turn a routed batch into one encoded segment per buffer it touches.

Every buffer holds one kind of record (a raw buffer archived records, an errors buffer dead
letters), so a segment's kind and event-time columns come from its buffer and its routes; its
other columns are taken from the records with C-level ``itemgetter`` calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from tidemark.buffers import ERRORS_KIND, BufferKey
from tidemark.records.model import Headers, Record
from tidemark.routing import Routed
from tidemark.staging.frames import DEAD_LETTER, NO_EVENT_TIME, RAW, encode_meta, has_null_header
from tidemark.staging.segment import segment_parts, take
from tidemark.staging.store import PendingSegment
from tidemark.wireformat import Detector

_BUFFER = itemgetter(0)  # of a Routed
_EVENT_MS = itemgetter(2)  # of a Routed


class SegmentEncoder:
    """Encodes segments; keeps the encoded metadata of the headers records carry (most carry
    the same few), so a record's headers are encoded once per container, not once per record.

    ``detect`` reads schema references from each record's bytes (``tidemark.wireformat``); they
    join the ones the record came with, and are staged in the record's metadata -- only with
    ``keep_refs`` (the stream keeps them: ``StreamConfig.schema_refs``), so a buffer staged under a
    spec without them never holds any."""

    def __init__(self, cache_size: int = 4096, detect: Detector | None = None, *, keep_refs: bool = True) -> None:
        self._metas: dict[Headers, bytes] = {}
        self._cache_size = cache_size
        self._detect = detect
        self._keep_refs = keep_refs

    def encode(self, records: Sequence[Record], routes: Sequence[Routed]) -> list[PendingSegment]:
        """One segment per buffer, in the order buffers first appear; ``records[i]`` was routed
        to ``routes[i]``, and positions ascend."""
        buffers = list(map(_BUFFER, routes))
        distinct = dict.fromkeys(buffers)
        if len(distinct) == 1:
            return [self._segment(next(iter(distinct)), records, routes)]
        groups: dict[BufferKey, list[int]] = {buffer: [] for buffer in distinct}
        for index, buffer in enumerate(buffers):
            groups[buffer].append(index)
        return [
            self._segment(buffer, take(records, indices), take(routes, indices)) for buffer, indices in groups.items()
        ]

    def _segment(self, buffer: BufferKey, records: Sequence[Record], routes: Sequence[Routed]) -> PendingSegment:
        _topics, _partitions, positions, timestamps, values, keys, headers, schemas = zip(*records, strict=True)
        count = len(records)
        if not self._keep_refs:
            schemas = ((),) * count
        elif self._detect is not None:
            schemas = tuple(
                given or found for given, found in zip(schemas, map(self._detect, keys, values), strict=True)
            )
        with_refs = any(schemas)
        if buffer.kind == ERRORS_KIND:
            kinds = [DEAD_LETTER] * count
            event_times = [NO_EVENT_TIME] * count
            metas = [
                encode_meta(route.detail, pairs, refs)
                for route, pairs, refs in zip(routes, headers, schemas, strict=True)
            ]
        elif with_refs:  # a schema registry integration, or a wire format: per record
            kinds = [RAW] * count
            event_times = list(map(_EVENT_MS, routes))
            metas = [
                encode_meta("", pairs, refs) if pairs or refs else b""
                for pairs, refs in zip(headers, schemas, strict=True)
            ]
        else:
            kinds = [RAW] * count
            event_times = list(map(_EVENT_MS, routes))
            cached = self._metas.get
            metas = [(cached(pairs) or self._meta(pairs)) if pairs else b"" for pairs in headers]
        # a null header value needs a segment of version 4: checked once per distinct header set
        null_headers = any(map(has_null_header, set(headers)))
        parts = segment_parts(
            kinds,
            positions,
            timestamps,
            event_times,
            keys,
            values,
            metas,
            schema_refs=with_refs,
            null_headers=null_headers,
        )
        return PendingSegment(buffer, parts, count, positions[0], positions[-1])

    def _meta(self, headers: Headers) -> bytes:
        meta = self._metas.get(headers)
        if meta is None:
            if len(self._metas) >= self._cache_size:
                self._metas.clear()
            meta = self._metas[headers] = encode_meta("", headers)
        return meta
