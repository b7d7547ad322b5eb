"""What a partition's epoch holds: the positions of every object the ledger records for it.

Only recorded objects count. An upload whose commit has not happened (a flush in flight, or a
recovery that died before its commit) is not the archive's: a recovery run that counted it would
plan around positions nothing recorded. An object whose records fill its range holds every
position of it and is not read; the others are read from S3 for the positions they keep.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.formats import RenderSpec, format_of
from tidemark.ledger.base import Ledger
from tidemark.recover.exceptions import UnsupportedStreamError
from tidemark.sources import PartitionId
from tidemark.verify import spec_of_key
from tidemark.writer.stream import StreamContext

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def held_positions(
    stream: StreamContext,
    ledger: Ledger,
    s3: S3Client,
    bucket: str,
    partition: PartitionId,
    epoch: int,
    lo: int,
    hi: int,
) -> list[int]:
    """Sorted, distinct positions in ``lo..hi`` that a recorded object of ``partition``'s
    ``epoch`` holds."""
    spec = RenderSpec.decode(stream.spec)
    errors_spec = RenderSpec.decode(stream.errors_spec)
    held: set[int] = set()
    for mark in ledger.hour_marks(stream.name):
        for obj in ledger.committed_objects(stream.name, mark.hour):
            if obj.partition != partition or obj.epoch != epoch or obj.last < lo or obj.first > hi:
                continue
            if obj.records == obj.last - obj.first + 1:
                held.update(range(max(obj.first, lo), min(obj.last, hi) + 1))
                continue
            dead = obj.key.startswith(f"{stream.archive.errors_prefix}/")
            key_spec = spec_of_key(obj.key, errors_spec if dead else spec)
            body = s3.get_object(Bucket=bucket, Key=obj.key)["Body"].read()
            envelopes = format_of(key_spec).read(body, key_spec.context(partition, obj.key))
            offsets = [envelope.offset for envelope in envelopes]
            if any(offset is None for offset in offsets):
                raise UnsupportedStreamError(
                    f"{obj.key}: objects in format {key_spec.format} keep no positions: which of "
                    f"{obj.first}..{obj.last} are missing cannot be known"
                )
            held.update(offset for offset in offsets if offset is not None and lo <= offset <= hi)
    return sorted(held)
