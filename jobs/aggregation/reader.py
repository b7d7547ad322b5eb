"""Executor-side reading of archive objects: fetched with boto3, read with Arrow, batches out.

Spark's ``s3a`` connector needs Hadoop jars that no registry here serves; reading with boto3
inside ``mapInArrow`` tasks works the same against S3 on EMR Serverless and moto on a laptop, on
Spark 3.5 and 4. Each task gets a slice of the object list the ledger committed (never a prefix
listing), downloads each object and reads it with the reader of its format
(:mod:`jobs.aggregation.formats`: every format, told by the key's extension). The values of an
object are conformed to its hour's value schema, unified on the driver from the schemas of every
object of that hour (:func:`infer_object_schemas`, a first pass in tasks); hours of one schema are
read together, so every task of a read returns the same typed columns:
``hour, epoch, partition, offset, event_time`` and the value's fields
(:func:`records_schema`).

A run reads one stream, so one source kind, which decides the types of the record's identity
(:func:`envelope_fields`): a Kafka record is ``partition`` int32 and ``offset`` int64; a
Kinesis record is ``partition`` string (its shard id, ``shardId-000000000007``) and ``offset``
string (its sequence number's decimal digits, up to 129 of them: never a number, which no
Spark type holds beyond 38 digits). Either way a record is ``(epoch, partition, offset)``;
sequence numbers compare as text there (order them numerically by ``length(offset), offset``).

With ``--archive-root`` the job reads Parquet, JSON Lines and CSV with Spark's own readers
instead (:mod:`jobs.aggregation.native`); the rest still comes through here, from that root.
(A Kinesis object's name, with two 129-digit positions, is longer than the 255 bytes a local
file system allows in a name: a ``file://`` root cannot hold a Kinesis archive under its keys;
S3 keys may be 1,024 bytes.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa

from jobs.aggregation.formats import position_types, read_envelopes, split_envelope
from jobs.aggregation.values import EnvelopeError, conform, parse_values, unify
from tidemark.objects.keys import epoch_of_key
from tidemark.sources import KAFKA

__all__ = [
    "ENVELOPE_FIELDS",
    "OBJECTS_SCHEMA",
    "EnvelopeError",
    "ObjectStore",
    "envelope_fields",
    "fetch_objects",
    "infer_object_schemas",
    "parse_values",
    "read_object",
    "records_schema",
    "s3_client",
    "split_envelope",
    "value_schema",
]

OBJECTS_SCHEMA = "key string, hour string"  # one row per object to read


def envelope_fields(source: str = KAFKA) -> list[pa.Field]:
    """The record's envelope columns for a stream of ``source`` kind (``kafka``/``msk`` or
    ``kinesis``): ``partition``/``offset`` int32/int64 for Kafka, string/string (shard id,
    sequence number digits) for Kinesis."""
    partition, offset = position_types(source)
    return [
        pa.field("hour", pa.string()),
        pa.field("epoch", pa.int32()),  # a reset topic repeats offsets: records differ by epoch too
        pa.field("partition", partition),
        pa.field("offset", offset),
        pa.field("event_time", pa.string()),
    ]


ENVELOPE_FIELDS = envelope_fields(KAFKA)  # Kafka's
ENVELOPE_NAMES = frozenset(field.name for field in ENVELOPE_FIELDS)  # every source kind's
SAMPLE_RECORDS = 5_000  # records per object :func:`value_schema` reads (a driver-side helper)


def value_schema(samples: Iterable[tuple[str, bytes]], *, source: str = KAFKA) -> pa.Schema:
    """One value schema unified over a few objects read on the driver (the job itself infers
    from every object, :func:`infer_object_schemas`) (``(key, body)``: the key
    tells the format; the driver reads a few spread over the run's objects) of a ``source``
    kind stream: a field takes the widest type it has anywhere, unseen-typed (all null) fields
    are text."""
    return unify(read_envelopes(key, body, SAMPLE_RECORDS, source=source).values for key, body in samples)


def records_schema(values: pa.Schema, source: str = KAFKA) -> pa.Schema:
    """What the reader returns: the envelope fields of the source kind, then the value's fields."""
    return pa.schema([*envelope_fields(source), *(field for field in values if field.name not in ENVELOPE_NAMES)])


def read_object(key: str, body: bytes, hour: str, values: pa.Schema, *, source: str = KAFKA) -> pa.RecordBatch:
    """The records of the object stored under ``key`` (a ``source`` kind stream's) as one batch
    of :func:`records_schema`."""
    envelopes = read_envelopes(key, body, source=source, run=values)
    rows = envelopes.rows
    schema = records_schema(values, source)
    value_fields = [field for field in schema if field.name not in ENVELOPE_NAMES]
    envelope = [
        pa.repeat(pa.scalar(hour, pa.string()), rows),
        pa.repeat(pa.scalar(epoch_of_key(key), pa.int32()), rows),
        envelopes.partition,
        envelopes.offset,
        envelopes.event_time,
    ]
    return pa.RecordBatch.from_arrays([*envelope, *conform(envelopes.values, value_fields, rows)], schema=schema)


def s3_client() -> Any:
    """A client for the executor: the endpoint (moto locally) comes from ``AWS_ENDPOINT_URL``."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
        config=Config(retries={"mode": "standard", "max_attempts": 8}, max_pool_connections=16),
    )


S3_SCHEMES = ("s3", "s3a", "s3n")


class ObjectStore:
    """Where the archive's objects are read from, by root URI: ``s3://bucket[/prefix]`` (boto3;
    ``s3a``/``s3n`` alike) or ``file:///dir`` (local disk: tests, a laptop). An object's path is
    the root, ``/`` and its key."""

    def __init__(self, root: str) -> None:
        parts = urlsplit(root)
        if parts.scheme in S3_SCHEMES and parts.netloc:
            self.bucket: str | None = parts.netloc
            self.prefix = parts.path.strip("/")
        elif parts.scheme == "file" and parts.path.startswith("/"):
            self.bucket = None
            self.prefix = parts.path.rstrip("/")
        else:
            raise ValueError(f"archive root {root!r} is neither s3://bucket[/prefix] nor file:///directory")
        self.root = root.rstrip("/")
        self._client: Any = None

    @classmethod
    def of_bucket(cls, bucket: str) -> ObjectStore:
        return cls(f"s3://{bucket}")

    def read(self, key: str) -> bytes:
        if self.bucket is None:
            return Path(self.prefix, key).read_bytes()
        if self._client is None:
            self._client = s3_client()
        name = f"{self.prefix}/{key}" if self.prefix else key
        body: bytes = self._client.get_object(Bucket=self.bucket, Key=name)["Body"].read()
        return body


SCHEMAS_SCHEMA = "key string, hour string, schema binary, error string"  # one row per object read


def infer_object_schemas(root: str, source: str = KAFKA) -> Any:
    """The ``mapInArrow`` function of the schema pass: batches of (key, hour) rows in, one row
    per object out, with its value schema (Arrow IPC) or, for an object that cannot be read
    (:class:`EnvelopeError`), why: that object's hour fails, not the run."""

    def infer(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        store = ObjectStore(root)
        for batch in batches:
            keys, hours = batch.column("key").to_pylist(), batch.column("hour").to_pylist()
            schemas: list[bytes | None] = []
            errors: list[str | None] = []
            for key in keys:
                try:
                    values = read_envelopes(key, store.read(key), source=source).values
                except EnvelopeError as exc:
                    schemas.append(None)
                    errors.append(str(exc))
                    continue
                schemas.append(values.schema.serialize().to_pybytes())
                errors.append(None)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(keys, pa.string()),
                    pa.array(hours, pa.string()),
                    pa.array(schemas, pa.binary()),
                    pa.array(errors, pa.string()),
                ],
                names=["key", "hour", "schema", "error"],
            )

    return infer


def fetch_objects(root: str, values: pa.Schema, source: str = KAFKA) -> Any:
    """The ``mapInArrow`` function: batches of (key, hour) rows in, record batches out, every
    object (a ``source`` kind stream's) read from the archive ``root`` (``s3://bucket`` unless
    the job was given another)."""

    def fetch(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        store = ObjectStore(root)
        for batch in batches:
            for key, hour in zip(batch.column("key").to_pylist(), batch.column("hour").to_pylist(), strict=True):
                yield read_object(key, store.read(key), hour, values, source=source)

    return fetch
