"""The per-stream alarms nobody may miss: quarantined flushes, sustained flush errors, position
resets, and hours an aggregation run could not aggregate.

Each reads Tidemark's counters (namespace ``Tidemark``, dimensions ``service`` and ``stream``: the
functions' EMF metrics, the aggregation job's PutMetricData), fires above 0 and notifies the alarm
topic; the dashboard graphs the same series.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Capture, Match, Template

from jobs.aggregation import metrics as job_metrics
from stacks import observability
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import logical_id, synth_stack, with_changes
from tests.unit.test_stack_wiring import dashboard_widgets, render
from tidemark.config import TidemarkConfig

ALARM = "AWS::CloudWatch::Alarm"
SERVICES = ["tidemark-archiver", "tidemark-sweeper"]


@pytest.fixture(scope="module")
def synthesized(example_config: TidemarkConfig) -> tuple[TidemarkStack, Template]:
    return synth_stack(example_config, nag=False)


@pytest.fixture(scope="module")
def template(synthesized: tuple[TidemarkStack, Template]) -> Template:
    return synthesized[1]


@pytest.fixture(scope="module")
def topic(synthesized: tuple[TidemarkStack, Template]) -> dict[str, str]:
    return {"Ref": logical_id(synthesized[0].observability.topic)}


def stat(metric_name: str, service: str, stream: str = "orders") -> dict[str, Any]:
    """The ``MetricStat`` of one service's Tidemark counter, summed over the 5-minute period."""
    return {
        "Metric": {
            "Namespace": "Tidemark",
            "MetricName": metric_name,
            "Dimensions": [{"Name": "service", "Value": service}, {"Name": "stream", "Value": stream}],
        },
        "Period": 300,
        "Stat": "Sum",
    }


def summed_over_both_services(metrics: list[dict[str, Any]], metric_name: str, stream: str = "orders") -> None:
    """``metrics`` (an alarm's ``Metrics``) is one returned expression adding the metric of both
    services, each filled with 0 so that one missing series does not blank the sum."""
    (expression,) = [m for m in metrics if "Expression" in m]
    inputs = {m["Id"]: m for m in metrics if "MetricStat" in m}
    assert expression["ReturnData"] is True
    assert all(m["ReturnData"] is False for m in inputs.values())
    assert sorted((m["MetricStat"]["Metric"]["Dimensions"][0]["Value"]) for m in inputs.values()) == SERVICES
    for metric_id, metric in inputs.items():
        service = metric["MetricStat"]["Metric"]["Dimensions"][0]["Value"]
        assert metric["MetricStat"] == stat(metric_name, service, stream)
        assert f"FILL({metric_id}, 0)" in expression["Expression"]
    assert expression["Expression"].count("+") == 1


def test_a_quarantine_alarms_at_once_from_either_service(template: Template, topic: dict[str, str]) -> None:
    metrics = Capture()
    template.has_resource_properties(
        ALARM,
        {
            "AlarmDescription": Match.string_like_regexp(r"^orders: a flush was quarantined"),
            "Metrics": metrics,
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            "EvaluationPeriods": 1,
            "DatapointsToAlarm": 1,
            "TreatMissingData": "notBreaching",
            "AlarmActions": Match.array_with([topic]),
        },
    )
    summed_over_both_services(metrics.as_array(), "FlushesQuarantined")


def test_the_quarantine_alarm_tells_the_operator_to_replay_from_kafka(template: Template) -> None:
    (description,) = [
        a["Properties"]["AlarmDescription"]
        for a in template.find_resources(ALARM).values()
        if "quarantined" in a["Properties"]["AlarmDescription"]
    ]
    for words in ("Replay the quarantined offsets from Kafka", "retention", "CRITICAL log line", "ledger"):
        assert words in description


def test_flush_errors_alarm_only_when_sustained(template: Template, topic: dict[str, str]) -> None:
    metrics = Capture()
    template.has_resource_properties(
        ALARM,
        {
            "AlarmDescription": Match.string_like_regexp(r"^orders: flushes failed for 3 periods in a row"),
            "Metrics": metrics,
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            "EvaluationPeriods": 3,  # alarms.evaluation_periods of the example config
            "DatapointsToAlarm": 3,
            "TreatMissingData": "notBreaching",
            "AlarmActions": Match.array_with([topic]),
        },
    )
    summed_over_both_services(metrics.as_array(), "FlushErrors")


