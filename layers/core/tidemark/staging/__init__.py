"""EFS staging: immutable, framed, fsync'd segment files, one per (batch, buffer)."""

from __future__ import annotations

from tidemark.staging.frames import DEAD_LETTER, RAW, Frame, decode_frames, encode_frame
from tidemark.staging.store import SegmentFile, SegmentRef, SegmentStore

__all__ = [
    "DEAD_LETTER",
    "RAW",
    "Frame",
    "SegmentFile",
    "SegmentRef",
    "SegmentStore",
    "decode_frames",
    "encode_frame",
]
