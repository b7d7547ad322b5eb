"""Schema references through the fault-injection suite, checked from S3.

Two paths give a record schema references: the mapping's schema registry integration (the
event carries ``valueSchemaMetadata`` / ``keySchemaMetadata``) and Confluent's wire format read
by the archiver itself (``encoding.wire_format: confluent``). Either way the archive must hold
every record exactly once with the references it came with, in every format that keeps them,
whatever crashes on the way; the S3 checker compares them record by record.
"""

from __future__ import annotations

from dataclasses import replace
from io import BytesIO
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.harness import EsmModel, assert_exactly_once, finish, small_config, staged_files
from tests.support.workload import Workload, make_orders, utc_hour
from tidemark.config import parse_config
from tidemark.faults import AFTER_SEAL, AFTER_UPLOAD, DURING_SEGMENT_WRITE, CrashAt
from tidemark.formats import RenderSpec, format_of
from tidemark.records.model import Record, SchemaRef
from tidemark.staging.frames import RAW, Frame
from tidemark.verify import verify_archive
from tidemark.writer.stream import render_spec

BATCH = 30
REGISTRY = {
    "kind": "confluent",
    "url": "https://registry.example.com",
    "auth": "basic",
    "secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:registry-AbCdEf",
}
BY_TIMESTAMP: dict[str, Any] = {"event_time": {"source": "record_timestamp"}, "aggregations": []}  # bytes: no JSON
FORMATS = {
    "jsonl": {"type": "jsonl", "compression": "gzip"},
    "parquet": {"type": "parquet", "compression": "zstd"},
    "avro": {"type": "avro", "compression": "deflate"},
    "csv": {"type": "csv", "compression": "zstd"},  # default columns: the references' included
}


def configured(stream: dict[str, Any], fmt: str) -> Any:
    data = small_config(max_records=25).model_dump(mode="json")
    data["streams"][0].update(format=FORMATS[fmt], **stream)
    return parse_config(data)


def with_refs(workload: Workload, refs_of: Any, value_of: Any = None, *, by_timestamp: bool = False) -> Workload:
    """The workload's records (and expectations) with the references ``refs_of(record)`` gives
    them and, if given, the value ``value_of(record)``; ``by_timestamp``: expected in the hour
    of their record timestamp (a stream of bytes values files them so, dead-lettering none)."""
    records: dict[Any, list[Record]] = {}
    changed: dict[tuple[Any, int], Record] = {}
    for partition, batch in workload.records.items():
        records[partition] = []
        for record in batch:
            value = value_of(record) if value_of is not None else record.value
            record = record._replace(value=value, schemas=refs_of(record))
            records[partition].append(record)
            changed[(partition, record.offset)] = record
    expected = []
    for want in workload.expected:
        record = changed[(want.partition, want.offset)]
        assert want.meta is not None
        hour = utc_hour(record.timestamp_ms) if by_timestamp else want.hour
        expected.append(replace(want, value=record.value, hour=hour, meta=replace(want.meta, schemas=record.schemas)))
    return Workload(records, expected, workload.kind)


def registry_refs(record: Record) -> tuple[SchemaRef, ...]:
    """What a registry integration reports: the value's schema on most records, the key's too
    on some, none on a few (a part it was not asked to validate)."""
    if record.offset % 11 == 0:
        return ()
    value = SchemaRef("value", "AVRO" if record.offset % 2 else "JSON", str(100 + record.offset % 3))
    return (SchemaRef("key", "AVRO", "7"), value) if record.offset % 5 == 0 else (value,)


def wire_value(record: Record) -> bytes | None:
    """A Confluent wire-format value (magic 0, a 4-byte id, the payload), or now and then a
    tombstone (a null value), an empty value or plain bytes, which carry no id."""
    if record.offset % 13 == 0:
        return None
    if record.offset % 19 == 0:
        return b""
    if record.offset % 17 == 0:
        return b"plain " + record.value[:8]
    return b"\x00" + (300 + record.offset % 4).to_bytes(4, "big") + record.value


def wire_refs(record: Record) -> tuple[SchemaRef, ...]:
    """The ids expected from the wire format, read here independently of tidemark.wireformat."""
    value = record.value
    if value is not None and len(value) >= 5 and value[0] == 0:
        return (SchemaRef("value", "", str(int.from_bytes(value[1:5], "big"))),)
    return ()


