"""Executor-side reading of archive objects: boto3 fetches, bytes are split, Arrow batches out.

Spark's ``s3a`` connector needs Hadoop jars that no registry here serves; reading with boto3
inside ``mapInArrow`` tasks works the same against S3 on EMR Serverless and moto on a laptop, on
Spark 3.5 and 4. Each task gets a slice of the object list the ledger committed (never a prefix
listing), downloads each object, and splits every JSON Lines envelope without parsing it: the
archive renders envelopes from a fixed byte template (``tidemark.formats.jsonl``), so the value
is the bytes between ``,"value":`` and the last ``,"headers":[``. The values of an object are
then parsed in one call to Arrow's (C++) JSON reader and conformed to the value schema the driver
inferred from a sample object, so every task returns the same typed columns.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.json as pa_json

from tidemark.objects.keys import epoch_of_key

OBJECTS_SCHEMA = "key string, hour string"  # one row per object to read
ENVELOPE_FIELDS = [
    pa.field("hour", pa.string()),
    pa.field("epoch", pa.int32()),  # a reset topic repeats offsets: records differ by epoch too
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("event_time", pa.string()),
]
_ENVELOPE_NAMES = {field.name for field in ENVELOPE_FIELDS}
_HEAD = re.compile(
    rb'^\{"topic":"[A-Za-z0-9._-]*","partition":(\d+),"offset":(\d+),"timestamp":-?\d+,"event_time":"([^"]*)","key":'
)
SAMPLE_RECORDS = 5_000  # records per sample object the schema is inferred from
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


def split_object(body: bytes, limit: int | None = None) -> tuple[list[int], list[int], list[str], list[bytes]]:
    """The envelopes of one object (its first ``limit`` records, if given)."""
    data = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
    partitions: list[int] = []
    offsets: list[int] = []
    times: list[str] = []
    values: list[bytes] = []
    for line in data.splitlines()[:limit]:
        if not line:
            continue
        partition, offset, event_time, value = split_envelope(line)
        partitions.append(partition)
        offsets.append(offset)
        times.append(event_time)
        values.append(value)
    return partitions, offsets, times, values


def _python_type(values: list[Any]) -> pa.DataType:
    """The Arrow type for a field's values when Arrow's reader cannot decide (mixed types)."""
    kinds = {type(value) for value in values if value is not None}
    if kinds == {bool}:
        return pa.bool_()
    if kinds == {int}:
        return pa.int64()
    if kinds and kinds <= {int, float}:
        return pa.float64()
    return pa.string()  # strings, or a mix of anything: kept as text (JSON for non-strings)


def _python_column(values: list[Any], kind: pa.DataType) -> pa.Array:
    if pa.types.is_string(kind):
        values = [v if v is None or isinstance(v, str) else orjson.dumps(v).decode() for v in values]
    elif pa.types.is_floating(kind) or pa.types.is_integer(kind):
        values = [v if isinstance(v, int | float) and not isinstance(v, bool) else None for v in values]
    try:
        return pa.array(values, kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.nulls(len(values), kind)


def _parse_in_python(values: list[bytes]) -> pa.Table:
    """The slow path, for values whose fields change type from record to record."""
    rows = [orjson.loads(value) for value in values]
    names = list(dict.fromkeys(name for row in rows if isinstance(row, dict) for name in row))
    columns = {name: [row.get(name) if isinstance(row, dict) else None for row in rows] for name in names}
    return pa.table({name: _python_column(column, _python_type(column)) for name, column in columns.items()})


def parse_values(values: list[bytes]) -> pa.Table:
    """The values (JSON objects) as typed Arrow columns: parsed in C++ by Arrow's JSON reader,
    or, when a field's type varies between records, in Python (mixed fields become text)."""
    if not values:
        return pa.table({})
    data = b"\n".join(values)
    try:
        table = pa_json.read_json(io.BytesIO(data))
        stamps = [field.name for field in table.schema if pa.types.is_timestamp(field.type)]
        if stamps:  # keep ISO-8601 text as text (Arrow would make timestamps Spark cannot take)
            as_text = pa.schema([(name, pa.string()) for name in stamps])
            table = pa_json.read_json(io.BytesIO(data), parse_options=pa_json.ParseOptions(explicit_schema=as_text))
        return table
    except pa.ArrowInvalid:
        try:
            return _parse_in_python(values)
        except orjson.JSONDecodeError as exc:
            raise EnvelopeError(f"an archived value is not JSON: {exc}") from None


