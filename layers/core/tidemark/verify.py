"""Read an archive back from S3 and compare it, record by record, with what was produced.

Used by the fault-injection suite and by the embedded demo's verification report: it reads the
objects themselves, never the writer's own counters.
"""

from __future__ import annotations

import base64
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from tidemark.config.model import COMPRESSIONS, SCHEMA_REF_COLUMNS, SCHEMA_REF_FORMATS, StreamConfig
from tidemark.eventtime import hour_path
from tidemark.formats import RenderSpec, format_of, kind_of_key
from tidemark.formats.base import ArchivedEnvelope
from tidemark.objects.keys import epoch_of_key, folders_of_key, hour_of_key, positions_of_key, source_of_key
from tidemark.partitioning import MissingPartitionValue, Partitioner
from tidemark.records.model import Headers, Record, Schemas
from tidemark.sources import PartitionId, shape_of
from tidemark.valuepath import cell
from tidemark.writer.stream import render_spec

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@dataclass(frozen=True, slots=True)
class RecordMeta:
    """What a record carries besides its value, checked when the producer knows it."""

    topic: str
    key: bytes | None
    headers: Headers
    schemas: Schemas = ()  # the schema references the envelope must carry (key, then value)


#: a record's identity in the archive: (partition, position[, epoch])
Identity = tuple[int | str, ...]


@dataclass(frozen=True, slots=True)
class ArchivedRecord:
    partition: PartitionId
    offset: int
    key: str  # S3 object key it was found in
    folder: str  # yyyy/mm/dd/hh of that key
    value: bytes | None  # None: a tombstone (the format keeps it null)
    dead_letter: bool
    error: str
    meta: RecordMeta
    epoch: int = 0  # the position epoch of its object (``+e<n>+`` in the key)
    folders: str = ""  # the partition-by folders of its object
    fields: dict[str, Any] | None = None  # typed or flattened value fields, when the format stores those
    kept: frozenset[str] = frozenset({"topic", "key", "headers"})  # the metadata its format keeps


@dataclass(frozen=True, slots=True)
class ExpectedRecord:
    partition: PartitionId
    offset: int
    value: bytes | None  # None: a tombstone
    hour: str | None  # expected event-hour label, None when it must be dead-lettered
    meta: RecordMeta | None = None  # topic, key and headers; None: not checked
    epoch: int = 0  # the position epoch it must be archived in (a recreated topic repeats offsets)


def identity(partition: PartitionId, offset: int, epoch: int) -> Identity:
    """A record's identity in the archive: (partition, offset), plus the epoch after a reset."""
    return (partition, offset) if epoch == 0 else (partition, offset, epoch)


@dataclass
class VerificationReport:
    produced: int = 0
    archived: int = 0
    dead_lettered: int = 0
    tombstones: int = 0  # archived records whose value is null (counted in ``archived`` too)
    lost: list[Identity] = field(default_factory=list)
    duplicated: list[Identity] = field(default_factory=list)
    unexpected: list[Identity] = field(default_factory=list)
    misfiled: list[tuple[int | str, ...]] = field(default_factory=list)
    corrupted: list[Identity] = field(default_factory=list)
    objects: int = 0
    objects_per_hour: Counter[str] = field(default_factory=Counter)
    records_per_hour: Counter[str] = field(default_factory=Counter)
    dead_letter_reasons: Counter[str] = field(default_factory=Counter)
    produced_by_partition: Counter[PartitionId] = field(default_factory=Counter)
    archived_by_partition: Counter[PartitionId] = field(default_factory=Counter)  # copies found, raw
    dead_lettered_by_partition: Counter[PartitionId] = field(default_factory=Counter)  # copies found, errors

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.misfiled or self.corrupted)

    def count(self, record: ArchivedRecord) -> None:
        """Count a record found in the archive (every copy: a duplicate counts again)."""
        if record.dead_letter:
            self.dead_lettered += 1
            self.dead_lettered_by_partition[record.partition] += 1
            self.dead_letter_reasons[record.error.split(":", 1)[0]] += 1
        else:
            self.archived += 1
            self.tombstones += record.value is None
            self.archived_by_partition[record.partition] += 1
            self.records_per_hour[record.folder] += 1

    def summary(self) -> dict[str, Any]:
        return {
            "produced": self.produced,
            "archived": self.archived,
            "dead_lettered": self.dead_lettered,
            "tombstones": self.tombstones,
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "unexpected": len(self.unexpected),
            "misfiled": len(self.misfiled),
            "corrupted": len(self.corrupted),
            "objects": self.objects,
            "ok": self.ok,
        }


