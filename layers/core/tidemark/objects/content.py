"""A digest of an object's records, independent of how a format renders them.

An object's SHA-256 changes when a library writes its own version into the file or a format
changes its layout; its records do not. The content digest covers what the archive promises
to keep -- kind, offset, timestamps, key, value, headers and dead-letter reason of every record,
in offset order -- so an object already in S3 under a flush's key can be recognised as holding
the same records even when its bytes differ (an upgrade re-rendering a resumed flush).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator

from tidemark.staging.frames import Frame

_FIXED = struct.Struct("<Bqqqiiii")
_I64_MAX = 2**63 - 1
_WIDE = -1  # in the offset field: a position wider than 64 bits follows, length-prefixed


class ContentDigest:
    """Feed it the frames as they are rendered (``wrap``); read ``hexdigest`` afterwards."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.records = 0

    def wrap(self, frames: Iterable[Frame]) -> Iterator[Frame]:
        for frame in frames:
            self.update(frame)
            yield frame

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
                len(frame.value),
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
        update(frame.value)
        update(reason)
        for name, data in frame.headers:
            encoded = name.encode("utf-8")
            update(struct.pack("<II", len(encoded), len(data)))
            update(encoded)
            update(data)
        self.records += 1

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
