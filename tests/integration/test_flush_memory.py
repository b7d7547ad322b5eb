"""Flushing a buffer holds nothing rendered whole in memory: peak RSS is flat in the buffer's size.

A ~16 MiB and a ~128 MiB buffer of ~4 KiB JSON orders are staged through the real writer, then
each is drained (sealed and flushed: segments read back one at a time, rendered as JSON Lines,
compressed with zstd level 1, spooled to disk, uploaded with boto3's transfer manager in parts
to the moto server, committed) in a fresh process (``tests.support.flush_memory_child``), whose
high-water mark (``VmHWM``) is the flush's peak alone. Both objects are read back from S3 and every record
counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

from tests.conftest import Archive, make_archive
from tests.support.harness import REPO, example_config_data
from tidemark.config import parse_config
from tidemark.objects.writer import META_RECORDS

SIZES_MIB = (16, 128)  # a flush holding its buffer whole would add the difference, 112 MiB
#: the larger flush's peak may exceed the smaller one's by this factor, plus SLACK_MIB
PEAK_FACTOR = 1.25
SLACK_MIB = 16


def child(step: list[str], archive: Archive, config_json: str, spool: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        **archive.env(),
        "TIDEMARK_CONFIG_JSON": config_json,
        "TIDEMARK_SPOOL_DIR": str(spool),
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    env.pop("TIDEMARK_CONFIG", None)
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.flush_memory_child", *step],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def count_lines(archive: Archive, key: str) -> tuple[int, int, int]:
    """Records in a zstd JSON Lines object, streamed (first and last offsets too)."""
    body = archive.s3.get_object(Bucket=archive.bucket, Key=key)["Body"]
    lines, first, tail = 0, b"", b""
    with zstandard.ZstdDecompressor().stream_reader(body) as reader:
        while chunk := reader.read(4 * 1024 * 1024):
            if not first:
                first = chunk[: chunk.index(b"\n")]
            lines += chunk.count(b"\n")
            tail = (tail + chunk)[-16_384:]
    last = tail[:-1].rsplit(b"\n", 1)[-1]
    return lines, orjson.loads(first)["offset"], orjson.loads(last)["offset"]


@pytest.fixture
def config_json() -> str:
    data = example_config_data()
    stream = data["streams"][0]
    stream["format"] = {"type": "jsonl", "compression": "zstd", "zstd_level": 1}
    stream["flush"] = {"max_records": 5_000_000, "max_bytes": "1GiB", "max_age": "1h", "max_segments": 200}
    stream["aggregations"] = []
    return parse_config(data).runtime_json()


def test_flushing_a_128_mib_buffer_peaks_no_higher_than_a_16_mib_one(
    moto_endpoint: str, config_json: str, tmp_path: Path, record_property: Any
) -> None:
    figures: dict[int, dict[str, Any]] = {}
    for mib in SIZES_MIB:
        archive = make_archive(moto_endpoint, tmp_path / f"{mib}")  # a bucket, ledger and staging of its own
        spool = tmp_path / f"spool-{mib}"
        spool.mkdir()
        staged = child(["stage", str(mib)], archive, config_json, spool)
        drained = child(["drain"], archive, config_json, spool)
        (flushed,) = drained["objects"]
        assert flushed["records"] == staged["records"]
        lines, first, last = count_lines(archive, flushed["key"])
        head = archive.s3.head_object(Bucket=archive.bucket, Key=flushed["key"])
        assert (lines, first, last) == (staged["records"], 0, staged["records"] - 1)
        assert head["Metadata"][META_RECORDS] == str(staged["records"])
        assert not list(spool.iterdir())  # the spool file is gone
        assert not list(archive.staging_root.rglob("*.seg"))  # the segments are gone
        archive.s3.delete_object(Bucket=archive.bucket, Key=flushed["key"])  # moto keeps objects in memory
        figures[mib] = {
            "records": staged["records"],
            "value_mib": round(staged["value_bytes"] / 2**20, 1),
            "object_mib": round(flushed["size"] / 2**20, 1),
            "flush_seconds": round(drained["seconds"], 2),
            "flush_peak_rss_mib": round(drained["peak_rss_mib"], 1),
            "flush_rss_mib_before": round(drained["rss_mib_before"], 1),
            "stage_seconds": round(staged["seconds"], 2),
            "stage_peak_rss_mib": round(staged["peak_rss_mib"], 1),
        }
    record_property("flush_memory", figures)
    print(json.dumps(figures, indent=1))
    small, large = figures[SIZES_MIB[0]]["flush_peak_rss_mib"], figures[SIZES_MIB[1]]["flush_peak_rss_mib"]
    assert large <= small * PEAK_FACTOR + SLACK_MIB, figures