def _list_keys(s3: S3Client, bucket: str, prefix: str) -> list[str]:
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return keys


def _value_bytes(value: Any, encoding: str) -> bytes:
    """The original value bytes from an archived envelope (JSON values come back re-serialised)."""
    if encoding == "bytes":
        return base64.b64decode(value)
    if encoding == "text":
        return str(value).encode("utf-8")
    return orjson.dumps(value)


def spec_of_key(key: str, spec: RenderSpec) -> RenderSpec:
    """The render spec an object was written under, as far as its key tells (format and codec)
    and the stream's configuration tells the rest (encodings, value schema, csv columns)."""
    fmt, codec = kind_of_key(key)
    if codec is None:  # inside the file: the stream's codec, or the format's default
        codec = spec.compression if spec.format == fmt else COMPRESSIONS[fmt][0]
    source = source_of_key(key)
    if shape_of(spec.source).position_digits == shape_of(source).position_digits:
        source = spec.source  # the width cannot tell a RabbitMQ position from a Kafka offset: the stream can
    return replace(spec, format=fmt, compression=codec, source=source)


def _render_spec(stream: StreamConfig | None, value: str, key: str, headers: str) -> RenderSpec:
    if stream is not None:
        return RenderSpec.decode(render_spec(stream))
    return RenderSpec("jsonl", "gzip", 6, "", key, value, headers)


def read_archive(
    s3: S3Client,
    bucket: str,
    stream: str,
    raw_prefix: str = "raw",
    errors_prefix: str = "errors",
    value_encoding: str = "json",
    key_encoding: str = "text",
    header_encoding: str = "text",
    *,
    config: StreamConfig | None = None,
) -> tuple[list[ArchivedRecord], int, Counter[str]]:
    """Every record in every object of the stream, with the object it came from, read with the
    reader of the object's format. Records of a format that does not keep positions (text) have
    offset -1 until ``verify_archive`` matches them to what was produced."""
    spec = _render_spec(config, value_encoding, key_encoding, header_encoding)
    errors_spec = replace(spec, format="jsonl", compression="gzip", value_schema="", columns="")
    found: list[ArchivedRecord] = []
    per_hour: Counter[str] = Counter()
    keys = 0
    for prefix, dead in ((raw_prefix, False), (errors_prefix, True)):
        for key in _list_keys(s3, bucket, f"{prefix}/{stream}/"):
            keys += 1
            folder = hour_path(hour_of_key(key))
            if not dead:
                per_hour[folder] += 1
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            object_spec = spec_of_key(key, errors_spec if dead else spec)
            partition = positions_of_key(key)[0]
            kept = _kept(object_spec)
            for envelope in format_of(object_spec).read(body, object_spec.context(partition, key)):
                found.append(_archived(envelope, key, folder, partition, dead, kept, object_spec.format == "csv"))
    return found, keys, per_hour


CSV_FIELD = "value."  # csv fields are kept under their column names, typed fields under theirs


