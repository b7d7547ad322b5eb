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
    AggregationError,
    aggregate,
    dedupe,
    duplicate_count,
    infer_value_schemas,
    one_line,
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
    failed: dict[str, str] = field(default_factory=dict)  # hours left dirty, and why (retried next run)
    absent: dict[str, list[str]] = field(default_factory=dict)  # aggregation -> fields no record has (null)
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
            "absent": self.absent,
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


Rows = dict[str, dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]]  # aggregation -> hour -> (group, metrics)


@dataclass
class _Aggregated:
    """What one read of some hours found: only merged into the run's report once it all worked."""

    rows: Rows
    records: int
    duplicates: int
    readers: dict[str, int]
    absent: dict[str, list[str]]  # aggregation -> fields no record of the run has (read as null)
    seconds: dict[str, float]


def _aggregate_hours(
    spark: SparkSession,
    stream: StreamConfig,
    objects: list[tuple[str, str]],
    values: pa.Schema,
    *,
    root: str,
    tasks: int,
    native: bool,
    source: str,
) -> _Aggregated:
    """Read the objects of hours that share the value schema ``values``, dedupe them and
    compute each aggregation's rows. Every aggregation is analysed before anything is read, so
    one these hours' types cannot support fails fast (:class:`AggregationError`)."""
    clock = time.monotonic()
    read = read_records(spark, objects, root, tasks, values, native=native, source=source)
    records = read.frame.cache()
    try:
        unique = records
        planned = {aggregation.name: aggregate(unique, aggregation) for aggregation in stream.aggregations}
        total = records.count()
        duplicates = duplicate_count(records)
        if duplicates:
            unique = dedupe(records)
            planned = {aggregation.name: aggregate(unique, aggregation) for aggregation in stream.aggregations}
        seconds = {"read": time.monotonic() - clock}
        clock = time.monotonic()
        rows: Rows = {}
        for aggregation in stream.aggregations:
            by_hour = rows.setdefault(aggregation.name, {})
            for row in planned[aggregation.name].frame.collect():
                fields = row.asDict()
                group = {column: fields[column] for column in aggregation.group_by}
                metrics = {name: fields[name] for name in aggregation.metrics}
                by_hour.setdefault(fields["hour"], []).append((group, metrics))
        seconds["aggregate"] = time.monotonic() - clock
    finally:
        records.unpersist()
    absent = {name: result.absent for name, result in planned.items() if result.absent}
    return _Aggregated(rows, total - duplicates, duplicates, read.readers, absent, seconds)


def _aggregate_group(
    spark: SparkSession,
    stream: StreamConfig,
    objects: list[tuple[str, str]],
    values: pa.Schema,
    hours: list[str],
    report: RunReport,
    results: Rows,
    **read: Any,
) -> None:
    """Aggregate ``hours`` (of one value schema) into ``results``, or record why they failed in
    ``report.failed``: an aggregation their types cannot support fails them all (each alone
    would fail alike); any other failure (a value Spark cannot compute with, an object that
    cannot be read, an overflowing sum) is narrowed down by halving the hours, so it fails
    only the hours it is in, and the others are aggregated."""
    try:
        found = _aggregate_hours(spark, stream, objects, values, **read)
    except AggregationError as exc:
        for hour in hours:
            report.failed[hour] = str(exc)
        return
    except Exception as exc:  # noqa: BLE001 -- any failure fails its hours, never the run
        if len(hours) == 1:
            report.failed[hours[0]] = one_line(exc)
            return
        half = len(hours) // 2
        for part in (hours[:half], hours[half:]):
            wanted = set(part)
            part_objects = [(key, hour) for key, hour in objects if hour in wanted]
            _aggregate_group(spark, stream, part_objects, values, part, report, results, **read)
        return
    for name, by_hour in found.rows.items():
        for hour, hour_rows in by_hour.items():
            results[name].setdefault(hour, []).extend(hour_rows)
    for reader, count in found.readers.items():
        report.readers[reader] = report.readers.get(reader, 0) + count
    for name, paths in found.absent.items():
        known = report.absent.setdefault(name, [])
        known.extend(path for path in paths if path not in known)
    report.records += found.records
    report.duplicates += found.duplicates
    for phase, seconds in found.seconds.items():
        report.seconds[phase] = report.seconds.get(phase, 0.0) + seconds


def _write_hours(stream: StreamConfig, sink: AggregateSink, results: Rows, report: RunReport) -> None:
    """Replace each aggregated hour's items (an hour without rows -- every record gone -- gets
    none). A write that fails fails its hour (left dirty, rewritten whole by the next run)."""
    for hour in report.hours:
        if hour in report.failed:
            continue
        for aggregation in stream.aggregations:
            try:
                report.items_written += sink.replace_hour(
                    stream.name,
                    aggregation.name,
                    hour,
                    results[aggregation.name].get(hour, []),
                    report.run_id,
                    zone=stream.event_time.timezone,
                )
            except Exception as exc:  # noqa: BLE001 -- one hour's write never fails the others
                report.failed[hour] = f"writing aggregation {aggregation.name!r}: {one_line(exc)}"
                break


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
            results: Rows = {aggregation.name: {} for aggregation in stream.aggregations}
            for values, group in schemas.groups():  # hours typed alike are read together (usually all)
                in_group = set(group)
                _aggregate_group(
                    spark,
                    stream,
                    [(key, hour) for key, hour in objects if hour in in_group],
                    values,
                    group,
                    report,
                    results,
                    root=store.root,
                    tasks=tasks,
                    native=archive_root is not None,
                    source=source,
                )
            clock = time.monotonic()
            _write_hours(stream, sink, results, report)
            report.seconds["write"] = time.monotonic() - clock
    for mark in marks:
        if mark.hour in report.failed:
            continue  # stays dirty: its failure is in the run's record
        (report.cleared if ledger.record_aggregated(mark) else report.still_dirty).append(mark.hour)
    if marks:
        ledger.record_run(stream.name, report.run_id, int(time.time() * 1000), report.summary())
    return report
