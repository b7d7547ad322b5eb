"""Segment files on the staging mount (EFS in AWS, a directory on a laptop).

Layout: ``<root>/<stream>/p<partition>/<kind>_<hour>_<first>-<last>_<created ms>_<nonce>.seg``,
where ``<partition>`` is a Kafka partition number or a Kinesis shard id, and positions are 20
zero-padded digits -- or, for positions wider than that (Kinesis sequence numbers, up to 129
digits, which written out twice would pass the 255-byte limit of a file name), 83 zero-padded
base-36 digits.
A segment is written once (``O_EXCL``), fsync'd together with its directory, and never changed.
The segments one batch writes are fsync'd concurrently with their directory, once per batch
(``fsync`` releases the GIL; on EFS each is a round trip). A segment becomes part of a buffer only when the
ledger accepts it; until then it is garbage that recovery removes once it is older than the
grace period (a younger one may belong to an invocation that is still running).
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from collections.abc import Iterator, Sequence, Set
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tidemark.buffers import BufferKey
from tidemark.exceptions import CorruptSegmentError, MissingSegmentError, UnsafePathError
from tidemark.faults import AFTER_SEGMENT_WRITE, BEFORE_SEGMENT_WRITE, DURING_SEGMENT_WRITE, CrashPoints, NoCrashes
from tidemark.names import STREAM, matches
from tidemark.sources import PartitionId, is_partition_id, partition_of_text, partition_sort_key
from tidemark.staging.frames import Frame, TornFrameError
from tidemark.staging.segment import decode_segment

_SEGMENT = re.compile(
    r"^(?P<kind>raw|errors)_(?P<hour>\d{4}-\d{2}-\d{2}T\d{2})_"
    r"(?:(?P<first>\d{20})-(?P<last>\d{20})|(?P<wfirst>[0-9a-z]{83})-(?P<wlast>[0-9a-z]{83}))"
    r"_(?P<created>\d{13,})_(?P<nonce>[0-9a-f]{12})\.seg$"
)
_NARROW = 10**20  # positions below this are written as 20 decimal digits
_WIDE_DIGITS = 83  # base-36 digits of the largest 129-digit decimal
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(number: int) -> str:
    digits = []
    while number:
        number, digit = divmod(number, 36)
        digits.append(_BASE36[digit])
    return "".join(reversed(digits)).rjust(_WIDE_DIGITS, "0")


def _positions_text(first: int, last: int) -> str:
    if last < _NARROW:
        return f"{first:020d}-{last:020d}"
    if last >= 36**_WIDE_DIGITS:
        raise UnsafePathError(f"position {last} is wider than any source's")
    return f"{_base36(first)}-{_base36(last)}"


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """What the ledger records about an accepted segment."""

    name: str
    records: int
    size: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class PendingSegment:
    """An encoded segment about to be written for ``buffer``: its bytes, or the parts they are
    made of in order (written with one ``writev``, never joined)."""

    buffer: BufferKey
    data: bytes | Sequence[bytes]
    records: int
    first: int
    last: int

    @property
    def parts(self) -> Sequence[bytes]:
        return (self.data,) if isinstance(self.data, bytes) else self.data

    @property
    def encoded(self) -> bytes:
        """The segment's bytes, joined (tools and tests; the store writes the parts)."""
        return self.data if isinstance(self.data, bytes) else b"".join(self.data)


@dataclass(frozen=True, slots=True)
class StagedWrite:
    """Segments written, their fsyncs in flight (``SegmentStore.writing``)."""

    refs: list[SegmentRef]


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """A segment found on disk (accepted or not)."""

    name: str
    buffer: BufferKey
    first: int
    last: int
    created_ms: int


def segment_name(buffer: BufferKey, first: int, last: int, created_ms: int, nonce: str) -> str:
    return f"{buffer.kind}_{buffer.hour}_{_positions_text(first, last)}_{created_ms:013d}_{nonce}.seg"


def parse_segment_name(name: str) -> SegmentFile | None:
    match = _SEGMENT.fullmatch(name)
    if not match:
        return None
    narrow = match["first"] is not None
    return SegmentFile(
        name=name,
        buffer=BufferKey(match["kind"], match["hour"]),
        first=int(match["first"]) if narrow else int(match["wfirst"], 36),
        last=int(match["last"]) if narrow else int(match["wlast"], 36),
        created_ms=int(match["created"]),
    )


