"""A deploy that changes a stream's format or encodings while buffers are open or sealed: every
buffer is rendered the way its records were staged, and none mixes the two."""

from __future__ import annotations

import orjson
import pytest

from tests.support.events import msk_event
from tests.support.harness import example_config_data
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.config import parse_config
from tidemark.faults import AFTER_SEAL, CrashAt, SimulatedCrash
from tidemark.formats.compression import decompress
from tidemark.verify import verify_archive


def configs(**changes):
    data = example_config_data()
    data["streams"][0]["flush"] = {"max_records": 1000}
    old = parse_config(data)
    data["streams"][0].update(changes)
    if data["streams"][0].get("encoding", {}).get("value", "json") != "json":
        data["streams"][0]["aggregations"] = []  # aggregations read JSON values only
    return old, parse_config(data)


def objects(archive):
    found = {}
    for item in archive.s3.list_objects_v2(Bucket=archive.bucket).get("Contents", []):
        found[item["Key"]] = archive.s3.get_object(Bucket=archive.bucket, Key=item["Key"])["Body"].read()
    return found


def test_sealed_flush_resumed_after_a_format_change_keeps_its_format(archive):
    data = example_config_data()
    data["streams"][0]["flush"] = {"max_records": 1}
    old = parse_config(data)
    data["streams"][0]["format"] = {"type": "jsonl", "compression": "none"}
    new = parse_config(data)
    workload = make_orders(partitions=1, per_partition=5, hours=1, late_share=0, bad_share=0, seed=3)
    with pytest.raises(SimulatedCrash):  # every buffer is sealed, nothing uploaded
        Archiver(archive.runtime(old, CrashAt(AFTER_SEAL))).handle(msk_event(workload.records[0]))
    archive.runtime(new).writer(new.streams[0], 0).maintain()  # deployed; the next run resumes the seals
    found = objects(archive)
    assert found and all(key.endswith(".jsonl.zst") for key in found)  # the example's codec
    offsets = sorted(
        orjson.loads(line)["offset"] for body in found.values() for line in decompress(body, "zstd").splitlines()
    )
    assert offsets == [0, 1, 2, 3, 4]


def test_open_buffer_is_sealed_when_the_format_changes_and_never_mixed(archive):
    old, new = configs(format={"type": "jsonl", "compression": "none"})
    workload = make_orders(partitions=1, per_partition=40, hours=1, late_share=0, bad_share=0, seed=6)
    records = workload.records[0]
    Archiver(archive.runtime(old)).handle(msk_event(records[:20]))
    outcome = Archiver(archive.runtime(new)).handle(msk_event(records[20:]))["orders"]
    assert {flush.reason for flush in outcome.flushes} == {"format_changed"}
    assert all(flush.key.endswith(".jsonl.zst") for flush in outcome.flushes)
    archive.clock.advance(minutes=16)
    archive.runtime(new).writer(new.streams[0], 0).maintain()
    found = objects(archive)
    for key, body in found.items():
        text = decompress(body, key)
        offsets = [orjson.loads(line)["offset"] for line in text.splitlines()]
        assert all(o < 20 for o in offsets) if key.endswith(".zst") else all(o >= 20 for o in offsets)
    assert {key.rsplit(".", 1)[-1] for key in found} == {"zst", "jsonl"}
    report = verify_archive(archive.s3, archive.bucket, "orders", workload.expected)
    assert (report.produced, report.lost, report.duplicated, report.misfiled) == (40, [], [], [])


def test_value_encoding_change_renders_each_buffer_in_its_own_encoding(archive):
    as_json, as_bytes = configs(
        encoding={"value": "bytes", "key": "text", "headers": "text"}, event_time={"source": "record_timestamp"}
    )
    workload = make_orders(partitions=1, per_partition=20, hours=1, late_share=0, bad_share=0, seed=2)
    records = workload.records[0]
    Archiver(archive.runtime(as_bytes)).handle(msk_event(records[:10]))  # base64 values ...
    Archiver(archive.runtime(as_json)).handle(msk_event(records[10:]))  # ... then JSON values again
    archive.clock.advance(minutes=16)
    archive.runtime(as_json).writer(as_json.streams[0], 0).maintain()
    values = {}
    for body in objects(archive).values():
        for line in decompress(body, "zstd").splitlines():
            envelope = orjson.loads(line)
            values[envelope["offset"]] = envelope["value"]
    assert all(isinstance(values[o], str) for o in range(10))  # base64 text
    assert all(isinstance(values[o], dict) for o in range(10, 20))  # embedded JSON


