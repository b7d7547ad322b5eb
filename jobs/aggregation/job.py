"""One aggregation run: plan from the ledger, read, dedupe, aggregate, write, record.

The run reads the hour marks first and clears each hour (``aggregated_commits := commits``)
only if ``commits`` is still what it read: an object committed while the job ran leaves its hour
dirty, and the next run recomputes the hour whole -- full-value overwrites make that safe. A
backfill (``hours``) of clean hours marks them dirty before it writes anything, so a backfill that
dies halfway (some items under a new metric definition, some under the old) is redone by the next
scheduled run rather than left mixed.

Each hour's values are typed by that hour's own objects (``infer_value_schemas``), and hours of
one value schema are read and aggregated together -- usually all of them, in one read -- so an
hour's items are the same whichever other hours share the run. The job's queries run with
``jobs.aggregation.session.JOB_CONF`` (case-sensitive names: ``price`` and ``Price`` are two fields).

The stream's source kind (``stream.source.shape.kind``) says what its records' identity is:
Kafka's ``partition``/``offset`` numbers, or a Kinesis shard id and sequence number, both
strings in the records (``jobs.aggregation.reader.envelope_fields``).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from jobs.aggregation.reader import ObjectStore
from jobs.aggregation.session import job_conf
from jobs.aggregation.sink import AggregateSink
from jobs.aggregation.transforms import (
    aggregate,
    dedupe,
    duplicate_count,
    infer_value_schemas,
    read_records,
    refuse_shadowed_fields,
)
from tidemark.config.model import StreamConfig
from tidemark.ledger.base import Ledger
from tidemark.ledger.model import HourMark


@dataclass
class RunReport:
    run_id: str
    stream: str
    hours: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)
    records: int = 0
    duplicates: int = 0
    items_written: int = 0
    cleared: list[str] = field(default_factory=list)  # hours no longer dirty
    still_dirty: list[str] = field(default_factory=list)  # got new objects while the run ran
    failed: dict[str, str] = field(default_factory=dict)  # hours left dirty: an object cannot be read
    seconds: dict[str, float] = field(default_factory=dict)  # read, schema, aggregate, write
    readers: dict[str, int] = field(default_factory=dict)  # objects per read path (arrow, spark-parquet...)

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "stream": self.stream,
            "hours": self.hours,
            "objects": len(self.objects),
            "object_keys": self.objects,
            "records": self.records,
            "duplicates": self.duplicates,
            "items_written": self.items_written,
            "cleared": self.cleared,
            "still_dirty": self.still_dirty,
            "failed": self.failed,
            "seconds": {phase: round(value, 2) for phase, value in self.seconds.items()},
            "readers": self.readers,
        }


def plan(ledger: Ledger, stream: str, hours: list[str] | None) -> list[HourMark]:
    """The dirty hours (default), or the given hours that have anything committed (backfill)."""
    marks = ledger.hour_marks(stream)
    if hours is None:
        return [mark for mark in marks if mark.dirty]
    wanted = set(hours)
    return [mark for mark in marks if mark.hour in wanted]


def _aggregate_hours(
    spark: SparkSession,
    stream: StreamConfig,
    objects: list[tuple[str, str]],
    values: pa.Schema,
    report: RunReport,
    results: dict[str, dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]],
    *,
    root: str,
    tasks: int,
    native: bool,
    source: str,
) -> None:
    """Read the objects of hours that share the value schema ``values``, dedupe them and add
    each aggregation's rows to ``results`` (aggregation -> hour -> ``(group, metrics)``)."""
    clock = time.monotonic()
    read = read_records(spark, objects, root, tasks, values, native=native, source=source)
    for reader, count in read.readers.items():
        report.readers[reader] = report.readers.get(reader, 0) + count
    records = read.frame.cache()
    total = records.count()
    duplicates = duplicate_count(records)
    unique = dedupe(records) if duplicates else records
    report.duplicates += duplicates
    report.records += total - duplicates
    report.seconds["read"] = report.seconds.get("read", 0.0) + time.monotonic() - clock
    clock = time.monotonic()
    for aggregation in stream.aggregations:
        by_hour = results[aggregation.name]
        for row in aggregate(unique, aggregation).collect():
            fields = row.asDict()
            group = {column: fields[column] for column in aggregation.group_by}
            metrics = {name: fields[name] for name in aggregation.metrics}
            by_hour.setdefault(fields["hour"], []).append((group, metrics))
    report.seconds["aggregate"] = report.seconds.get("aggregate", 0.0) + time.monotonic() - clock
    records.unpersist()


def run_aggregation(
    spark: SparkSession,
    stream: StreamConfig,
    *,
    ledger: Ledger,
    bucket: str,
    sink: AggregateSink,
    hours: list[str] | None = None,
    tasks: int = 8,
    archive_root: str | None = None,
) -> RunReport:
    """Aggregate the dirty hours (or ``hours``) of ``stream``. Objects are read from
    ``s3://<bucket>`` with boto3 and Arrow, or, given ``archive_root`` (``s3://bucket`` on EMR,
    ``file:///dir`` locally), Parquet, JSON Lines and CSV with Spark's own readers from there
    and the other formats with Arrow from there."""
    report = RunReport(
        run_id=f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}", stream=stream.name
    )
    marks = plan(ledger, stream.name, hours)
    report.hours = [mark.hour for mark in marks]
    for mark in marks:
        if not mark.dirty:  # a backfill of clean hours: dirty until this run records them aggregated
            ledger.mark_dirty(mark)
    committed = [
        item for mark in marks for item in ledger.committed_objects(stream.name, mark.hour) if item.kind == "raw"
    ]
    objects = [(item.key, item.hour) for item in committed]
    report.objects = sorted(key for key, _hour in objects)
    with job_conf(spark):  # the job's Spark settings (case-sensitive names) for its queries
        if objects:
            clock = time.monotonic()
            store = ObjectStore(archive_root) if archive_root else ObjectStore.of_bucket(bucket)
            source = stream.source.shape.kind
            schemas = infer_value_schemas(spark, objects, store.root, tasks, source=source)
            report.failed = schemas.failed
            refuse_shadowed_fields(schemas.run, stream.aggregations)
            objects = [(key, hour) for key, hour in objects if hour not in report.failed]
            report.seconds["schema"] = time.monotonic() - clock
        if objects:
            results: dict[str, dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]] = {
                aggregation.name: {hour: [] for hour in report.hours if hour not in report.failed}
                for aggregation in stream.aggregations
            }
            for values, group in schemas.groups():  # hours typed alike are read together (usually all)
                in_group = set(group)
                _aggregate_hours(
                    spark,
                    stream,
                    [(key, hour) for key, hour in objects if hour in in_group],
                    values,
                    report,
                    results,
                    root=store.root,
                    tasks=tasks,
                    native=archive_root is not None,
                    source=source,
                )
            clock = time.monotonic()
            for aggregation in stream.aggregations:
                for hour, hour_rows in results[aggregation.name].items():
                    report.items_written += sink.replace_hour(
                        stream.name, aggregation.name, hour, hour_rows, report.run_id
                    )
            report.seconds["write"] = time.monotonic() - clock
    for mark in marks:
        if mark.hour in report.failed:
            continue  # stays dirty: its failure is in the run's record
        (report.cleared if ledger.record_aggregated(mark) else report.still_dirty).append(mark.hour)
    if marks:
        ledger.record_run(stream.name, report.run_id, int(time.time() * 1000), report.summary())
    return report
