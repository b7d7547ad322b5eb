"""A digest of an object's records, independent of how a format renders them.

An object's SHA-256 changes when a library writes its own version into the file or a format
changes its layout; its records do not. The content digest covers what the archive promises
to keep -- kind, offset, timestamps, key, value, headers, dead-letter reason and (only when a
record has any, so digests of records without them are what they always were) schema references
of every record, in offset order -- so an object already in S3 under a flush's key can be recognised as holding
the same records even when its bytes differ (an upgrade re-rendering a resumed flush).

A null value (a tombstone) is hashed as length -1 and no bytes, a null header value as length
``0xFFFFFFFF`` and no bytes, as a null key always was (-1): the digest of a record without
nulls is what it always was, and a null is never the empty value.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from itertools import chain, islice, repeat

from tidemark.records.model import Headers
from tidemark.staging.frames import NULL_LEN, Frame, encode_meta

_FIXED = struct.Struct("<Bqqqiiii")
_HEADER_LENGTHS = struct.Struct("<II")
_I64_MAX = 2**63 - 1
_WIDE = -1  # in the offset field: a position wider than 64 bits follows, length-prefixed
#: frames hashed at a time (``wrap``), unless their values are larger than CHUNK_BYTES together
CHUNK_FRAMES = 512
CHUNK_BYTES = 8 * 1024 * 1024
_CACHED_HEADERS = 1_024


class _HeaderBytes(dict[Headers, bytes]):
    """A record's headers -> what the digest covers of them, cached (records mostly carry the
    same few sets of headers)."""

    def __missing__(self, headers: Headers) -> bytes:
        if len(self) >= _CACHED_HEADERS:
            self.clear()
        covered = self[headers] = _header_bytes(headers)
        return covered


def _header_bytes(headers: Headers) -> bytes:
    parts: list[bytes] = []
    for name, data in headers:
        encoded = name.encode("utf-8")
        if data is None:
            parts += (_HEADER_LENGTHS.pack(len(encoded), NULL_LEN), encoded)
        else:
            parts += (_HEADER_LENGTHS.pack(len(encoded), len(data)), encoded, data)
    return b"".join(parts)


_HEADER_BYTES = _HeaderBytes()


class ContentDigest:
    """Feed it the frames as they are rendered (``wrap``); read ``hexdigest`` afterwards.

    What is hashed is fixed (objects in S3 carry the digest, and adoption compares it): per
    frame, in order, :meth:`update`'s bytes. ``wrap`` hashes the same bytes a chunk of frames at
    a time -- one ``struct`` call per frame and one hash update per chunk -- before yielding the
    chunk's frames; a chunk with anything unusual (a dead letter's reason, a wide position, large
    values) goes frame by frame."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.records = 0

    def wrap(self, frames: Iterable[Frame]) -> Iterator[Frame]:
        frames = iter(frames)
        while chunk := list(islice(frames, CHUNK_FRAMES)):
            self._update_chunk(chunk)
            yield from chunk

    def _update_chunk(self, chunk: list[Frame]) -> None:
        kinds, offsets, stamps, events, keys, values, headers, reasons, _schemas = zip(*chunk, strict=True)
        if None in values:  # a tombstone: frame by frame
            for frame in chunk:
                self.update(frame)
            return
        value_lengths = list(map(len, values))
        if any(reasons) or any(_schemas) or max(offsets) > _I64_MAX or sum(value_lengths) > CHUNK_BYTES:
            for frame in chunk:
                self.update(frame)
            return
        try:
            key_lengths = list(map(len, keys))
        except TypeError:  # a null key: -1, and nothing hashed (as for an empty one)
            key_lengths = [-1 if key is None else len(key) for key in keys]
            keys = tuple(key or b"" for key in keys)
        fixed = map(
            _FIXED.pack, kinds, offsets, stamps, events, key_lengths, value_lengths, repeat(0), map(len, headers)
        )
        covered = map(_HEADER_BYTES.__getitem__, headers)
        self._hash.update(b"".join(chain.from_iterable(zip(fixed, keys, values, covered, strict=True))))
        self.records += len(chunk)

    def update(self, frame: Frame) -> None:
        key = frame.key
        reason = frame.reason.encode("utf-8")
        update = self._hash.update
        offset = frame.offset
        wide = offset > _I64_MAX  # a Kinesis sequence number; a Kafka offset never is
        update(
            _FIXED.pack(
                frame.kind,
                _WIDE if wide else offset,
                frame.timestamp_ms,
                frame.event_time_ms,
                -1 if key is None else len(key),
                -1 if frame.value is None else len(frame.value),
                len(reason),
                len(frame.headers),
            )
        )
        if wide:
            position = offset.to_bytes((offset.bit_length() + 7) // 8, "big")
            update(struct.pack("<I", len(position)))
            update(position)
        if key:
            update(key)
        if frame.value:
            update(frame.value)
        update(reason)
        update(_header_bytes(frame.headers))
        if frame.schemas:
            update(b"schemas" + encode_meta("", (), frame.schemas))
        self.records += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
