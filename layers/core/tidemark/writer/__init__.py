"""The per-(stream, partition) writer: the exactly-once protocol in one place."""

from __future__ import annotations

from tidemark.writer.outcome import BatchOutcome, FlushOutcome
from tidemark.writer.partition import PartitionWriter
from tidemark.writer.stream import StreamContext

__all__ = ["BatchOutcome", "FlushOutcome", "PartitionWriter", "StreamContext"]