def _archived(
    envelope: ArchivedEnvelope,
    key: str,
    folder: str,
    partition: PartitionId,
    dead: bool,
    kept: frozenset[str],
    csv: bool,
) -> ArchivedRecord:
    value = envelope.value
    if value is None and not envelope.tombstone:
        value = orjson.dumps(envelope.fields)
    fields = envelope.fields
    if csv and fields is not None:
        fields = {CSV_FIELD + name: text for name, text in fields.items()}
    return ArchivedRecord(
        envelope.partition if envelope.partition is not None else partition,
        envelope.offset if envelope.offset is not None else -1,
        key,
        folder,
        value,
        dead,
        envelope.error,
        RecordMeta(envelope.topic or "", envelope.key, envelope.headers or (), envelope.schemas or ()),
        epoch_of_key(key),
        folders_of_key(key),
        fields,
        kept,
    )


_META = frozenset({"topic", "key", "headers"})


def _kept(spec: RenderSpec) -> frozenset[str]:
    """The record metadata (topic, key, headers, schema references) objects of this spec keep."""
    if spec.format == "text":
        return frozenset()
    if spec.format == "csv":
        columns = set(spec.context(0).columns)
        return (_META & columns) | ({"schemas"} if set(SCHEMA_REF_COLUMNS) <= columns else set())
    if spec.format == "jsonl" or (spec.schema_refs and spec.format in SCHEMA_REF_FORMATS):
        return _META | {"schemas"}
    return _META


def verify_archive(
    s3: S3Client,
    bucket: str,
    stream: str,
    expected: Iterable[ExpectedRecord],
    *,
    raw_prefix: str = "raw",
    errors_prefix: str = "errors",
    value_encoding: str = "json",
    key_encoding: str = "text",
    header_encoding: str = "text",
    config: StreamConfig | None = None,
) -> VerificationReport:
    """Compare the S3 archive of ``stream`` with the produced records.

    Every produced record must appear exactly once: in the folder of its expected event hour
    (and, with ``config`` naming partition-by fields, under the folders its content selects), or
    in the dead-letter prefix when ``hour`` is ``None``; its value must survive unchanged
    (compared as parsed JSON for JSON streams, field by field where the format stored typed or
    flattened fields), and so must its topic, key and headers where the expectation carries
    them and the format keeps them. ``config`` (the stream's configuration) tells the encodings,
    value schema and csv columns; without it the encoding arguments do.
    """
    if config is not None:
        value_encoding = config.encoding.value
    archived, objects, per_hour = read_archive(
        s3, bucket, stream, raw_prefix, errors_prefix, value_encoding, key_encoding, header_encoding, config=config
    )
    wanted = {identity(item.partition, item.offset, item.epoch): item for item in expected}
    folders_of = _expected_folders(config)
    archived = _place_unpositioned(archived, wanted, value_encoding, folders_of)
    report = VerificationReport(objects=objects, objects_per_hour=per_hour)
    report.produced = len(wanted)
    report.produced_by_partition.update(ident[0] for ident in wanted)
    seen: Counter[Identity] = Counter()
    for record in archived:
        ident = identity(record.partition, record.offset, record.epoch)
        seen[ident] += 1
        report.count(record)
        want = wanted.get(ident)
        folders = None
        if want is not None and want.hour is not None and folders_of is not None:  # dead letters have none
            folders = folders_of(want)
        _judge(report, record, ident, want, seen[ident], value_encoding, folders)
    report.lost = sorted(ident for ident in wanted if ident not in seen)
    return report


class _Expected(Protocol):
    """What a checker knows a record must be (``ExpectedRecord``, ``ExpectedMessage``)."""

    @property
    def value(self) -> bytes | None: ...

    @property
    def hour(self) -> str | None: ...

    @property
    def meta(self) -> RecordMeta | None: ...


