"""EFS staging: immutable, fsync'd segment files, one per (batch, buffer)."""

from __future__ import annotations

from tidemark.staging.frames import DEAD_LETTER, RAW, Frame, decode_frames
from tidemark.staging.segment import decode_segment, encode_segment, segment_of_frames
from tidemark.staging.store import PendingSegment, SegmentFile, SegmentRef, SegmentStore

__all__ = [
    "DEAD_LETTER",
    "RAW",
    "Frame",
    "PendingSegment",
    "SegmentFile",
    "SegmentRef",
    "SegmentStore",
    "decode_frames",
    "decode_segment",
    "encode_segment",
    "segment_of_frames",
]