def _widen(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type both fit in: null gives way, int and float meet in double, otherwise text."""
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    numeric = (pa.types.is_integer, pa.types.is_floating)
    if any(check(a) for check in numeric) and any(check(b) for check in numeric):
        return pa.float64()
    return pa.string()


def value_schema(samples: Iterable[bytes]) -> pa.Schema:
    """One value schema for the run, unified over sample objects (the driver reads a few spread
    over the run's objects): a field takes the widest type it has anywhere, unseen-typed (all
    null) fields are text."""
    fields: dict[str, pa.DataType] = {}
    for sample in samples:
        for field in parse_values(split_object(sample, SAMPLE_RECORDS)[3]).schema:
            fields[field.name] = _widen(fields.get(field.name, pa.null()), field.type)
    return pa.schema([(name, pa.string() if pa.types.is_null(kind) else kind) for name, kind in fields.items()])


def records_schema(values: pa.Schema) -> pa.Schema:
    """What the reader returns: the envelope fields, then the value's fields."""
    return pa.schema([*ENVELOPE_FIELDS, *(field for field in values if field.name not in _ENVELOPE_NAMES)])


def _conform(table: pa.Table, fields: list[pa.Field], rows: int) -> list[pa.Array]:
    """Columns for ``fields`` from ``table``: cast when types differ (12 vs 12.5), nulls when the
    object lacks the field. A value that cannot take the run's type fails the task loudly (the
    hour stays dirty) rather than turning into nulls that would skew the aggregates."""
    columns = []
    for field in fields:
        if field.name not in table.column_names:
            columns.append(pa.nulls(rows, field.type))
            continue
        column = table.column(field.name).combine_chunks()
        if column.type == field.type:
            columns.append(column)
            continue
        try:
            columns.append(column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            if pa.types.is_string(field.type):
                columns.append(_python_column(column.to_pylist(), field.type))  # anything -> text
                continue
            raise EnvelopeError(
                f"field {field.name!r} is {column.type} here but {field.type} in the run: {exc}"
            ) from None
    return columns


def read_object(body: bytes, hour: str, values: pa.Schema, epoch: int = 0) -> pa.RecordBatch:
    partitions, offsets, times, raw_values = split_object(body)
    schema = records_schema(values)
    value_fields = [field for field in schema if field.name not in _ENVELOPE_NAMES]
    envelope = [
        pa.array([hour] * len(offsets), pa.string()),
        pa.array([epoch] * len(offsets), pa.int32()),
        pa.array(partitions, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(times, pa.string()),
    ]
    parsed = parse_values(raw_values)
    return pa.RecordBatch.from_arrays([*envelope, *_conform(parsed, value_fields, len(offsets))], schema=schema)


def s3_client() -> Any:
    """A client for the executor: the endpoint (moto locally) comes from ``AWS_ENDPOINT_URL``."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
        config=Config(retries={"mode": "standard", "max_attempts": 8}, max_pool_connections=16),
    )


def fetch_objects(bucket: str, values: pa.Schema) -> Any:
    """The ``mapInArrow`` function: batches of (key, hour) rows in, record batches out."""

    def fetch(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        client = s3_client()
        for batch in batches:
            for key, hour in zip(batch.column("key").to_pylist(), batch.column("hour").to_pylist(), strict=True):
                body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
                yield read_object(body, hour, values, epoch_of_key(key))

    return fetch
