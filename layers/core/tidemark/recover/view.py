"""What a partition's epoch holds: the positions of every object the ledger records for it, and
the records archived at them.

Only recorded objects count. An upload whose commit has not happened (a flush in flight, or a
recovery that died before its commit) is not the archive's: a recovery run that counted it would
plan around positions nothing recorded. An object whose records fill its range holds every
position of it and is not read; the others are read from S3 for the positions they keep.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from tidemark.formats import RenderSpec, format_of
from tidemark.formats.base import ArchivedEnvelope
from tidemark.ledger.base import Ledger
from tidemark.ledger.model import CommittedObject
from tidemark.recover.exceptions import UnsupportedStreamError
from tidemark.sources import PartitionId
from tidemark.verify import spec_of_key
from tidemark.writer.stream import StreamContext

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: objects whose records ``ArchiveView.archived_at`` keeps at hand
CACHED_OBJECTS = 4


class ArchiveView:
    """The positions recorded objects of one partition's epoch hold in ``lo..hi``, and the
    records archived at them (read on demand, the last few objects kept)."""

    def __init__(
        self,
        stream: StreamContext,
        ledger: Ledger,
        s3: S3Client,
        bucket: str,
        partition: PartitionId,
        epoch: int,
        lo: int,
        hi: int,
    ) -> None:
        self._stream = stream
        self._s3 = s3
        self._bucket = bucket
        self._partition = partition
        self._spec = RenderSpec.decode(stream.spec)
        self._errors_spec = RenderSpec.decode(stream.errors_spec)
        self._read: OrderedDict[str, dict[int, ArchivedEnvelope]] = OrderedDict()
        self.objects = [
            obj
            for mark in ledger.hour_marks(stream.name)
            for obj in ledger.committed_objects(stream.name, mark.hour)
            if obj.partition == partition and obj.epoch == epoch and obj.last >= lo and obj.first <= hi
        ]
        held: set[int] = set()
        for obj in self.objects:
            if obj.records == obj.last - obj.first + 1:  # a record at every position of its range
                held.update(range(max(obj.first, lo), min(obj.last, hi) + 1))
            else:
                held.update(offset for offset in self._envelopes(obj) if lo <= offset <= hi)
        self.positions = sorted(held)

    def archived_at(self, position: int) -> ArchivedEnvelope | None:
        """The record archived at ``position`` (``None``: no recorded object holds it)."""
        for obj in self.objects:
            if obj.first <= position <= obj.last:
                found = self._envelopes(obj).get(position)
                if found is not None:
                    return found
        return None

    def _envelopes(self, obj: CommittedObject) -> dict[int, ArchivedEnvelope]:
        cached = self._read.get(obj.key)
        if cached is not None:
            self._read.move_to_end(obj.key)
            return cached
        dead = obj.key.startswith(f"{self._stream.archive.errors_prefix}/")
        key_spec = spec_of_key(obj.key, self._errors_spec if dead else self._spec)
        body = self._s3.get_object(Bucket=self._bucket, Key=obj.key)["Body"].read()
        envelopes = list(format_of(key_spec).read(body, key_spec.context(self._partition, obj.key)))
        if any(envelope.offset is None for envelope in envelopes):
            raise UnsupportedStreamError(
                f"{obj.key}: objects in format {key_spec.format} keep no positions: which of "
                f"{obj.first}..{obj.last} are missing cannot be known"
            )
        by_offset = {envelope.offset: envelope for envelope in envelopes if envelope.offset is not None}
        self._read[obj.key] = by_offset
        if len(self._read) > CACHED_OBJECTS:
            self._read.popitem(last=False)
        return by_offset
