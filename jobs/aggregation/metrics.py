"""What a run reports outside its record in the ledger: a CloudWatch metric per stream and one
log line per failed hour.

The job runs on EMR Serverless, where no Powertools EMF flush reaches CloudWatch metrics by
itself: the driver calls ``PutMetricData`` once per run (the job role may put metrics in the
``Tidemark`` namespace only). ``AggregationHoursFailed`` counts the hours the run left dirty
because they could not be read or aggregated (their reasons in the log lines and in the run's
record); the stack alarms on it per stream. The log lines go to the driver's stderr, which the
job run ships to the pipeline's CloudWatch log group.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

NAMESPACE = "Tidemark"
SERVICE = "tidemark-aggregation"
HOURS_FAILED = "AggregationHoursFailed"
HOURS_AGGREGATED = "AggregationHoursAggregated"
ITEMS_WRITTEN = "AggregationItemsWritten"


def metric_data(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``PutMetricData``'s ``MetricData`` for a run's summary (``RunReport.summary()``): zeros
    too, so a stream's alarm sees the runs that went well."""
    dimensions = [{"Name": "service", "Value": SERVICE}, {"Name": "stream", "Value": summary["stream"]}]
    figures = {
        HOURS_FAILED: len(summary["failed"]),
        HOURS_AGGREGATED: len(summary["cleared"]) + len(summary["still_dirty"]),
        ITEMS_WRITTEN: summary["items_written"],
    }
    return [
        {"MetricName": name, "Dimensions": dimensions, "Value": float(value), "Unit": "Count"}
        for name, value in figures.items()
    ]


def publish(summary: Mapping[str, Any], *, cloudwatch: Any) -> None:
    """Put the run's figures into CloudWatch (``Tidemark`` namespace, ``service``/``stream``)."""
    cloudwatch.put_metric_data(Namespace=NAMESPACE, MetricData=metric_data(summary))


def log_report(summary: Mapping[str, Any], *, out: TextIO | None = None) -> None:
    """One JSON line per failed hour, ``{"level":"ERROR","message":"aggregation hour failed; ...",
    "stream","hour","reason","run_id"}`` (the reason names the aggregation, the metric or object
    and Spark's error), and one per aggregation that named fields no record of the run has,
    ``{"level":"WARNING","message":"aggregation names fields no record has; read as null",
    "stream","aggregation","fields","run_id"}`` (a rare field, or a misspelt one)."""
    out = out or sys.stderr  # looked up at the call: a test (or the driver) may have replaced it
    for hour, reason in sorted(summary["failed"].items()):
        _line(out, "ERROR", FAILED_HOUR, summary, hour=hour, reason=reason)
    for aggregation, fields in sorted(summary.get("absent", {}).items()):
        _line(out, "WARNING", ABSENT_FIELDS, summary, aggregation=aggregation, fields=fields)


FAILED_HOUR = "aggregation hour failed; it stays dirty and is retried by the next run"
ABSENT_FIELDS = "aggregation names fields no record has; read as null"


def _line(out: TextIO, level: str, message: str, summary: Mapping[str, Any], **fields: Any) -> None:
    line = {"level": level, "message": message, "stream": summary["stream"], **fields, "run_id": summary["run_id"]}
    print(json.dumps(line), file=out, flush=True)