def _judge(
    report: VerificationReport,
    record: ArchivedRecord,
    label: Identity,
    want: _Expected | None,
    copies: int,
    encoding: str,
    folders: str | None = None,
) -> None:
    """File one archived record (the ``copies``-th found of its identity) against what it must be:
    unexpected, duplicated, misfiled (wrong hour, prefix or ``folders``) or corrupted."""
    if want is None:
        report.unexpected.append(label)
        return
    if copies == 2:
        report.duplicated.append(label)
    intact = want.meta is None or _same_meta(record, want.meta)
    if want.hour is None:
        if not record.dead_letter:
            report.misfiled.append((*label, record.key))
        elif record.value != want.value:
            intact = False
    elif (
        record.dead_letter
        or record.folder != hour_path(want.hour)
        or (folders is not None and record.folders != folders)
    ):
        report.misfiled.append((*label, record.key))
    else:
        intact = intact and _same_value(record, want.value, encoding)
    if not intact:
        report.corrupted.append(label)


def _same_meta(record: ArchivedRecord, meta: RecordMeta) -> bool:
    kept = record.kept
    return (
        ("topic" not in kept or record.meta.topic == meta.topic)
        and ("key" not in kept or record.meta.key == meta.key or (record.meta.key or b"") == (meta.key or b""))
        and ("headers" not in kept or record.meta.headers == meta.headers)
        and ("schemas" not in kept or record.meta.schemas == meta.schemas)
    )


def _same_value(record: ArchivedRecord, produced: bytes | None, encoding: str) -> bool:
    if produced is None or record.value is None:  # a tombstone must be archived as one
        return _same_tombstone(record, produced)
    if record.fields is None:
        if encoding == "json":
            return bool(orjson.loads(record.value) == orjson.loads(produced))
        return record.value == produced
    original = orjson.loads(produced)
    if not isinstance(original, dict):
        return False
    if any(name.startswith(CSV_FIELD) for name in record.fields):  # csv value.<path> columns: text cells
        return all(
            archived == cell(original, name.removeprefix(CSV_FIELD).split("."))
            for name, archived in record.fields.items()
        )
    # typed columns of a declared schema: absent and null are both null; a JSON integer in a
    # double column is that double
    return set(record.fields) >= set(original) and all(
        _same_typed(record.fields[name], original.get(name)) for name in record.fields
    )


def _same_tombstone(record: ArchivedRecord, produced: bytes | None) -> bool:
    """A tombstone (``produced`` None) archived as a null value; where the format cannot tell a
    null from an empty value (text lines of a text or bytes stream: they keep nothing else) or
    from a value lacking every field (csv without a ``value`` column), as what it shows."""
    if produced is not None:
        return False  # a value archived as a tombstone
    if record.value is None:
        return True
    if not record.kept:  # a text object's line
        return record.value == b""
    return record.fields is not None and all(item is None for item in record.fields.values())


def _same_typed(archived: Any, original: Any) -> bool:
    if isinstance(archived, float) and isinstance(original, int) and not isinstance(original, bool):
        return archived == float(original)
    return bool(archived == original)


def _expected_folders(config: StreamConfig | None) -> Callable[[ExpectedRecord], str | None] | None:
    """``want -> folders`` when the stream is partitioned (None: not checked)."""
    if config is None or not config.partition_by.fields:
        return None
    partitioner = Partitioner(config.partition_by)
    needs_meta = any(
        field.field in ("_key", "_topic") or field.field.startswith("_header.") for field in config.partition_by.fields
    )

    def folders(want: ExpectedRecord) -> str | None:
        if want.meta is None and needs_meta:
            return None  # the expectation does not say: not judged
        meta = want.meta or RecordMeta(config.source.topic, None, ())
        record = Record(meta.topic, want.partition, want.offset, 0, want.value, meta.key, meta.headers)
        parsed = orjson.loads(want.value) if partitioner.needs_value and want.value is not None else None
        try:
            return partitioner.folders(record, parsed)
        except MissingPartitionValue:
            return "<dead-lettered>"

    return folders


