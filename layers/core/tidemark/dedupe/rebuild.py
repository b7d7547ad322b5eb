"""The ids a queue's archive holds, read back from its objects: what a rebuilt dedupe index needs.

A damaged index (``DedupeIndexDamagedError``) is rebuilt by the sweeper from three places:
the ledger's staged segments (accepted, not flushed), the segments flushed while it was damaged
(kept aside: ``SegmentStore.keep``) and, for everything flushed before, the partition's objects
committed within the dedupe window -- found through the ledger, which lists a stream's objects
by event hour: every hour from a day before the window to a day after now, so a message's event
time may be that far from its acceptance (a timezone, a late message) and still be found.

What a rebuild cannot restore, and says so (``ArchivedIds``): ids of objects whose format keeps no
envelope (``text``: no key or headers), and of messages whose event hour lies further out.
A redelivery of such an id within the window is archived again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tidemark.buffers import ERRORS_KIND
from tidemark.config.model import DedupeConfig
from tidemark.dedupe.ids import CONTENT_SHA256, digest, message_id
from tidemark.formats import RenderSpec, format_of
from tidemark.ledger.base import Ledger
from tidemark.objects.writer import ObjectStore
from tidemark.records.model import Record
from tidemark.sources import PartitionId
from tidemark.verify import spec_of_key
from tidemark.writer.stream import StreamContext

HOUR_MS = 3_600_000
#: how far from the window an object's event hour may be and still be read
MARGIN_MS = 24 * HOUR_MS


@dataclass
class ArchivedIds:
    """(digest, position, committed_ms) of the records found, and what could not be read."""

    entries: list[tuple[bytes, int, int]] = field(default_factory=list)
    objects: int = 0
    without_ids: int = 0  # records whose object keeps no id under the stream's rule


def hours_between(first_ms: int, last_ms: int) -> Iterator[str]:
    """Hour labels (``YYYY-MM-DDTHH``, as object keys and the ledger name them) covering the range."""
    hour = first_ms - first_ms % HOUR_MS
    while hour <= last_ms:
        yield datetime.fromtimestamp(hour / 1000, UTC).strftime("%Y-%m-%dT%H")
        hour += HOUR_MS


def archived_ids(
    ledger: Ledger,
    objects: ObjectStore,
    stream: StreamContext,
    partition: PartitionId,
    rule: DedupeConfig,
    *,
    since_ms: int,
    now_ms: int,
) -> ArchivedIds:
    """The ids of the partition's records in objects committed at or after ``since_ms``."""
    found = ArchivedIds()
    specs = {False: RenderSpec.decode(stream.spec), True: RenderSpec.decode(stream.errors_spec)}
    needs_key = rule.id != CONTENT_SHA256
    for hour in hours_between(since_ms - MARGIN_MS, now_ms + MARGIN_MS):
        for obj in ledger.committed_objects(stream.name, hour):
            if obj.partition != partition or obj.committed_ms < since_ms:
                continue
            found.objects += 1
            spec = spec_of_key(obj.key, specs[obj.kind == ERRORS_KIND])
            body = objects.client.get_object(Bucket=objects.bucket, Key=obj.key)["Body"].read()
            for envelope in format_of(spec).read(body, spec.context(partition, obj.key)):
                if envelope.offset is None or (needs_key and envelope.key is None and envelope.headers is None):
                    found.without_ids += 1  # no positions, or no envelope: whether it had an id is lost
                    continue
                record = Record(
                    stream.config.source.topic,
                    partition,
                    envelope.offset,
                    envelope.timestamp_ms if envelope.timestamp_ms is not None else -1,
                    envelope.value if envelope.value is not None else b"",
                    envelope.key,
                    envelope.headers or (),
                )
                if message_id(record, rule.id) is None and envelope.value is None:
                    found.without_ids += 1  # no id, and its body is not kept as bytes
                    continue
                found.entries.append((digest(record, rule.id), envelope.offset, obj.committed_ms))
    return found