def test_a_position_reset_alarms_at_once(template: Template, topic: dict[str, str]) -> None:
    template.has_resource_properties(
        ALARM,
        {
            "Namespace": "Tidemark",
            "MetricName": "PositionResets",
            "Dimensions": [{"Name": "service", "Value": "tidemark-archiver"}, {"Name": "stream", "Value": "orders"}],
            "Statistic": "Sum",
            "Period": 300,
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            "EvaluationPeriods": 1,
            "AlarmDescription": Match.string_like_regexp(r"^orders: .*went backwards.*`tidemark epoch start`"),
            "AlarmActions": Match.array_with([topic]),
        },
    )


def test_each_stream_gets_the_three_alarms_and_flush_errors_follow_the_config(example_config: TidemarkConfig) -> None:
    first = json.loads(example_config.model_dump_json())["streams"][0]
    second = {
        **first,
        "name": "payments",
        "source": {**first["source"], "topic": "payments", "consumer_group_id": "archive-payments"},
        "aggregations": [],
    }
    alarms = {"emails": [], "offset_lag": 100_000, "evaluation_periods": 5}
    _, template = synth_stack(with_changes(example_config, streams=[first, second], alarms=alarms), nag=False)
    for stream in ("orders", "payments"):
        quarantines, errors = Capture(), Capture()
        template.has_resource_properties(
            ALARM,
            {
                "AlarmDescription": Match.string_like_regexp(rf"^{stream}: a flush was quarantined"),
                "Metrics": quarantines,
            },
        )
        summed_over_both_services(quarantines.as_array(), "FlushesQuarantined", stream)
        template.has_resource_properties(
            ALARM,
            {
                "AlarmDescription": Match.string_like_regexp(rf"^{stream}: flushes failed for 5 periods"),
                "EvaluationPeriods": 5,
                "DatapointsToAlarm": 5,
                "Metrics": errors,
            },
        )
        summed_over_both_services(errors.as_array(), "FlushErrors", stream)
        template.has_resource_properties(
            ALARM,
            {"MetricName": "PositionResets", "Dimensions": Match.array_with([{"Name": "stream", "Value": stream}])},
        )


def test_the_dashboard_graphs_the_three_sums(template: Template) -> None:
    widget = dashboard_widgets(template)["Quarantines, flush errors and position resets"]
    rows = widget["metrics"]
    expressions = [row[0]["expression"] for row in rows if isinstance(row[0], dict) and "expression" in row[0]]
    assert expressions == [
        "FILL(flushes_quarantined_archiver, 0) + FILL(flushes_quarantined_sweeper, 0)",
        "FILL(flush_errors_archiver, 0) + FILL(flush_errors_sweeper, 0)",
    ]
    plotted = {(row[1], row[3]) for row in rows if row[0] == "Tidemark"}
    assert {
        ("FlushesQuarantined", "tidemark-archiver"),
        ("FlushesQuarantined", "tidemark-sweeper"),
        ("FlushErrors", "tidemark-archiver"),
        ("FlushErrors", "tidemark-sweeper"),
        ("PositionResets", "tidemark-archiver"),
    } == plotted


def test_sweeper_function_errors_alarm_at_once_summed_over_every_step(
    synthesized: tuple[TidemarkStack, Template], topic: dict[str, str]
) -> None:
    stack, template = synthesized
    metrics = Capture()
    template.has_resource_properties(
        ALARM,
        {
            "AlarmDescription": Match.string_like_regexp(r"^a sweeper function raised"),
            "Metrics": metrics,
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            "EvaluationPeriods": 1,
            "TreatMissingData": "notBreaching",
            "AlarmActions": Match.array_with([topic]),
        },
    )
    (expression,) = [m for m in metrics.as_array() if "Expression" in m]
    inputs = [m for m in metrics.as_array() if "MetricStat" in m]
    functions = {logical_id(fn) for fn in stack.sweeper.functions}
    assert len(functions) == 4
    assert {m["MetricStat"]["Metric"]["Dimensions"][0]["Value"]["Ref"] for m in inputs} == functions
    assert all(m["MetricStat"]["Metric"]["MetricName"] == "Errors" for m in inputs)
    assert all(f"FILL({m['Id']}, 0)" in expression["Expression"] for m in inputs)


