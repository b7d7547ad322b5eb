"""Read an archive back from S3 and compare it, record by record, with what was produced.

Used by the fault-injection suite and by the embedded demo's verification report: it reads the
objects themselves, never the writer's own counters.
"""

from __future__ import annotations

import base64
import gzip
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from tidemark.eventtime import hour_path
from tidemark.objects.keys import epoch_of_key

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class RecordMeta:
    """What a record carries besides its value, checked when the producer knows it."""

    topic: str
    key: bytes | None
    headers: Headers


@dataclass(frozen=True, slots=True)
class ArchivedRecord:
    partition: int
    offset: int
    key: str  # S3 object key it was found in
    folder: str  # yyyy/mm/dd/hh of that key
    value: bytes
    dead_letter: bool
    error: str
    meta: RecordMeta
    epoch: int = 0  # the position epoch of its object (``+e<n>+`` in the key)


@dataclass(frozen=True, slots=True)
class ExpectedRecord:
    partition: int
    offset: int
    value: bytes
    hour: str | None  # expected event-hour label, None when it must be dead-lettered
    meta: RecordMeta | None = None  # topic, key and headers; None: not checked
    epoch: int = 0  # the position epoch it must be archived in (a recreated topic repeats offsets)


def identity(partition: int, offset: int, epoch: int) -> tuple[int, ...]:
    """A record's identity in the archive: (partition, offset), plus the epoch after a reset."""
    return (partition, offset) if epoch == 0 else (partition, offset, epoch)


@dataclass
class VerificationReport:
    produced: int = 0
    archived: int = 0
    dead_lettered: int = 0
    lost: list[tuple[int, ...]] = field(default_factory=list)
    duplicated: list[tuple[int, ...]] = field(default_factory=list)
    unexpected: list[tuple[int, ...]] = field(default_factory=list)
    misfiled: list[tuple[int | str, ...]] = field(default_factory=list)
    corrupted: list[tuple[int, ...]] = field(default_factory=list)
    objects: int = 0
    objects_per_hour: Counter[str] = field(default_factory=Counter)
    records_per_hour: Counter[str] = field(default_factory=Counter)
    dead_letter_reasons: Counter[str] = field(default_factory=Counter)
    produced_by_partition: Counter[int] = field(default_factory=Counter)
    archived_by_partition: Counter[int] = field(default_factory=Counter)  # copies found, raw
    dead_lettered_by_partition: Counter[int] = field(default_factory=Counter)  # copies found, errors

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.misfiled or self.corrupted)

    def summary(self) -> dict[str, Any]:
        return {
            "produced": self.produced,
            "archived": self.archived,
            "dead_lettered": self.dead_lettered,
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


def _meta(envelope: dict[str, Any], dead: bool, key_encoding: str, header_encoding: str) -> RecordMeta:
    if dead:  # dead letters keep every byte in base64, whatever the encodings
        key = envelope["key_base64"]
        return RecordMeta(
            envelope["topic"],
            None if key is None else base64.b64decode(key),
            tuple((h["key"], base64.b64decode(h["value_base64"])) for h in envelope["headers"]),
        )
    key = envelope["key"]
    return RecordMeta(
        envelope["topic"],
        None if key is None else _value_bytes(key, key_encoding),
        tuple((h["key"], _value_bytes(h["value"], header_encoding)) for h in envelope["headers"]),
    )


def read_archive(
    s3: S3Client,
    bucket: str,
    stream: str,
    raw_prefix: str = "raw",
    errors_prefix: str = "errors",
    value_encoding: str = "json",
    key_encoding: str = "text",
    header_encoding: str = "text",
) -> tuple[list[ArchivedRecord], int, Counter[str]]:
    """Every record in every object of the stream, with the object it came from."""
    found: list[ArchivedRecord] = []
    per_hour: Counter[str] = Counter()
    keys = 0
    for prefix, dead in ((raw_prefix, False), (errors_prefix, True)):
        for key in _list_keys(s3, bucket, f"{prefix}/{stream}/"):
            keys += 1
            folder = "/".join(key.split("/")[2:6])
            if not dead:
                per_hour[folder] += 1
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            if key.endswith(".gz"):
                body = gzip.decompress(body)
            for line in body.splitlines():
                envelope = orjson.loads(line)
                if dead:
                    value = base64.b64decode(envelope["value_base64"])
                    error = envelope["error"]
                else:
                    value = _value_bytes(envelope["value"], value_encoding)
                    error = ""
                meta = _meta(envelope, dead, key_encoding, header_encoding)
                found.append(
                    ArchivedRecord(
                        envelope["partition"],
                        envelope["offset"],
                        key,
                        folder,
                        value,
                        dead,
                        error,
                        meta,
                        epoch_of_key(key),
                    )
                )
    return found, keys, per_hour


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
) -> VerificationReport:
    """Compare the S3 archive of ``stream`` with the produced records.

    Every produced record must appear exactly once: in the folder of its expected event hour,
    or in the dead-letter prefix when ``hour`` is ``None``; its value must survive unchanged
    (compared as parsed JSON for JSON streams, since the envelope embeds the value as JSON), and
    so must its topic, key and headers where the expectation carries them.
    """
    archived, objects, per_hour = read_archive(
        s3, bucket, stream, raw_prefix, errors_prefix, value_encoding, key_encoding, header_encoding
    )
    report = VerificationReport(objects=objects, objects_per_hour=per_hour)
    wanted = {identity(item.partition, item.offset, item.epoch): item for item in expected}
    report.produced = len(wanted)
    report.produced_by_partition.update(ident[0] for ident in wanted)
    seen: Counter[tuple[int, ...]] = Counter()
    for record in archived:
        ident = identity(record.partition, record.offset, record.epoch)
        seen[ident] += 1
        if record.dead_letter:
            report.dead_lettered += 1
            report.dead_lettered_by_partition[record.partition] += 1
            report.dead_letter_reasons[record.error.split(":", 1)[0]] += 1
        else:
            report.archived += 1
            report.archived_by_partition[record.partition] += 1
            report.records_per_hour[record.folder] += 1
        want = wanted.get(ident)
        if want is None:
            report.unexpected.append(ident)
            continue
        if seen[ident] == 2:
            report.duplicated.append(ident)
        intact = want.meta is None or record.meta == want.meta
        if want.hour is None:
            if not record.dead_letter:
                report.misfiled.append((*ident, record.key))
            elif record.value != want.value:
                intact = False
        else:
            if record.dead_letter or record.folder != hour_path(want.hour):
                report.misfiled.append((*ident, record.key))
            elif value_encoding == "json":
                intact = intact and orjson.loads(record.value) == orjson.loads(want.value)
            else:
                intact = intact and record.value == want.value
        if not intact:
            report.corrupted.append(ident)
    report.lost = sorted(ident for ident in wanted if ident not in seen)
    return report
