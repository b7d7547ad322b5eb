"""jobs/aggregate.py: the thin main's argument handling."""

from __future__ import annotations

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


def test_the_archive_root_reaches_the_run(monkeypatch: pytest.MonkeyPatch, example_config: Any) -> None:
    """``--archive-root s3://<bucket>`` (what the deployed schedule passes) is handed to the run,
    which then reads Parquet, JSON Lines and CSV with Spark's readers from there."""
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

    class Report:
        def summary(self) -> dict[str, Any]:
            return {}

    def run(_spark: Any, stream: Any, **kwargs: Any) -> Report:
        seen.update(kwargs, stream=stream.name)
        return Report()

    monkeypatch.setattr(entry, "SparkSession", type("SparkSession", (), {"builder": Builder()}))
    monkeypatch.setattr(entry, "run_aggregation", run)
    monkeypatch.setattr(entry, "load_job_config", lambda _location: example_config)
    monkeypatch.setattr(entry, "DynamoDBLedger", lambda name: name)
    monkeypatch.setattr(entry, "AggregateSink", lambda name: name)
    for name, value in (("TIDEMARK_BUCKET", "b"), ("TIDEMARK_LEDGER_TABLE", "l"), (entry.ENV_AGGREGATES_TABLE, "a")):
        monkeypatch.setenv(name, value)
    entry.main(["--stream", "orders", "--archive-root", "s3://archive-bucket"])
    assert seen["archive_root"] == "s3://archive-bucket" and seen["bucket"] == "b" and seen["stopped"]
    assert seen["conf"] == {"spark.sql.caseSensitive": "true"}  # finding 12: the job's session tells Price from price
    entry.main(["--stream", "orders"])
    assert seen["archive_root"] is None