def test_switching_to_parquet_with_partitions_seals_the_jsonl_buffers_and_mixes_nothing(archive):
    """jsonl -> parquet partitioned by country mid-hour: the open jsonl buffer is sealed
    (``format_changed``), new records go to parquet objects under their country folders, and the
    checker reads both formats back: every record once, in the layout it was staged under."""
    old, new = configs(format={"type": "parquet"}, partition_by={"fields": ["_value.country"]})
    workload = make_orders(partitions=1, per_partition=40, hours=1, late_share=0, bad_share=0, seed=6)
    records = workload.records[0]
    Archiver(archive.runtime(old)).handle(msk_event(records[:20]))
    outcome = Archiver(archive.runtime(new)).handle(msk_event(records[20:]))["orders"]
    assert {flush.reason for flush in outcome.flushes} == {"format_changed"}
    archive.clock.advance(minutes=16)
    archive.runtime(new).writer(new.streams[0], 0).maintain()
    found = objects(archive)
    jsonl = [key for key in found if key.endswith(".jsonl.zst")]
    parquet = [key for key in found if key.endswith(".parquet")]
    assert jsonl and all(key.startswith("raw/orders/2026/") for key in jsonl)  # staged before: no folders
    assert parquet and all(key.split("/")[2] in {"US", "DE", "FR", "JP", "BR"} for key in parquet)
    assert len(jsonl) + len(parquet) == len(found)
    report = verify_archive(archive.s3, archive.bucket, "orders", workload.expected)  # both formats read back
    assert (report.produced, report.archived, report.ok) == (40, 40, True)
    new_half = verify_archive(archive.s3, archive.bucket, "orders", workload.expected, config=new.streams[0])
    assert sorted(ident[1] for *ident, _key in new_half.misfiled) == list(range(20))  # the jsonl half: no folders
    assert (new_half.lost, new_half.duplicated, new_half.corrupted) == ([], [], [])


def test_a_flush_whose_format_library_is_missing_waits_sealed_and_loses_nothing(archive, monkeypatch):
    """A deploy that dropped the formats layer while Parquet buffers were staged (``archiver.
    formats_layer: auto`` after a switch to jsonl): the flush fails with ImportError, stays
    SEALED and is counted; batches keep flowing; with the library back, it is archived once."""
    import tidemark.writer.stream as stream_module

    old, new = configs(format={"type": "parquet"})
    workload = make_orders(partitions=1, per_partition=40, hours=1, late_share=0, bad_share=0, seed=6)
    records = workload.records[0]
    Archiver(archive.runtime(new)).handle(msk_event(records[:20]))  # staged as Parquet
    real = stream_module.format_of

    def without_pyarrow(spec):
        if spec.format == "parquet":
            raise ModuleNotFoundError("No module named 'pyarrow'")
        return real(spec)

    monkeypatch.setattr(stream_module, "format_of", without_pyarrow)
    outcome = Archiver(archive.runtime(old)).handle(msk_event(records[20:]))["orders"]  # now jsonl
    assert outcome.staged == 20 and outcome.flush_errors >= 1
    assert any(
        flush.buffer.spec.startswith("parquet|")
        for flush in archive.runtime(old).ledger.load("orders", 0).sealed.values()
    )
    monkeypatch.setattr(stream_module, "format_of", real)
    archive.clock.advance(minutes=16)
    archive.runtime(old).writer(old.streams[0], 0).maintain()
    found = objects(archive)
    assert any(key.endswith(".parquet") for key in found) and any(key.endswith(".jsonl.zst") for key in found)
    report = verify_archive(archive.s3, archive.bucket, "orders", workload.expected)
    assert (report.produced, report.archived, report.ok) == (40, 40, True)
