"""jobs/aggregate.py: the thin main's argument handling."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobs.aggregate import hour_range, load_job_config
from jobs.aggregation.sink import aggregate_pk, group_key
from tidemark.exceptions import ConfigError


def test_hour_range_is_inclusive_and_crosses_days() -> None:
    assert hour_range("2026-11-21T22", "2026-11-22T01") == [
        "2026-11-21T22",
        "2026-11-21T23",
        "2026-11-22T00",
        "2026-11-22T01",
    ]
    assert hour_range("2026-11-21T07", "2026-11-21T07") == ["2026-11-21T07"]


def test_a_backwards_range_is_an_error() -> None:
    with pytest.raises(ConfigError, match="2026-11-21T06 is before 2026-11-21T07"):
        hour_range("2026-11-21T07", "2026-11-21T06")


def test_aggregate_item_keys() -> None:
    assert aggregate_pk("orders", "orders_by_product", "2026-11-21T07") == "AGG#orders#orders_by_product#2026-11-21T07"
    assert group_key({"product_id": "p-001", "region": "eu"}) == '{"product_id":"p-001","region":"eu"}'
    assert group_key({}) == "{}"
    assert group_key({"p": None}) != group_key({"p": "None"})  # no collisions
    assert group_key({"p": "a|b=c"}) != group_key({"p": "a", "b": "c"})


def test_numbers_dynamodb_cannot_hold_are_stored_as_text() -> None:
    from decimal import Decimal

    from jobs.aggregation.sink import _number

    assert _number(2.5) == Decimal("2.5") and _number(7) == 7 and _number(None) is None
    assert [_number(float("nan")), _number(float("inf")), _number(1e300)] == ["nan", "inf", "1e+300"]
    assert _number([1.5, {"x": 2.0}]) == [Decimal("1.5"), {"x": Decimal("2.0")}]


@pytest.mark.parametrize("location", ["s3://", "s3://bucket-only", "s3:///key-only"])
def test_a_config_address_without_bucket_or_key_is_refused(location: str) -> None:
    with pytest.raises(ConfigError, match="is not an s3://bucket/key address"):
        load_job_config(location)


@pytest.mark.parametrize("root", ["bucket", "hdfs://namenode/archive", "s3://", "file:relative/dir"])
def test_an_archive_root_spark_and_boto3_cannot_both_read_is_refused(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs.aggregate import main

    with pytest.raises(SystemExit) as exit_:
        main(["--stream", "orders", "--archive-root", root])
    assert exit_.value.code == 2
    assert "--archive-root" in capsys.readouterr().err


def test_the_archive_root_reaches_the_run(
    monkeypatch: pytest.MonkeyPatch, example_config: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--archive-root s3://<bucket>`` (what the deployed schedule passes) is handed to the run,
    which then reads Parquet, JSON Lines and CSV with Spark's readers from there. After the run
    the driver prints its summary, a line per failed hour and per aggregation naming absent
    fields, and puts the run's figures into CloudWatch."""
    import jobs.aggregate as entry

    seen: dict[str, Any] = {}

    class Session:
        def stop(self) -> None:
            seen["stopped"] = True

    class Builder:
        def appName(self, _name: str) -> Builder:
            return self

        def config(self, *, map: dict[str, Any]) -> Builder:
            seen["conf"] = map
            return self

        def getOrCreate(self) -> Session:
            return Session()

    summary = {
        "run_id": "r-1",
        "stream": "orders",
        "failed": {"2026-11-21T09": "aggregation 'a', metric m = sum(flag): [DATATYPE_MISMATCH...]"},
        "absent": {"a": ["refund"]},
        "cleared": ["2026-11-21T08"],
        "still_dirty": [],
        "items_written": 4,
    }

    class Report:
        def summary(self) -> dict[str, Any]:
            return summary

    class CloudWatch:
        def put_metric_data(self, **request: Any) -> None:
            seen.setdefault("metrics", []).append(request)

    def run(_spark: Any, stream: Any, **kwargs: Any) -> Report:
        seen.update(kwargs, stream=stream.name)
        return Report()

    monkeypatch.setattr(entry, "SparkSession", type("SparkSession", (), {"builder": Builder()}))
    monkeypatch.setattr(entry, "run_aggregation", run)
    monkeypatch.setattr(entry, "load_job_config", lambda _location: example_config)
    monkeypatch.setattr(entry, "DynamoDBLedger", lambda name: name)
    monkeypatch.setattr(entry, "AggregateSink", lambda name: name)
    monkeypatch.setattr(entry, "cloudwatch_client", CloudWatch)
    for name, value in (("TIDEMARK_BUCKET", "b"), ("TIDEMARK_LEDGER_TABLE", "l"), (entry.ENV_AGGREGATES_TABLE, "a")):
        monkeypatch.setenv(name, value)
    entry.main(["--stream", "orders", "--archive-root", "s3://archive-bucket"])
    assert seen["archive_root"] == "s3://archive-bucket" and seen["bucket"] == "b" and seen["stopped"]
    # finding 12: the job's session tells Price from price; ANSI off, sums guarded instead
    assert seen["conf"] == {"spark.sql.caseSensitive": "true", "spark.sql.ansi.enabled": "false"}
    out, err = capsys.readouterr()
    assert json.loads(out) == summary
    lines = [json.loads(line) for line in err.splitlines()]
    assert [(line["level"], line.get("hour"), line.get("fields")) for line in lines] == [
        ("ERROR", "2026-11-21T09", None),
        ("WARNING", None, ["refund"]),
    ]
    assert lines[0]["reason"] == summary["failed"]["2026-11-21T09"] and lines[0]["run_id"] == "r-1"
    (request,) = seen["metrics"]
    assert request["Namespace"] == "Tidemark"
    figures = {datum["MetricName"]: datum["Value"] for datum in request["MetricData"]}
    assert figures == {"AggregationHoursFailed": 1.0, "AggregationHoursAggregated": 1.0, "AggregationItemsWritten": 4.0}
    entry.main(["--stream", "orders"])
    assert seen["archive_root"] is None


@pytest.mark.parametrize(
    ("hour", "zone", "offsets"),
    [
        ("2026-11-21T08", "UTC", ["+00:00"]),
        ("2026-11-01T01", "America/New_York", ["-04:00", "-05:00"]),  # clocks go back: two real hours
        ("2026-11-01T02", "America/New_York", ["-05:00"]),
        ("2026-03-08T03", "America/New_York", ["-04:00"]),
        ("2026-11-21T08", "Asia/Kolkata", ["+05:30"]),
        ("2026-11-21T08", "Asia/Kathmandu", ["+05:45"]),
        ("2026-04-05T01", "Australia/Lord_Howe", ["+11:00", "+10:30"]),  # a half-hour change
        ("2026-10-04T02", "Australia/Lord_Howe", ["+11:00"]),  # 02:00-02:29 skipped: only 02:30 on
    ],
)
def test_an_items_utc_offsets_are_those_of_the_real_hours_its_label_stands_for(hour, zone, offsets):
    from jobs.aggregation.sink import utc_offsets

    assert utc_offsets(hour, zone) == offsets
