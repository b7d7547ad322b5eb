"""Which archived objects a replay reads, and whether they can be replayed at all.

The ledger is the archive's source of truth: only committed objects are read (an object in S3
without its commit is not part of the archive yet), hour by hour from the ledger's hour marks,
both kinds -- raw records and, unless left out, dead letters (they were records of the source
topic too, kept with every original byte).

Only formats that keep the whole record can be replayed: JSON Lines, Avro, Parquet (without
typed value columns) and bytes keep key, value, headers, timestamp and offset. Text keeps the
value only, CSV flattened value fields, and a ``value_schema`` typed fields instead of the
value's bytes: such objects are refused here, before anything is produced, rather than half
replayed.

Hours still being archived are refused (``still_staged``): a replay covers what is in S3.

A replay may be planned beside a live archiver and sweeper. Each partition's state is read
*before* any object: every record it had accepted by then in the chosen hours is committed (else
the hours are refused), so its object is among those read after. What is accepted later sits at
higher positions and may or may not have committed by the time its hour's objects are read: the
plan stops each partition at the position its state had reached (``reach``), and a rerun replays
the rest -- never a plan with a hole below a position it produces, which a rerun (resuming past
what the target holds) could not fill.

The replay id names one replay: the stream, hours, source partitions, partitioner, target
topic and whether dead letters are in. A rerun of the same command has the same id and resumes
from what the target already holds of it; another replay into the same topic has another id and
is never mistaken for it.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from tidemark.buffers import ERRORS_KIND
from tidemark.config.model import StreamConfig, TidemarkConfig
from tidemark.formats import RenderSpec
from tidemark.ledger.base import Ledger
from tidemark.ledger.model import CommittedObject, PartitionState
from tidemark.replay.exceptions import HoursNotArchivedError, ReplayError, UnreplayableFormatError
from tidemark.sources import PartitionId, partition_sort_key
from tidemark.verify import spec_of_key
from tidemark.writer.stream import render_spec

#: plans read again when partitions the ledger's registry did not list turn up among the objects
PLAN_ATTEMPTS = 3

#: formats whose objects do not keep the record itself (``ArchivedEnvelope``: no key/headers/offsets, or fields)
UNREPLAYABLE = {
    "text": "keeps only the value (no key, headers or offsets)",
    "csv": "keeps flattened value fields, not the record",
}


@dataclass(frozen=True, slots=True)
class PlannedObject:
    """One committed object to read, with the spec its bytes are read with."""

    key: str
    partition: PartitionId
    epoch: int
    first: int
    last: int
    records: int
    dead: bool  # a dead-letter object (``errors`` prefix)
    spec: RenderSpec

    @property
    def start(self) -> tuple[int, int]:
        """The position of its first record: ``(epoch, first offset)``."""
        return self.epoch, self.first

    @property
    def end(self) -> tuple[int, int]:
        """The position of its last record."""
        return self.epoch, self.last


@dataclass(frozen=True)
class ReplayPlan:
    stream: str
    first_hour: str
    last_hour: str
    #: source partition -> its objects, by their first position
    objects: Mapping[PartitionId, tuple[PlannedObject, ...]]
    #: objects committed after the plan read its partition's state: beyond ``reach``, a rerun's
    later_objects: int = 0

    @property
    def partitions(self) -> list[PartitionId]:
        return sorted(self.objects, key=partition_sort_key)

    @property
    def records(self) -> int:
        return sum(obj.records for objects in self.objects.values() for obj in objects)

    @property
    def object_count(self) -> int:
        return sum(len(objects) for objects in self.objects.values())


def replay_id(
    stream: str,
    first_hour: str,
    last_hour: str,
    partitions: Iterable[PartitionId] | None,
    partitioner: str,
    topic: str,
    dead_letters: bool,
) -> str:
    """A short id of one replay (16 hex digits of a SHA-256 over what makes it the replay it is):
    the same for a rerun of the same command, another for any other replay."""
    chosen = "all" if partitions is None else [str(p) for p in sorted(set(partitions), key=partition_sort_key)]
    identity = [stream, first_hour, last_hour, chosen, partitioner, topic, dead_letters]
    return hashlib.sha256(json.dumps(identity, separators=(",", ":")).encode()).hexdigest()[:16]


def raw_and_errors_specs(stream: StreamConfig) -> tuple[RenderSpec, RenderSpec]:
    """The specs raw and dead-letter objects are read with (as ``tidemark.verify.read_archive``)."""
    spec = RenderSpec.decode(render_spec(stream))
    return spec, replace(spec, format="jsonl", compression="gzip", value_schema="", columns="")


def plan_replay(
    config: TidemarkConfig,
    stream: str,
    ledger: Ledger,
    first_hour: str,
    last_hour: str,
    *,
    partitions: Iterable[PartitionId] | None = None,
    dead_letters: bool = True,
) -> ReplayPlan:
    """Every committed object of ``stream`` for the event hours ``first_hour..last_hour``
    (both included) of the chosen source partitions (``None``: all); refuses objects that cannot
    be replayed (``UnreplayableFormatError``, naming the format and an object)."""
    if first_hour > last_hour:
        raise ReplayError(f"--from {first_hour} is after --to {last_hour}")
    try:
        stream_config = config.stream(stream)
    except KeyError:
        raise ReplayError(f"--stream {stream!r}: not in the configuration") from None
    raw_spec, errors_spec = raw_and_errors_specs(stream_config)
    chosen = None if partitions is None else set(partitions)
    known: set[PartitionId] = set(chosen) if chosen is not None else ledger.partitions(stream)
    for _attempt in range(PLAN_ATTEMPTS):
        # Before any object: each partition's state (see the module's docstring).
        states = {partition: ledger.load(stream, partition) for partition in known}
        staged = still_staged(states, first_hour, last_hour, dead_letters=dead_letters)
        if staged:
            raise HoursNotArchivedError(
                f"hours {first_hour}..{last_hour} still have records staged, not in S3 yet ({'; '.join(staged[:5])}"
                f"{'; ...' if len(staged) > 5 else ''}): replay them once they are (`tidemark status` shows what "
                "waits; a quarantined flush needs `tidemark rearchive`), or choose earlier hours"
            )
        found: dict[PartitionId, dict[str, PlannedObject]] = defaultdict(dict)
        for mark in ledger.hour_marks(stream, first_hour):
            if not first_hour <= mark.hour <= last_hour:
                continue
            for committed in ledger.committed_objects(stream, mark.hour):
                if chosen is not None and committed.partition not in chosen:
                    continue
                dead = committed.kind == ERRORS_KIND
                if dead and not dead_letters:
                    continue
                found[committed.partition][committed.key] = _planned(committed, errors_spec if dead else raw_spec)
        if set(found) <= known:
            break
        known |= set(found)  # partitions the registry did not list yet: their states first, then again
    else:
        raise ReplayError(f"{stream}: new partitions kept appearing while the replay was planned; run it again")
    objects: dict[PartitionId, tuple[PlannedObject, ...]] = {}
    later = 0
    for partition, by_key in found.items():
        reach = (states[partition].epoch, states[partition].staged_offset)
        ordered = sorted(by_key.values(), key=lambda obj: (obj.start, obj.end, obj.key))
        for obj in ordered:
            if obj.start <= reach < obj.end:  # cannot be: its records were accepted on both sides of the read
                raise ReplayError(f"{obj.key}: committed across the plan's read of partition {partition}; run again")
        kept = tuple(obj for obj in ordered if obj.end <= reach)
        later += len(ordered) - len(kept)
        if kept:
            objects[partition] = kept
    return ReplayPlan(stream, first_hour, last_hour, objects, later)


def still_staged(
    states: Mapping[PartitionId, PartitionState],
    first_hour: str,
    last_hour: str,
    *,
    dead_letters: bool = True,
) -> list[str]:
    """The buffers of ``first_hour..last_hour`` not in S3 yet: open, sealed or quarantined.

    A replay refuses such hours. Their records sit at offsets below what is committed around
    them, so a replay that resumed after they were committed would take them as already
    produced (its resume points are positions), and lose them; records that arrive later come at
    higher offsets and are replayed by a rerun."""
    found = []
    for partition in sorted(states, key=partition_sort_key):
        state = states[partition]
        waiting = [("open", buffer) for buffer in state.buffers.values()]
        waiting += [("sealed", flush.buffer) for flush in state.sealed.values()]
        waiting += [("quarantined", held.flush.buffer) for held in state.quarantined.values()]
        for what, buffer in waiting:
            if first_hour <= buffer.key.hour <= last_hour and (dead_letters or buffer.key.kind != ERRORS_KIND):
                found.append(f"partition {partition}: {what} {buffer.key}, offsets {buffer.first}..{buffer.last}")
    return found


def _planned(committed: CommittedObject, base: RenderSpec) -> PlannedObject:
    spec = spec_of_key(committed.key, base)
    dead = committed.kind == ERRORS_KIND
    why = UNREPLAYABLE.get(spec.format)
    if why is None and spec.value_schema and not dead:
        why = "keeps typed value columns (format.value_schema), not the value's bytes"
    if why is not None:
        kind = f"{spec.format} with a value schema" if spec.format in ("parquet", "avro") else spec.format
        raise UnreplayableFormatError(f"format {kind} {why}: it cannot be replayed ({committed.key})")
    return PlannedObject(
        committed.key,
        committed.partition,
        committed.epoch,
        committed.first,
        committed.last,
        committed.records,
        dead,
        spec,
    )