class SegmentStore:
    def __init__(self, root: str | os.PathLike[str], crash_points: CrashPoints | None = None) -> None:
        self.root = Path(root).resolve()
        self._crash = crash_points or NoCrashes()

    def partition_dir(self, stream: str, partition: PartitionId) -> Path:
        if not matches(STREAM, stream) or not is_partition_id(partition):
            raise UnsafePathError(f"refusing staging path for stream={stream!r} partition={partition!r}")
        path = self.root / stream / f"p{partition}"
        if path.resolve().parent.parent != self.root:
            raise UnsafePathError(f"{path} escapes the staging root {self.root}")
        return path

    def dedupe_path(self, stream: str, partition: PartitionId) -> Path:
        """The partition's dedupe index (a source without offsets: ``tidemark.dedupe``), beside the
        partition directories and never in one: those are removed when empty, the index must stay."""
        directory = self.partition_dir(stream, partition)  # validates both
        return directory.parent / "dedupe" / f"{directory.name}.sqlite"

    def write(
        self,
        stream: str,
        partition: PartitionId,
        buffer: BufferKey,
        frames: list[bytes],
        first: int,
        last: int,
        created_ms: int,
    ) -> SegmentRef:
        """Write one segment of already encoded bytes (``frames`` joined; one record each)."""
        pending = PendingSegment(buffer, b"".join(frames), len(frames), first, last)
        return self.write_batch(stream, partition, [pending], created_ms)[0]

    def write_batch(
        self, stream: str, partition: PartitionId, segments: Sequence[PendingSegment], created_ms: int
    ) -> list[SegmentRef]:
        """Write, fsync and name one immutable segment per entry; return their references for the
        ledger. When this returns, every segment and its name are durable (see ``writing``)."""
        with self.writing(stream, partition, segments, created_ms) as batch:
            pass
        return batch.refs

    @contextmanager
    def writing(
        self, stream: str, partition: PartitionId, segments: Sequence[PendingSegment], created_ms: int
    ) -> Iterator[StagedWrite]:
        """Write one immutable segment per entry and start making them durable; the body of the
        ``with`` runs while the fsyncs are in flight, and the segments are durable once it exits.

        Files are written one after the other, then fsync'd concurrently with their directory
        (once per batch). The body may prepare the ledger accept (the references are final:
        names and sizes) -- that CPU work overlaps the fsyncs' wait -- but must not send it:
        nothing may name a segment before it is durable. Whatever the body does or raises, every
        fsync has ended before a descriptor is closed; an fsync's error is raised on exit.
        """
        directory = self.partition_dir(stream, partition)
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            fsync_dir(directory.parent)
        refs: list[SegmentRef] = []
        descriptors: list[int] = []
        pending: list[Future[None]] = []
        try:
            for segment in segments:
                name = segment_name(segment.buffer, segment.first, segment.last, created_ms, secrets.token_hex(6))
                self._crash.hit(BEFORE_SEGMENT_WRITE)
                fd = _create(directory, name)
                descriptors.append(fd)
                parts = segment.parts
                size = sum(map(len, parts))
                head, tail = _split(parts, size // 2)
                _write_all(fd, head)
                self._crash.hit(DURING_SEGMENT_WRITE)
                _write_all(fd, tail)
                refs.append(
                    SegmentRef(name=name, records=segment.records, size=size, first=segment.first, last=segment.last)
                )
            # Opened only now: holding our files, the directory can no longer be removed (the
            # sweeper removes empty ones) and recreated under another inode.
            descriptors.append(os.open(directory, os.O_RDONLY))
            # The files and their directory at once: each must be durable before the ledger
            # accepts the segments, and nothing depends on the order in which they become so.
            pending = _start_fsyncs(descriptors)
            yield StagedWrite(refs)
            _await_all(pending)
        finally:
            wait(pending)  # also when the body raised: no fsync may outlive its descriptor
            for fd in descriptors:
                os.close(fd)
        for _ref in refs:
            self._crash.hit(AFTER_SEGMENT_WRITE)

    @staticmethod
    def planned_ref(buffer: BufferKey, first: int, last: int, records: int, size: int, created_ms: int) -> SegmentRef:
        """The reference ``write`` would return for such a segment, down to a random nonce (the
        ledger item is compressed: a name of zeros would compress better than the real one):
        what the writer sizes a ledger accept with before writing anything."""
        return SegmentRef(
            segment_name(buffer, first, last, created_ms, secrets.token_hex(6)), records, size, first, last
        )

    def read(self, stream: str, partition: PartitionId, ref: SegmentRef, *, directory: str = "") -> list[Frame]:
        """Read an accepted segment and prove it holds exactly what the ledger says."""
        if parse_segment_name(ref.name) is None:
            raise UnsafePathError(f"refusing to read {ref.name!r}: not a segment name")
        path = self.partition_dir(stream, partition) / directory / ref.name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise MissingSegmentError(f"{path}: accepted segment is missing") from None
        try:
            frames = decode_segment(data)
        except TornFrameError as exc:
            raise CorruptSegmentError(f"{path}: {exc}") from None
        if len(data) != ref.size or len(frames) != ref.records:
            raise CorruptSegmentError(
                f"{path}: holds {len(frames)} records / {len(data)} bytes, ledger says {ref.records} / {ref.size}"
            )
        if frames and (frames[0].offset != ref.first or frames[-1].offset != ref.last):
            raise CorruptSegmentError(
                f"{path}: offsets {frames[0].offset}..{frames[-1].offset} != {ref.first}..{ref.last}"
            )
        return frames

    def segments(self, stream: str, partition: PartitionId, *, excluding: Set[str] = frozenset()) -> list[SegmentFile]:
        """Segment files of the partition, in offset order, leaving out the names in ``excluding``
        (cheaply: garbage collection passes the ledger's referenced set, usually all of them)."""
        directory = self.partition_dir(stream, partition)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        found = (parse_segment_name(name) for name in names if name not in excluding)
        return sorted((segment for segment in found if segment is not None), key=lambda s: (s.first, s.name))

    def partitions(self, stream: str) -> list[PartitionId]:
        """Partitions of ``stream`` that have a staging directory: numbers ascending, then ids."""
        if not matches(STREAM, stream):
            raise UnsafePathError(f"refusing staging path for stream={stream!r}")
        try:
            names = os.listdir(self.root / stream)
        except FileNotFoundError:
            return []
        found: list[PartitionId] = []
        for name in names:
            if name.startswith("p"):
                try:
                    found.append(partition_of_text(name[1:]))
                except ValueError:
                    continue  # not a partition directory of ours
        return sorted(found, key=partition_sort_key)

    def remove_partition_dir(self, stream: str, partition: PartitionId) -> bool:
        """Remove the partition's directory if it is empty; ``False`` if it holds anything (a
        writer may have just put a segment there: the directory then simply stays)."""
        directory = self.partition_dir(stream, partition)
        try:
            directory.rmdir()
        except OSError:  # missing, or not empty
            return False
        fsync_dir(directory.parent)
        return True

    # -- segments kept for a rebuild of a queue's dedupe index ---------------------------------

    def keep(self, stream: str, partition: PartitionId, ref: SegmentRef) -> None:
        """Move a flushed segment into the partition's ``kept/`` directory instead of deleting it,
        and note its ledger record there (``kept/refs``, one line each): while a queue's dedupe
        index is damaged, its ids are what a rebuild needs. Nothing else reads ``kept/`` (it is
        no segment name: garbage collection never sees it)."""
        if parse_segment_name(ref.name) is None:
            raise UnsafePathError(f"refusing to keep {ref.name!r}: not a segment name")
        kept = self.partition_dir(stream, partition) / KEPT
        kept.mkdir(exist_ok=True)
        line = f"{ref.name} {ref.records} {ref.size} {ref.first} {ref.last}\n"
        with open(kept / KEPT_REFS, "a", encoding="ascii") as refs:
            refs.write(line)
            refs.flush()
            os.fsync(refs.fileno())
        try:
            os.replace(self.partition_dir(stream, partition) / ref.name, kept / ref.name)
        except FileNotFoundError:
            return  # (already kept: a flush resumed after a crash here)
        fsync_dir(kept)

    def kept(self, stream: str, partition: PartitionId) -> list[SegmentRef]:
        """The segments ``keep`` moved aside and still there, as the ledger recorded them."""
        kept = self.partition_dir(stream, partition) / KEPT
        try:
            lines = (kept / KEPT_REFS).read_text(encoding="ascii").splitlines()
        except FileNotFoundError:
            return []
        refs: dict[str, SegmentRef] = {}
        for line in lines:
            fields = line.split()
            if len(fields) != 5 or parse_segment_name(fields[0]) is None:
                continue  # a torn last line (a crash while appending): its segment was not moved yet
            name, records, size, first, last = fields[0], *map(int, fields[1:])
            if (kept / name).exists():
                refs[name] = SegmentRef(name, records, size, first, last)
        return sorted(refs.values(), key=lambda ref: (ref.first, ref.name))

    def read_kept(self, stream: str, partition: PartitionId, ref: SegmentRef) -> list[Frame]:
        return self.read(stream, partition, ref, directory=KEPT)

    def discard_kept(self, stream: str, partition: PartitionId) -> int:
        """Delete every kept segment (after a rebuild indexed them); how many."""
        kept = self.partition_dir(stream, partition) / KEPT
        try:
            names = os.listdir(kept)
        except FileNotFoundError:
            return 0
        removed = 0
        for name in names:
            if parse_segment_name(name) is not None:
                os.unlink(kept / name)
                removed += 1
        (kept / KEPT_REFS).unlink(missing_ok=True)
        with suppress(OSError):  # (not empty: a segment kept meanwhile stays for the next rebuild)
            kept.rmdir()
        return removed

    def delete(self, stream: str, partition: PartitionId, name: str) -> bool:
        if parse_segment_name(name) is None:
            raise UnsafePathError(f"refusing to delete {name!r}: not a segment name")
        try:
            os.unlink(self.partition_dir(stream, partition) / name)
        except FileNotFoundError:
            return False
        return True


def _create(directory: Path, name: str) -> int:
    try:
        return os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    except FileNotFoundError:  # the sweeper removed the (then empty) directory just now
        directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(directory.parent)
        return os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)