def test_a_failed_partition_sweep_fails_the_execution_the_sweeper_alarm_watches(
    synthesized: tuple[TidemarkStack, Template],
) -> None:
    """The state machine ends a run with a failed partition sweep in a Fail state (proven to run in
    test_sweeper_state_machine.py); this alarm is on that machine's ExecutionsFailed."""
    stack, template = synthesized
    definition = json.loads(
        "".join(
            part if isinstance(part, str) else "ARN"
            for part in template.find_resources("AWS::StepFunctions::StateMachine")[
                logical_id(stack.sweeper.state_machine)
            ]["Properties"]["DefinitionString"]["Fn::Join"][1]
        )
    )
    assert definition["States"]["PartitionSweepFailed"]["Type"] == "Fail"
    metrics = Capture()
    template.has_resource_properties(
        ALARM,
        {"AlarmDescription": Match.string_like_regexp(r"^a sweeper execution failed or timed out"), "Metrics": metrics},
    )
    watched = [m["MetricStat"]["Metric"] for m in metrics.as_array() if "MetricStat" in m]
    assert {metric["MetricName"] for metric in watched} >= {"ExecutionsFailed"}
    machine = {"Ref": logical_id(stack.sweeper.state_machine)}
    assert all(metric["Dimensions"][0]["Value"] == machine for metric in watched)


def freshness(template: Template, stream: str) -> dict[str, Any]:
    (alarm,) = [
        resource["Properties"]
        for resource in template.find_resources(ALARM).values()
        if resource["Properties"]["AlarmDescription"].startswith(f"{stream}: no object committed for ")
    ]
    return alarm


