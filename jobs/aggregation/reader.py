"""Executor-side reading of archive objects: boto3 fetches, bytes are split, Arrow batches out.

Spark's ``s3a`` connector needs Hadoop jars that no registry here serves; reading with boto3
inside ``mapInArrow`` tasks works the same against S3 on EMR Serverless and moto on a laptop, on
Spark 3.5 and 4. Each task gets a slice of the object list the ledger committed (never a prefix
listing), downloads each object, and splits every JSON Lines envelope without parsing it: the
archive renders envelopes from a fixed byte template (``tidemark.formats.jsonl``), so the value
is the bytes between ``,"value":`` and the last ``,"headers":[``. Spark parses the values
afterwards, in the JVM (``from_json``).
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

OBJECTS_SCHEMA = "key string, hour string"  # one row per object to read
RECORDS_SCHEMA = "hour string, partition int, offset long, event_time string, value string"
_ARROW_RECORDS = pa.schema(
    [
        ("hour", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("event_time", pa.string()),
        ("value", pa.string()),
    ]
)
_HEAD = re.compile(
    rb'^\{"topic":"[A-Za-z0-9._-]*","partition":(\d+),"offset":(\d+),"timestamp":-?\d+,"event_time":"([^"]*)","key":'
)
_VALUE = b',"value":'
_HEADERS = b',"headers":['


class EnvelopeError(ValueError):
    """A line that is not an archive envelope (the object is not what the ledger says)."""


def split_envelope(line: bytes) -> tuple[int, int, str, bytes]:
    """``(partition, offset, event_time, value bytes)`` of one raw archive envelope."""
    head = _HEAD.match(line)
    if head is None:
        raise EnvelopeError(f"not an archive envelope: {line[:120]!r}")
    start = line.find(_VALUE, head.end())
    end = line.rfind(_HEADERS)
    if start < 0 or end < start:
        raise EnvelopeError(f"envelope without value/headers: {line[:120]!r}")
    return int(head.group(1)), int(head.group(2)), head.group(3).decode("ascii"), line[start + len(_VALUE) : end]


def read_object(body: bytes, hour: str) -> pa.RecordBatch:
    data = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
    partitions: list[int] = []
    offsets: list[int] = []
    times: list[str] = []
    values: list[str] = []
    for line in data.splitlines():
        if not line:
            continue
        partition, offset, event_time, value = split_envelope(line)
        partitions.append(partition)
        offsets.append(offset)
        times.append(event_time)
        values.append(value.decode("utf-8"))
    return pa.RecordBatch.from_arrays(
        [
            pa.array([hour] * len(offsets), pa.string()),
            pa.array(partitions, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(times, pa.string()),
            pa.array(values, pa.string()),
        ],
        schema=_ARROW_RECORDS,
    )


def s3_client() -> Any:
    """A client for the executor: the endpoint (moto locally) comes from ``AWS_ENDPOINT_URL``."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
        config=Config(retries={"mode": "standard", "max_attempts": 8}, max_pool_connections=16),
    )


def fetch_objects(bucket: str) -> Any:
    """The ``mapInArrow`` function: batches of (key, hour) rows in, record batches out."""

    def fetch(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        client = s3_client()
        for batch in batches:
            for key, hour in zip(batch.column("key").to_pylist(), batch.column("hour").to_pylist(), strict=True):
                body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
                yield read_object(body, hour)

    return fetch
