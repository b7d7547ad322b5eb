"""The partition state machine, as pure values and transitions (no I/O here).

Per (stream, partition) the ledger holds the highest offset durably staged, the OPEN buffers
(one per kind and event hour, each an ordered list of accepted segments) and the SEALED
flushes (a frozen segment set with its object key). A buffer's life::

    (none) --accept--> OPEN --accept--> OPEN --seal--> SEALED --commit--> COMMITTED (object item)
    SEALED --quarantine--> QUARANTINED (a damaged segment) --rearchive--> COMMITTED (refetched from Kafka)
                                                        --abandon--> ABANDONED (recorded lost: source gone)

Every transition returns a new state with ``version + 1``; the ledger writes it only if the
stored version is still the one it was derived from (the fence of invariant 2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from tidemark.buffers import BufferKey
from tidemark.exceptions import InvalidTransitionError
from tidemark.sources import PartitionId
from tidemark.staging.store import SegmentRef


@dataclass(frozen=True, slots=True)
class OpenBuffer:
    key: BufferKey
    seq: int
    opened_ms: int
    appended_ms: int
    segments: tuple[SegmentRef, ...]
    spec: str = ""  # the encoded RenderSpec the buffer's records were staged under

    @property
    def records(self) -> int:
        return sum(segment.records for segment in self.segments)

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self.segments)

    @property
    def first(self) -> int:
        return self.segments[0].first

    @property
    def last(self) -> int:
        return self.segments[-1].last

    @property
    def flush_id(self) -> str:
        return f"{self.key}#{self.seq}"


@dataclass(frozen=True, slots=True)
class SealedFlush:
    """A buffer whose segment set, offset range and object key are fixed (invariant 4)."""

    buffer: OpenBuffer
    object_key: str
    reason: str
    sealed_ms: int

    @property
    def flush_id(self) -> str:
        return self.buffer.flush_id


@dataclass(frozen=True, slots=True)
class QuarantinedFlush:
    """A sealed flush whose accepted segments turned out damaged: kept, never uploaded.

    Its segment files stay on the staging mount (they remain referenced) and its offsets stay
    in the ledger, so an operator can inspect them and replay the range from Kafka.
    """

    flush: SealedFlush
    error: str
    quarantined_ms: int


@dataclass(frozen=True, slots=True)
class AbandonedFlush:
    """A quarantined flush an operator recorded as lost (``tidemark abandon``): its records were
    damaged on the staging mount and the source no longer holds them (retention, a recreated
    topic), so no command can archive them. The record stays in the ledger for good: the audit
    accounts for its positions with it and reports it, every time.

    ``segments`` are ``(first, last, records)`` of each of its segments: the records of the
    flush's buffer among those positions (the others went to other buffers' objects)."""

    flush_id: str
    object_key: str  # the key it would have had
    epoch: int
    segments: tuple[tuple[int, int, int], ...]
    reason: str  # the operator's words
    checked: str  # why the source could not give the records back, as the command found it
    abandoned_ms: int

    @property
    def first(self) -> int:
        return self.segments[0][0]

    @property
    def last(self) -> int:
        return self.segments[-1][1]

    @property
    def records(self) -> int:
        return sum(records for _first, _last, records in self.segments)


@dataclass(frozen=True, slots=True)
class CommittedObject:
    """The ledger's record of an object in S3 (what the Spark job and the sweeper read).

    ``content_sha256`` digests the records themselves, not their rendering (see
    ``tidemark.objects.content``): an object re-rendered by another library version holds the same
    records under other bytes, and is recognised by it."""

    stream: str
    partition: PartitionId
    kind: str
    hour: str
    key: str
    first: int
    last: int
    records: int
    size: int
    sha256: str
    committed_ms: int
    epoch: int = 0
    content_sha256: str = ""


@dataclass(frozen=True, slots=True)
class EpochStart:
    """One start of a new position epoch for a partition: the ledger's audit trail of resets.

    Positions of one epoch come from one source log. A topic recreated, a topic changed or a
    cluster migrated gives positions that may repeat earlier ones; the new epoch keeps their
    object keys apart (``+e<n>+``) and its ``first_offset`` is where the operator said archiving
    resumes on the new log."""

    epoch: int
    first_offset: int
    previous_staged_offset: int
    previous_source: str
    source: str  # "" : adopt the source of the next batch
    reason: str
    started_ms: int


@dataclass(frozen=True, slots=True)
class RecoveryUnit:
    """Records of one partition that the event source mapping never delivered, claimed for
    archiving from the source log itself (``tidemark recover``).

    ``ranges`` are the positions of epoch ``epoch`` they lie in (no object held any of them when
    the unit was planned); ``objects`` the ``(key, records)`` of every object they render into.
    Both are fixed at the claim, so the run that finishes the unit -- the one that claimed it, or
    a rerun after a crash -- uploads exactly these objects, or refuses."""

    epoch: int
    ranges: tuple[tuple[int, int], ...]
    objects: tuple[tuple[str, int], ...]
    claimed_ms: int

    @property
    def records(self) -> int:
        return sum(records for _key, records in self.objects)


@dataclass(frozen=True, slots=True)
class Recovery:
    """A partition's recoveries (``tidemark recover``): its fence and the unit claimed, if any.

    ``generation`` grows by one at each claim and each finish. A run plans from what the ledger
    records at one generation and claims only if it is still that one: a plan never overlaps
    what another run recovered meanwhile."""

    stream: str
    partition: PartitionId
    generation: int = 0
    pending: RecoveryUnit | None = None


@dataclass(frozen=True, slots=True)
class HourMark:
    """What the ledger knows about one event hour of a stream, as monotonic counters.

    Every commit of an object for the hour adds one to ``commits`` (in the commit transaction).
    Each consumer of the hour remembers the ``commits`` value it last processed, so "dirty"
    for a consumer is ``commits > consumed``: new objects arrived since -- including late ones
    for an hour that was already complete. Clearing is conditional on ``commits`` not having
    moved, so an hour dirtied meanwhile stays dirty.
    """

    stream: str
    hour: str
    commits: int = 0
    last_commit_ms: int = 0
    manifest_commits: int = 0  # commits covered by the latest manifest (0: never complete)
    manifest_key: str = ""
    completed_ms: int = 0
    reconciled_commits: int = 0  # commits whose objects were checked against S3 in full
    aggregated_commits: int = 0  # commits whose objects the Spark job aggregated

    @property
    def dirty(self) -> bool:
        """New objects since the Spark job last aggregated the hour."""
        return self.commits > self.aggregated_commits

    @property
    def complete(self) -> bool:
        """A manifest covers every object committed for the hour so far."""
        return self.manifest_commits > 0 and self.manifest_commits == self.commits

    @property
    def reopened(self) -> bool:
        """Complete once, then late records committed more objects for it."""
        return 0 < self.manifest_commits < self.commits


ObjectKeyFn = Callable[[OpenBuffer], str]

EPOCH_REASON = "epoch"  # rotation reason of buffers sealed by an epoch start
FINGERPRINT_WINDOW = 64  # (offset, fingerprint) pairs kept: first and last record of 32 accepts


def _frozen(mapping: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class PartitionState:
    stream: str
    partition: PartitionId
    version: int = 0  # 0: nothing stored yet
    staged_offset: int = -1
    next_seq: int = 1
    updated_ms: int = 0
    watermark_ms: int = -1  # the latest event time of any record archived (raw) so far
    epoch: int = 0  # position epoch: bumped by ``start_epoch`` (a reset), part of every object key
    source: str = ""  # identity of the source log ("<cluster>/<topic>"); "" : adopt the next one seen
    # (offset, fingerprint) of the first and last record of recent accepts, ascending: how a
    # redelivery is told from a log whose positions went backwards (see ``tidemark.resets``).
    fingerprints: tuple[tuple[int, int], ...] = ()
    buffers: Mapping[str, OpenBuffer] = field(default_factory=dict)  # by str(BufferKey)
    sealed: Mapping[str, SealedFlush] = field(default_factory=dict)  # by flush id
    quarantined: Mapping[str, QuarantinedFlush] = field(default_factory=dict)  # by flush id
    # The first position accepted in epoch 0: where the archive begins (the audit tiles epoch 0 from
    # here; a later epoch from its ``EpochStart.first_offset``). -1: nothing accepted in epoch 0
    # yet; None: not known (an item written before it was kept -- it stays unknown).
    first_accepted: int | None = -1

    # -- transitions ------------------------------------------------------------------------

    def accept(
        self,
        segments: Iterable[tuple[BufferKey, SegmentRef]],
        staged_offset: int,
        now_ms: int,
        spec: str | Callable[[BufferKey], str] = "",
        event_ms: int = -1,
        source: str | None = None,
        fingerprints: Iterable[tuple[int, int]] = (),
    ) -> PartitionState:
        """Add freshly staged segments to their buffers (opening buffers as needed).

        Only buffers staged under the same render ``spec`` (one for all, or one per buffer key)
        can be appended to. ``event_ms`` is the
        latest event time among the new raw records: the partition's watermark only grows.
        ``source`` is adopted when the state has none yet; ``fingerprints`` of the new records join
        the recent window (the oldest drop out). The first accept of epoch 0 that stages a segment
        keeps its lowest position as ``first_accepted``."""
        if source and self.source and source != self.source:
            raise InvalidTransitionError(f"source {source!r} is not the epoch's source {self.source!r}")
        if staged_offset <= self.staged_offset:
            raise InvalidTransitionError(f"staged offset must grow: {staged_offset} <= {self.staged_offset}")
        buffers = dict(self.buffers)
        next_seq = self.next_seq
        lowest: int | None = None
        spec_of = spec if callable(spec) else lambda _key: spec
        for key, segment in segments:
            lowest = segment.first if lowest is None else min(lowest, segment.first)
            if segment.first <= self.staged_offset or segment.last > staged_offset:
                raise InvalidTransitionError(
                    f"segment {segment.name} ({segment.first}..{segment.last}) outside "
                    f"({self.staged_offset}, {staged_offset}]"
                )
            current = buffers.get(str(key))
            if current is None:
                buffers[str(key)] = OpenBuffer(key, next_seq, now_ms, now_ms, (segment,), spec_of(key))
                next_seq += 1
            elif current.spec != spec_of(key):
                raise InvalidTransitionError(f"buffer {key} was staged under another format; seal it first")
            else:
                buffers[str(key)] = replace(current, appended_ms=now_ms, segments=(*current.segments, segment))
        first_accepted = self.first_accepted
        if self.epoch == 0 and first_accepted == -1 and lowest is not None:  # the archive begins here
            first_accepted = lowest
        return replace(
            self,
            version=self.version + 1,
            staged_offset=staged_offset,
            next_seq=next_seq,
            updated_ms=now_ms,
            watermark_ms=max(self.watermark_ms, event_ms),
            source=self.source or source or "",
            fingerprints=(*self.fingerprints, *fingerprints)[-FINGERPRINT_WINDOW:],
            buffers=_frozen(buffers),  # type: ignore[arg-type]
            first_accepted=first_accepted,
        )

    def start_epoch(
        self, first_offset: int, source: str, reason: str, object_key: ObjectKeyFn, now_ms: int
    ) -> tuple[PartitionState, EpochStart]:
        """Begin a new position epoch at ``first_offset`` (an operator's decision, see DESIGN.md).

        Every OPEN buffer is sealed under the ending epoch's keys in the same write (reason
        ``epoch``), so no buffer ever mixes two logs. Records below ``first_offset`` are from then
        on dropped as already archived; the fingerprint window starts empty."""
        if first_offset < 0:
            raise InvalidTransitionError(f"an epoch starts at an offset >= 0, got {first_offset}")
        state = self.seal(dict.fromkeys(self.buffers, EPOCH_REASON), object_key, now_ms) if self.buffers else self
        record = EpochStart(
            epoch=self.epoch + 1,
            first_offset=first_offset,
            previous_staged_offset=self.staged_offset,
            previous_source=self.source,
            source=source,
            reason=reason,
            started_ms=now_ms,
        )
        started = replace(
            state,
            version=self.version + 1,
            epoch=record.epoch,
            staged_offset=first_offset - 1,
            source=source,
            fingerprints=(),
            updated_ms=now_ms,
        )
        return started, record

    def seal(self, reasons: Mapping[str, str], object_key: ObjectKeyFn, now_ms: int) -> PartitionState:
        """Freeze the named OPEN buffers into SEALED flushes with their object keys."""
        if not reasons:
            raise InvalidTransitionError("nothing to seal")
        buffers = dict(self.buffers)
        sealed = dict(self.sealed)
        for key, reason in reasons.items():
            buffer = buffers.pop(key, None)
            if buffer is None:
                raise InvalidTransitionError(f"buffer {key} is not open")
            sealed[buffer.flush_id] = SealedFlush(buffer, object_key(buffer), reason, now_ms)
        return replace(
            self,
            version=self.version + 1,
            updated_ms=now_ms,
            buffers=_frozen(buffers),  # type: ignore[arg-type]
            sealed=_frozen(sealed),  # type: ignore[arg-type]
        )

    def commit(self, flush_id: str, now_ms: int) -> PartitionState:
        """Forget a SEALED flush whose object is now in S3 (the object item is written with it)."""
        if flush_id not in self.sealed:
            raise InvalidTransitionError(f"flush {flush_id} is not sealed")
        sealed = dict(self.sealed)
        del sealed[flush_id]
        return replace(self, version=self.version + 1, updated_ms=now_ms, sealed=_frozen(sealed))  # type: ignore[arg-type]

    def quarantine(self, flush_id: str, error: str, now_ms: int) -> PartitionState:
        """Set a SEALED flush aside because its segments are damaged (see ``QuarantinedFlush``)."""
        if flush_id not in self.sealed:
            raise InvalidTransitionError(f"flush {flush_id} is not sealed")
        sealed = dict(self.sealed)
        quarantined = dict(self.quarantined)
        quarantined[flush_id] = QuarantinedFlush(sealed.pop(flush_id), error, now_ms)
        return replace(
            self,
            version=self.version + 1,
            updated_ms=now_ms,
            sealed=_frozen(sealed),  # type: ignore[arg-type]
            quarantined=_frozen(quarantined),  # type: ignore[arg-type]
        )

    def rearchived(self, flush_id: str, now_ms: int) -> PartitionState:
        """Forget a QUARANTINED flush whose records were fetched again from the source and are now
        in S3 (``tidemark rearchive``; the object item is written with it), or that an operator
        recorded as lost (``tidemark abandon``; its ``AbandonedFlush`` is written with it). Its
        segment files, no longer referenced, are garbage from then on."""
        if flush_id not in self.quarantined:
            raise InvalidTransitionError(f"flush {flush_id} is not quarantined")
        quarantined = dict(self.quarantined)
        del quarantined[flush_id]
        return replace(self, version=self.version + 1, updated_ms=now_ms, quarantined=_frozen(quarantined))  # type: ignore[arg-type]

    # -- queries ------------------------------------------------------------------------------

    def holds_hour(self, hour: str) -> bool:
        """Whether records of event hour ``hour`` are not (yet) in committed objects: OPEN, SEALED
        or QUARANTINED (damaged, waiting for an operator), of either kind."""
        return (
            any(buffer.key.hour == hour for buffer in self.buffers.values())
            or any(flush.buffer.key.hour == hour for flush in self.sealed.values())
            or any(held.flush.buffer.key.hour == hour for held in self.quarantined.values())
        )

    @property
    def idle(self) -> bool:
        """Nothing staged: every accepted record is in a committed object."""
        return not self.buffers and not self.sealed

    def staged_segments(self) -> list[SegmentRef]:
        """Every segment accepted and not committed: in OPEN buffers, SEALED and quarantined flushes."""
        segments = [segment for buffer in self.buffers.values() for segment in buffer.segments]
        segments += (segment for flush in self.sealed.values() for segment in flush.buffer.segments)
        segments += (segment for held in self.quarantined.values() for segment in held.flush.buffer.segments)
        return segments

    def referenced_segments(self) -> set[str]:
        """Every segment the ledger has accepted and not yet committed: never garbage."""
        return {segment.name for segment in self.staged_segments()}

    def committed_through(self) -> int:
        """The last position up to which every accepted record is in a committed object: below the
        first one still staged (an open, sealed or quarantined buffer), else the staged offset."""
        staged = self.staged_segments()
        return min(segment.first for segment in staged) - 1 if staged else self.staged_offset