def test_msk_freshness_breaches_on_lag_without_commits_and_on_a_silent_mapping(
    synthesized: tuple[TidemarkStack, Template], topic: dict[str, str]
) -> None:
    stack, template = synthesized
    alarm = freshness(template, "orders")
    # max_age 15m + two 5-minute sweeper intervals: a stream with waiting records commits within it
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["Expression"] == (
        "IF(lag > 0 AND FILL(committed_archiver, 0) + FILL(committed_sweeper, 0) == 0, 1, 0)"
    )
    inputs = {m["Id"]: m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert {metric_id: stat["Period"] for metric_id, stat in inputs.items()} == dict.fromkeys(inputs, 1500)
    assert inputs["lag"]["Metric"]["MetricName"] == "OffsetLag" and inputs["lag"]["Stat"] == "Minimum"
    function = {"Ref": logical_id(stack.archiver.functions["orders"])}
    assert inputs["lag"]["Metric"]["Dimensions"] == [{"Name": "FunctionName", "Value": function}]
    assert inputs["committed_archiver"]["Metric"]["MetricName"] == "ObjectsCommitted"
    assert inputs["committed_sweeper"]["Metric"]["MetricName"] == "SweeperObjectsCommitted"
    assert (alarm["TreatMissingData"], alarm["EvaluationPeriods"], alarm["Threshold"]) == ("breaching", 1, 0)
    assert alarm["AlarmActions"] == [topic]
    assert "tidemark status" in alarm["AlarmDescription"]


def test_kinesis_freshness_breaches_on_old_records_without_commits_but_not_on_silence(
    example_config: TidemarkConfig,
) -> None:
    from tests.unit.test_stack_kinesis import clicks, with_streams

    _stack, template = synth_stack(with_streams(example_config, clicks()), nag=False)
    alarm = freshness(template, "clicks")
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["Expression"].startswith("IF(age > 900000 AND ")
    ages = [m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if m["Id"] == "age"]
    assert ages == ["IteratorAge"]
    assert alarm["TreatMissingData"] == "notBreaching"  # an idle Kinesis stream emits no IteratorAge


def test_each_dashboard_is_named_shows_alarm_status_and_is_an_output(
    synthesized: tuple[TidemarkStack, Template],
) -> None:
    stack, template = synthesized
    (dashboard,) = template.find_resources("AWS::CloudWatch::Dashboard").values()
    name = dashboard["Properties"]["DashboardName"]
    region = stack.region if not stack.region.startswith("${Token") else {"Ref": "AWS::Region"}
    if isinstance(region, str):
        assert name == f"{stack.stack_name}-{region}-orders"
    else:  # an environment-agnostic stack: the region is resolved at deploy time
        assert name == {"Fn::Join": ["", [f"{stack.stack_name}-", region, "-orders"]]}
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    assert '\\"type\\":\\"alarm\\"' in body  # the alarm-status widget
    for title in ("Alarms", "Ledger conflicts and hours waiting", "Quarantines, flush errors and position resets"):
        assert title in body
    alarms = stack.observability.alarms["orders"] + stack.observability.shared_alarms
    assert all(logical_id(alarm) in body for alarm in alarms)
    url = template.find_outputs("DashboardUrlOrders")["DashboardUrlOrders"]["Value"]
    assert "#dashboards:name=" in json.dumps(url) and "-orders" in json.dumps(url)


def test_every_alarm_is_named_after_the_stack_as_the_runbook_lists_it(
    synthesized: tuple[TidemarkStack, Template],
) -> None:
    stack, template = synthesized
    names = sorted(alarm["Properties"]["AlarmName"] for alarm in template.find_resources(ALARM).values())
    listed = [
        "AggregationFailures", "AggregationHoursFailed-orders", "ArchiverErrors-orders", "DeadLetters-orders",
        "EfsThroughput", "FlushErrors-orders",
        "Freshness-orders", "LagGrowing-orders", "PositionResets-orders", "Quarantines-orders",
        "ReconciliationFindings", "SweeperErrors", "SweeperFailures",
    ]  # fmt: skip
    assert names == sorted(f"{stack.stack_name}-{name}" for name in listed)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    runbook = readme[readme.index("### Runbook") :]
    for name in listed:
        assert f"`{name.replace('-orders', '-<stream>')}`" in runbook, name


def test_a_week_long_max_age_is_watched_over_the_seven_days_cloudwatch_allows(example_config: TidemarkConfig) -> None:
    stream = json.loads(example_config.model_dump_json())["streams"][0]
    stream["flush"] = {**stream["flush"], "max_age": "7d"}
    _, template = synth_stack(with_changes(example_config, streams=[stream]), nag=False)
    alarm = freshness(template, "orders")
    periods = {m["MetricStat"]["Period"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert periods == {7 * 24 * 3600} and alarm["EvaluationPeriods"] == 1


# -- aggregation: hours a run could not aggregate ------------------------------------------------


def test_the_stack_watches_the_metric_the_job_puts() -> None:
    """stacks does not import jobs (DESIGN's layering): the names are written twice, and must agree."""
    assert observability.NAMESPACE == job_metrics.NAMESPACE == "Tidemark"
    assert observability.AGGREGATION == job_metrics.SERVICE
    assert observability.HOURS_FAILED == job_metrics.HOURS_FAILED
    assert observability.HOURS_AGGREGATED == job_metrics.HOURS_AGGREGATED
    published = job_metrics.metric_data(
        {"stream": "orders", "failed": {"2026-11-21T08": "boom"}, "cleared": [], "still_dirty": [], "items_written": 0}
    )
    (failed,) = [datum for datum in published if datum["MetricName"] == observability.HOURS_FAILED]
    assert failed["Dimensions"] == [
        {"Name": "service", "Value": observability.AGGREGATION},
        {"Name": "stream", "Value": "orders"},
    ]


def hours_failed_alarms(template: Template) -> dict[str, dict[str, Any]]:
    """The AggregationHoursFailed alarms, by the stream their dimensions name."""
    found = {}
    for alarm in template.find_resources(ALARM).values():
        properties = alarm["Properties"]
        if properties.get("MetricName") == "AggregationHoursFailed":
            dimensions = {d["Name"]: d["Value"] for d in properties["Dimensions"]}
            found[dimensions["stream"]] = properties
    return found


def test_an_aggregated_stream_alarms_on_any_hour_its_runs_left_dirty(
    synthesized: tuple[TidemarkStack, Template], topic: dict[str, str]
) -> None:
    stack, template = synthesized
    alarm = hours_failed_alarms(template)["orders"]
    assert {key: alarm[key] for key in ("Namespace", "Dimensions", "Statistic", "Period")} == {
        "Namespace": "Tidemark",
        "Dimensions": [{"Name": "service", "Value": "tidemark-aggregation"}, {"Name": "stream", "Value": "orders"}],
        "Statistic": "Sum",
        "Period": 300,
    }
    # Sum > 0 of a count: one failed hour fires it; a period without runs (missing data) does not
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"], alarm["TreatMissingData"]) == (1, 1, "notBreaching")
    assert alarm["AlarmActions"] == [topic]
    assert alarm["AlarmName"] == f"{stack.stack_name}-AggregationHoursFailed-orders"
    description = alarm["AlarmDescription"]
    assert isinstance(description, str) and len(description) <= 1024  # CloudWatch's limit
    assert description.startswith("orders: an aggregation run left hours dirty")
    for words in (
        "ERROR log line",
        "log group /tidemark/Tidemark/aggregation",
        "log streams tidemark-aggregate/orders/",
        "RUNS#orders",
        "every run retries them",
    ):
        assert words in description, words
    assert stack.pipeline.log_group_name == "/tidemark/Tidemark/aggregation"


def stream_dashboard(template: Template, stream: str) -> dict[str, dict[str, Any]]:
    """The widgets of one stream's dashboard, by title."""
    (dashboard,) = [
        d["Properties"]
        for d in template.find_resources("AWS::CloudWatch::Dashboard").values()
        if render(d["Properties"]["DashboardName"]).endswith(f"-{stream}")
    ]
    body: dict[str, Any] = json.loads(render(dashboard["DashboardBody"]))
    return {widget["properties"]["title"]: widget["properties"] for widget in body["widgets"]}


def test_only_streams_with_aggregations_get_the_hours_failed_alarm(example_config: TidemarkConfig) -> None:
    first = json.loads(example_config.model_dump_json())["streams"][0]
    payments = {
        **first,
        "name": "payments",
        "source": {**first["source"], "topic": "payments", "consumer_group_id": "archive-payments"},
    }
    refunds = {
        **payments,
        "name": "refunds",
        "source": {**first["source"], "topic": "refunds", "consumer_group_id": "archive-refunds"},
        "aggregations": [],
    }
    _, template = synth_stack(with_changes(example_config, streams=[first, payments, refunds]), nag=False)
    alarms = hours_failed_alarms(template)
    assert sorted(alarms) == ["orders", "payments"]
    assert "tidemark-aggregate/payments/" in alarms["payments"]["AlarmDescription"]
    widgets = {
        stream: {
            tuple(row[:6])
            for row in stream_dashboard(template, stream)["Spark job outcomes"]["metrics"]
            if row[0] == "Tidemark"
        }
        for stream in ("payments", "refunds")
    }
    assert widgets["payments"] == {
        ("Tidemark", "AggregationHoursAggregated", "service", "tidemark-aggregation", "stream", "payments"),
        ("Tidemark", "AggregationHoursFailed", "service", "tidemark-aggregation", "stream", "payments"),
    }
    assert widgets["refunds"] == set()  # nothing aggregates it

    without = [{**stream, "aggregations": []} for stream in (first, payments)]
    _, template = synth_stack(with_changes(example_config, streams=without), nag=False)
    assert hours_failed_alarms(template) == {}


def test_the_dashboard_graphs_the_jobs_hours_with_its_outcomes(template: Template) -> None:
    rows = dashboard_widgets(template)["Spark job outcomes"]["metrics"]
    plotted = {(row[1], row[3], row[5], row[6]["label"]) for row in rows if row[0] == "Tidemark"}
    assert plotted == {
        ("AggregationHoursAggregated", "tidemark-aggregation", "orders", "hours aggregated"),
        ("AggregationHoursFailed", "tidemark-aggregation", "orders", "hours failed (left dirty)"),
    }
