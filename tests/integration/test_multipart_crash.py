"""A real process death in the middle of a multipart upload, then recovery by redelivery."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import yaml

from tests.support.events import msk_event
from tests.support.harness import REPO, example_config_data
from tidemark.archiver import Archiver
from tidemark.config import load_config
from tidemark.records.model import Record
from tidemark.verify import ExpectedRecord, verify_archive

RECORD_BYTES = 16 * 1024


def test_process_dies_mid_multipart_upload(archive, tmp_path):
    data = example_config_data()
    data["archive"].update({"multipart_threshold": "5MiB", "multipart_chunksize": "5MiB"})
    stream = data["streams"][0]
    stream["event_time"] = {"source": "record_timestamp"}
    stream["encoding"] = {"value": "bytes", "key": "text", "headers": "text"}
    stream["aggregations"] = []  # aggregations read JSON values only
    stream["format"] = {"type": "jsonl", "compression": "none"}
    stream["flush"] = {"max_records": 400, "max_bytes": "64MiB", "max_age": "15m"}
    stream["dead_letter"] = {"max_record_bytes": "1MiB"}
    config_path = tmp_path / "tidemark.yaml"
    config_path.write_text(yaml.safe_dump(data))
    config = load_config(config_path)

    rng = random.Random(1)
    records = [
        Record("orders", 0, offset, 1_795_248_000_000 + offset, rng.randbytes(RECORD_BYTES), f"k{offset}".encode())
        for offset in range(400)
    ]
    Archiver(archive.runtime(config)).handle(msk_event(records[:200]))
    event_path = tmp_path / "batch2.json"
    event_path.write_text(json.dumps(msk_event(records[200:])))

    child = subprocess.run(
        [sys.executable, "-m", "tests.support.crash_child", str(event_path), "2"],
        cwd=REPO,
        env={**os.environ, **archive.env(), "TIDEMARK_CONFIG": str(config_path)},
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == 137, child.stderr.decode()[-2000:]
    uploads = archive.s3.list_multipart_uploads(Bucket=archive.bucket).get("Uploads", [])
    assert [upload["Key"].rsplit("/", 1)[-1] for upload in uploads] == [
        "orders+0+00000000000000000000-00000000000000000399.jsonl"
    ]
    assert "Contents" not in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")

    # The ESM redelivers the failed batch; the new invocation finishes the sealed flush.
    outcome = Archiver(archive.runtime(config)).handle(msk_event(records[200:]))["orders"]
    assert outcome.duplicates == 200
    assert [flush.resumed for flush in outcome.flushes] == [True]
    head = archive.s3.head_object(Bucket=archive.bucket, Key=uploads[0]["Key"])
    assert head["ContentLength"] > 5 * 1024 * 1024
    assert head["ETag"].strip('"').endswith("-2")  # really a two-part multipart upload
    expected = [ExpectedRecord(0, r.offset, r.value, "2026-11-21T08") for r in records]
    report = verify_archive(archive.s3, archive.bucket, "orders", expected, value_encoding="bytes")
    assert report.summary() == {**report.summary(), "produced": 400, "archived": 400, "objects": 1, "ok": True}
    assert (report.lost, report.duplicated, report.misfiled, report.corrupted) == ([], [], [], [])