_FSYNC_THREADS = 8
_IOV_MAX = 1024  # POSIX guarantees at least 16; Linux allows 1024 buffers per writev
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _start_fsyncs(descriptors: list[int]) -> list[Future[None]]:
    """fsync every descriptor concurrently (each is a round trip on EFS); ``_await_all`` ends them."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_FSYNC_THREADS, thread_name_prefix="tidemark-fsync")
        pool = _pool
    return [pool.submit(os.fsync, fd) for fd in descriptors]


def _await_all(pending: list[Future[None]]) -> None:
    wait(pending)  # every fsync has ended before the caller closes the descriptors
    for done in pending:
        done.result()  # re-raises an fsync's OSError here


def _split(parts: Sequence[bytes], at: int) -> tuple[list[memoryview], list[memoryview]]:
    """The parts' first ``at`` bytes and the rest, as views (nothing is copied)."""
    head: list[memoryview] = []
    tail: list[memoryview] = []
    seen = 0
    for part in parts:
        view = memoryview(part)
        if seen >= at:
            tail.append(view)
        elif seen + len(view) <= at:
            head.append(view)
        else:
            head.append(view[: at - seen])
            tail.append(view[at - seen :])
        seen += len(view)
    return head, tail


def _write_all(fd: int, views: list[memoryview]) -> None:
    """Write every byte of ``views`` in order: ``writev`` (at most ``IOV_MAX`` at a time), resumed
    after a short write."""
    views = [view for view in views if len(view)]
    index = 0
    while index < len(views):
        written = os.writev(fd, views[index : index + _IOV_MAX])
        while written:
            size = len(views[index])
            if written < size:
                views[index] = views[index][written:]
                break
            written -= size
            index += 1


#: where ``keep`` moves flushed segments, inside a partition's directory, and its list of them
KEPT = "kept"
KEPT_REFS = "refs"


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries durable (a create, rename or unlink in it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