def run_with_crashes(archive: Any, config: Any, workload: Workload) -> EsmModel:
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    faults = [CrashAt(AFTER_UPLOAD), CrashAt(AFTER_SEAL, 2), CrashAt(DURING_SEGMENT_WRITE, 3)]
    for partition in workload.records:
        while esm.pending(partition):
            fault = faults[-1] if faults else None
            esm.deliver(esm.batch(partition, BATCH, rewind=5), fault)  # overlapping redeliveries too
            if fault is not None and fault.fired:
                faults.pop()
    assert esm.crashes == 3
    finish(archive, config, esm, BATCH)
    return esm


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_registry_references_are_archived_exactly_once(archive, fmt):
    config = configured(
        {"source": {**small_config().streams[0].source.model_dump(mode="json"), "schema_registry": REGISTRY}}
        | {"archiver": {"provisioned_pollers": {"minimum": 1, "maximum": 2}}},
        fmt,
    )
    workload = with_refs(make_orders(partitions=2, per_partition=120, hours=2, seed=5), registry_refs)
    esm = run_with_crashes(archive, config, workload)
    assert_exactly_once(archive, config, esm)  # schema references compared record by record
    assert staged_files(archive) == set()
    assert any(len(want.meta.schemas) == 2 for want in workload.expected if want.meta)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_wire_format_ids_are_archived_with_the_bytes(archive, fmt):
    stream = {"encoding": {"value": "bytes", "key": "text", "headers": "text", "wire_format": "confluent"}}
    config = configured(stream | BY_TIMESTAMP, fmt)
    base = make_orders(partitions=2, per_partition=120, hours=2, seed=6)
    raw = with_refs(base, lambda record: (), wire_value)  # what the producers wrote: no references
    workload = Workload(raw.records, with_refs(raw, wire_refs, by_timestamp=True).expected, raw.kind)
    esm = run_with_crashes(archive, config, workload)
    assert_exactly_once(archive, config, esm)
    refs = [want.meta.schemas for want in workload.expected if want.meta]
    assert {ref.id for found in refs for ref in found} == {"300", "301", "302", "303"}
    assert () in refs  # tombstones, empty values and plain bytes: archived, without an id
    assert any(want.value is None for want in workload.expected)


def test_the_checker_notices_a_wrong_reference(archive):
    """The S3 checker is what proves references were kept: expecting another id fails it."""
    config = configured({"encoding": {"value": "bytes", "wire_format": "confluent"}} | BY_TIMESTAMP, "jsonl")
    raw = with_refs(make_orders(partitions=1, per_partition=40), lambda record: (), wire_value)
    esm = EsmModel(raw, lambda crash: archive.runtime(config, crash))
    finish(archive, config, esm, BATCH)
    wrong = with_refs(raw, lambda record: (SchemaRef("value", "", "1"),), by_timestamp=True).expected
    report = verify_archive(archive.s3, archive.bucket, "orders", wrong, config=config.streams[0])
    assert len(report.corrupted) == len(wrong) and not report.lost and not report.misfiled


def test_columnar_objects_of_a_stream_with_references_all_carry_the_columns():
    """Every Parquet object of such a stream has the columns, whether its records have references or not."""
    config = configured({"encoding": {"value": "bytes", "wire_format": "confluent"}} | BY_TIMESTAMP, "parquet")
    spec = RenderSpec.decode(render_spec(config.streams[0]))
    assert spec.schema_refs
    out = BytesIO()
    format_of(spec).write([Frame(RAW, 1, 2, 3, None, b"x")], spec.context(0, "k"), out)
    names = pq.ParquetFile(BytesIO(out.getvalue())).schema_arrow.names
    assert names[-2:] == ["key_schema", "value_schema"]


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
def test_metadata_a_stream_does_not_keep_is_not_staged(archive, fmt):
    """A mapping that still adds schema metadata to a stream configured without a registry (the
    registry removed, deploys out of order): the records archive as the stream says, without
    references -- never a flush its format cannot render, which would hold the partition up."""
    config = configured({}, fmt)
    workload = with_refs(make_orders(partitions=1, per_partition=60, hours=1, seed=8), registry_refs)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash))
    finish(archive, config, esm, BATCH)
    expected = [replace(want, meta=replace(want.meta, schemas=())) for want in workload.expected if want.meta]
    report = verify_archive(archive.s3, archive.bucket, "orders", expected, config=config.streams[0])
    assert report.ok and report.archived + report.dead_lettered == report.produced == 60, (
        report.corrupted,
        report.misfiled,
    )
    assert staged_files(archive) == set()