def _place_unpositioned(
    archived: list[ArchivedRecord],
    wanted: dict[Identity, ExpectedRecord],
    encoding: str,
    folders_of: Callable[[ExpectedRecord], str | None] | None,
) -> list[ArchivedRecord]:
    """Give records of formats without offsets (text) the offset of the produced record they
    are: the next one, in offset order, of the object's partition, epoch and offset range (its
    key names them) that belongs in the object's hour and folders and whose value they equal.
    One that matches none keeps offset -1 (unexpected)."""

    def belongs(want: ExpectedRecord, record: ArchivedRecord) -> bool:
        if want.hour is None or hour_path(want.hour) != record.folder:
            return False
        folders = folders_of(want) if folders_of is not None else None
        return folders is None or folders == record.folders

    if all(record.offset >= 0 for record in archived):
        return archived
    candidates: dict[tuple[PartitionId, int], list[ExpectedRecord]] = defaultdict(list)
    for want in sorted(wanted.values(), key=lambda item: item.offset):
        candidates[(want.partition, want.epoch)].append(want)
    taken: set[Identity] = set()
    placed = []
    for record in archived:
        if record.offset >= 0:
            placed.append(record)
            continue
        _partition, first, last = positions_of_key(record.key)
        for want in candidates[(record.partition, record.epoch)]:
            ident = identity(want.partition, want.offset, want.epoch)
            if (
                first <= want.offset <= last
                and ident not in taken
                and belongs(want, record)
                and _same_value(record, want.value, encoding)
            ):
                taken.add(ident)
                record = replace(record, offset=want.offset)
                break
        placed.append(record)
    return placed


@dataclass(frozen=True, slots=True)
class ExpectedMessage:
    """A message of a source without offsets (RabbitMQ), known by the id it is deduplicated by:
    the archive must hold it once, wherever the ledger numbered it."""

    id: bytes  # its dedupe id (``tidemark.dedupe.ids.message_id``), or its body's digest without one
    value: bytes
    hour: str | None  # expected event-hour label, None when it must be dead-lettered
    meta: RecordMeta | None = None


def verify_messages(
    s3: S3Client,
    bucket: str,
    stream: str,
    expected: Iterable[ExpectedMessage],
    *,
    config: StreamConfig,
    raw_prefix: str = "raw",
    errors_prefix: str = "errors",
) -> VerificationReport:
    """``verify_archive`` for a source whose positions the ledger assigns: each archived record is
    matched to what was published by its id, read back from the object (the envelope's key, or
    under ``dedupe.id: header:<name>`` that header; a record without one by its body's digest).
    Besides lost, duplicated, misfiled and corrupted ids, the positions must tile: every
    partition's are ``0..n-1``, each once (a gap is an accepted record missing from the archive),
    reported as ``lost`` ``("position", partition, p)``."""
    from tidemark.dedupe.ids import CONTENT_SHA256, digest, message_id

    rule = config.dedupe_settings.id
    archived, objects, per_hour = read_archive(s3, bucket, stream, raw_prefix, errors_prefix, config=config)
    wanted = {item.id: item for item in expected}
    report = VerificationReport(objects=objects, objects_per_hour=per_hour)
    report.produced = len(wanted)
    seen: Counter[bytes] = Counter()
    positions: dict[PartitionId, list[int]] = defaultdict(list)
    encoding = config.encoding.value
    for record in archived:
        positions[record.partition].append(record.offset)
        shaped = Record("", record.partition, record.offset, 0, record.value, record.meta.key, record.meta.headers)
        found = message_id(shaped, rule)
        ident = found if found is not None and rule != CONTENT_SHA256 else digest(shaped, rule)
        seen[ident] += 1
        report.count(record)
        _judge(report, record, (ident.decode("utf-8", "replace"),), wanted.get(ident), seen[ident], encoding)
    report.lost = sorted((ident.decode("utf-8", "replace"),) for ident in wanted if ident not in seen)
    for partition, found_positions in positions.items():
        if sorted(found_positions) != list(range(len(found_positions))):
            missing = sorted(set(range(max(found_positions) + 1)) - set(found_positions))
            report.lost += [("position", str(partition), str(position)) for position in missing] or [
                ("position", str(partition), "repeated")
            ]
    report.produced_by_partition[0] = len(wanted)  # a queue is one partition
    return report
