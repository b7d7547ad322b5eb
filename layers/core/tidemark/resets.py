"""Telling a redelivery from a log whose positions went backwards.

The event source mapping redelivers at least once: a batch comes again from the last committed
offset after a failure, and a rebalance can replay a few batches. Those records are at or below
the partition's staged offset and must be dropped. Positions also go backwards for reasons that
are *not* redeliveries -- a topic deleted and recreated, the stream re-pointed at another topic,
a migration to another cluster, a truncated log -- and dropping those records as duplicates
would lose them. The ledger keeps what it needs to tell the two apart:

* the **source** of the epoch's positions (an MSK cluster and topic, a Kinesis stream's ARN; see
  ``PartitionBatch.source``): a batch from another source is never a redelivery;
* a window of **fingerprints**: (offset, CRC-32 of timestamp, key, value and headers) of the first
  and last record of each recent accept. A redelivered record at a fingerprinted offset has the
  same fingerprint; one below the window's oldest offset is further back than any redelivery
  the mapping makes.

A Kinesis stream never hands a sequence number out twice, so there a record further back than
the window is a replay of the same log (a mapping recreated at TRIM_HORIZON), dropped by dedupe
on entry rather than refused.

Anything a redelivery cannot explain raises ``PositionResetError``: the batch is refused (the
mapping retries it, nothing is dropped or overwritten), the archiver counts ``PositionResets``
and an alarm fires, until an operator starts a new epoch (``tidemark epoch start``) and names
where it begins.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from tidemark.exceptions import PositionResetError
from tidemark.ledger.model import PartitionState
from tidemark.records.model import Record

SOURCE_CHANGED = "source_changed"
BYTES_DIFFER = "bytes_differ"
BELOW_WINDOW = "below_window"


def fingerprint(record: Record) -> int:
    """CRC-32 of what the producer wrote (never of what the archiver derived from it, so a
    changed configuration does not make a redelivery look different)."""
    crc = zlib.crc32(record.timestamp_ms.to_bytes(8, "little", signed=True))
    crc = zlib.crc32(b"\x00" if record.key is None else b"\x01" + record.key, crc)
    crc = zlib.crc32(record.value, crc)
    for name, data in record.headers:
        crc = zlib.crc32(name.encode("utf-8") + b"\x00" + data, crc)
    return crc


def check_positions(
    state: PartitionState, records: Sequence[Record], source: str, *, reuses_positions: bool = True
) -> None:
    """Raise ``PositionResetError`` unless every record at or below the staged offset is a
    plausible redelivery from ``source``. Without ``reuses_positions`` (a Kinesis stream: see
    ``tidemark.sources.SourceShape``), a record below the fingerprint window is a replay of the
    same log, not a reset: it is left to dedupe on entry."""
    if source and state.source and source != state.source:
        raise _refused(
            state,
            SOURCE_CHANGED,
            records[0].offset if records else -1,
            f"records from {source!r}, but the epoch's source is {state.source!r}",
        )
    staged = state.staged_offset
    if not state.fingerprints or not records or min(records[0].offset, records[-1].offset) > staged:
        return  # nothing to compare against (a new epoch), or nothing old in the batch
    window_start = state.fingerprints[0][0]
    known = dict(state.fingerprints)
    for record in records:
        offset = record.offset
        if offset > staged:
            continue
        if offset < window_start:
            if not reuses_positions:
                continue  # a replay from further back than any redelivery: already archived
            raise _refused(
                state,
                BELOW_WINDOW,
                offset,
                f"offset {offset} is below the redelivery window {window_start}..{staged}: the log was "
                "recreated, truncated or re-pointed, or the consumer group was rewound",
            )
        expected = known.get(offset)
        if expected is not None and expected != fingerprint(record):
            raise _refused(
                state,
                BYTES_DIFFER,
                offset,
                f"the record at offset {offset} is not the one archived there: the log was recreated or truncated",
            )


def _refused(state: PartitionState, kind: str, offset: int, why: str) -> PositionResetError:
    return PositionResetError(
        f"{state.stream}/{state.partition} (epoch {state.epoch}): {why}",
        stream=state.stream,
        partition=state.partition,
        kind=kind,
        offset=offset,
    )
