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
  same fingerprint;
* **marks** for the rest of the epoch (kept in the ledger next to the state, ``Ledger.marks``):
  the fingerprint of each accept's first and last record and of its first record in every run of
  ``MARK_GRID`` offsets (``marks_of``). A redelivery from further back than the window -- the
  mapping starting again at ``TRIM_HORIZON`` after the group's committed offsets expired, or a
  group rewound on purpose -- holds such records, and they must match. Marking the first record
  *present* in each run, rather than the offsets that are multiples of ``MARK_GRID``, keeps a
  transactional topic (whose commit markers take offsets) or a compacted one marked too.

A batch is one fetch from one log, so a record of it that matches what was archived at its
offset vouches for the batch; one that differs refuses it. A record below the window is
dropped only when the batch holds such a match (in the window or among the marks): a batch
there with nothing to compare against is refused (``below_window``), never guessed.

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
from collections.abc import Callable, Mapping, Sequence

from tidemark.exceptions import PositionResetError
from tidemark.ledger.model import PartitionState
from tidemark.records.model import Record

SOURCE_CHANGED = "source_changed"
BYTES_DIFFER = "bytes_differ"
BELOW_WINDOW = "below_window"

#: an accept marks its first record in every run of this many offsets (``offset // MARK_GRID``):
#: a redelivered batch holding a whole run holds that run's first record, which is marked
MARK_GRID = 16

#: what a null value and a null header value add to a fingerprint in place of the bytes: a
#: tombstone's fingerprint then differs from an empty value's, and a null header's (``"\x01"``
#: after its name) from an empty one's (``"\x00"`` after its name)
_NULL_VALUE = b"\xfftidemark.null"
_NULL_HEADER = b"\x01"

#: the marks kept at some of the given offsets: offset -> every fingerprint recorded there
MarkLookup = Callable[[Sequence[int]], Mapping[int, frozenset[int]]]


def fingerprint(record: Record) -> int:
    """CRC-32 of what the producer wrote (never of what the archiver derived from it, so a
    changed configuration does not make a redelivery look different). A null value (a
    tombstone) or a null header value adds a marker no non-null one adds in its place, so the
    fingerprint of a record without nulls is what it always was (marks in ledgers stay valid)."""
    crc = zlib.crc32(record.timestamp_ms.to_bytes(8, "little", signed=True))
    crc = zlib.crc32(b"\x00" if record.key is None else b"\x01" + record.key, crc)
    crc = zlib.crc32(_NULL_VALUE if record.value is None else record.value, crc)
    for name, data in record.headers:
        crc = zlib.crc32(name.encode("utf-8") + (_NULL_HEADER if data is None else b"\x00" + data), crc)
    return crc


def marks_of(records: Sequence[Record]) -> list[tuple[int, int]]:
    """(offset, fingerprint) of the marked records of one accept (in offset order): its first and
    last record, and its first record in each run of ``MARK_GRID`` offsets it touches."""
    marked: list[tuple[int, int]] = []
    run = None
    for index, record in enumerate(records):
        here = record.offset // MARK_GRID
        if here != run or index == len(records) - 1:
            marked.append((record.offset, fingerprint(record)))
        run = here
    return marked


def check_positions(
    state: PartitionState,
    records: Sequence[Record],
    source: str,
    *,
    reuses_positions: bool = True,
    marks: MarkLookup | None = None,
) -> None:
    """Raise ``PositionResetError`` unless every record at or below the staged offset is a
    plausible redelivery from ``source``. Without ``reuses_positions`` (a Kinesis stream: see
    ``tidemark.sources.SourceShape``), a record below the fingerprint window is a replay of the
    same log, not a reset: it is left to dedupe on entry. With it (Kafka), records below the
    window are a redelivery only if the batch matches what was archived somewhere: a fingerprint
    of the window, or one of the epoch's ``marks`` (looked up only then)."""
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
    below: list[Record] = []
    matched = False
    for record in records:
        offset = record.offset
        if offset > staged:
            continue
        if offset < window_start:
            if reuses_positions:
                below.append(record)
            continue  # (without reuses_positions: a replay from further back, already archived)
        expected = known.get(offset)
        if expected is None:
            continue
        if expected != fingerprint(record):
            raise _refused(
                state,
                BYTES_DIFFER,
                offset,
                f"the record at offset {offset} is not the one archived there: the log was recreated or truncated",
            )
        matched = True
    if not below:
        return
    found = marks([record.offset for record in below]) if marks is not None else {}
    for record in below:
        recorded = found.get(record.offset)
        if not recorded:
            continue
        if fingerprint(record) not in recorded:
            raise _refused(
                state,
                BYTES_DIFFER,
                record.offset,
                f"the record at offset {record.offset} is not the one archived there (below the redelivery "
                "window, by the epoch's marks): the log was recreated or truncated",
            )
        matched = True
    if not matched:
        offset = below[0].offset
        raise _refused(
            state,
            BELOW_WINDOW,
            offset,
            f"offset {offset} is below the redelivery window {window_start}..{staged} and nothing in the batch "
            "matches a record archived before: the log was recreated, truncated or re-pointed (or the batch "
            "holds no marked record to compare)",
        )


def _refused(state: PartitionState, kind: str, offset: int, why: str) -> PositionResetError:
    return PositionResetError(
        f"{state.stream}/{state.partition} (epoch {state.epoch}): {why}",
        stream=state.stream,
        partition=state.partition,
        kind=kind,
        offset=offset,
    )
