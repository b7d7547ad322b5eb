"""Kinesis sources: one mapping per Kinesis stream on its archiver, read directly or through an
enhanced fan-out consumer, with grants on that stream only, an iterator-age lag alarm and
dashboard widgets -- next to an MSK stream that stays exactly as it was.

Two configurations, each an MSK stream (the example's ``orders``) and a Kinesis stream: ``clicks``
reads the stream itself (shared throughput), ``views`` an EFO consumer from a timestamp. Three
streams would not fit Lambda's 4 KB environment (the stack refuses them).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_cdk import App
from aws_cdk.assertions import Match, Template

from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import TEST_ENV, cdk_context, logical_id, synth_stack, with_changes
from tests.unit.test_stack_nag import findings, nagged
from tests.unit.test_stack_wiring import DASHBOARD_WIDGETS, listed, render
from tidemark.config import TidemarkConfig
from tidemark.exceptions import ConfigError

ESM = "AWS::Lambda::EventSourceMapping"
CONSUMER = "AWS::Kinesis::StreamConsumer"
ALARM = "AWS::CloudWatch::Alarm"
CLICKS_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/clickstream"
VIEWS_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/page-views"
VIEWS_FROM = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
STREAM_ACTIONS = {
    "kinesis:DescribeStream",
    "kinesis:DescribeStreamSummary",
    "kinesis:GetRecords",
    "kinesis:GetShardIterator",
    "kinesis:ListShards",
}
CONSUMER_ACTIONS = {"kinesis:DescribeStreamConsumer", "kinesis:SubscribeToShard"}


def kinesis_stream(name: str, **source: Any) -> dict[str, Any]:
    return {"name": name, "source": {"kind": "kinesis", **source}}


def with_streams(config: TidemarkConfig, *extra: dict[str, Any], msk: bool = True) -> TidemarkConfig:
    streams = json.loads(config.model_dump_json())["streams"] if msk else []
    return with_changes(config, streams=[*streams, *extra])


def clicks(**source: Any) -> dict[str, Any]:
    settings = {"stream_arn": CLICKS_ARN, "batch_size": 500, "batching_window": "2s", "starting_position": "LATEST"}
    return kinesis_stream("clicks", **{**settings, **source})


def views(timestamp: str = "2026-01-02T03:04:05Z") -> dict[str, Any]:
    return kinesis_stream(
        "views",
        stream_arn=VIEWS_ARN,
        consumer="efo",
        starting_position="AT_TIMESTAMP",
        starting_position_timestamp=timestamp,
    )


@pytest.fixture(scope="module")
def shared_config(example_config: TidemarkConfig) -> TidemarkConfig:
    return with_streams(example_config, clicks())


@pytest.fixture(scope="module")
def efo_config(example_config: TidemarkConfig) -> TidemarkConfig:
    return with_streams(example_config, views())


@pytest.fixture(scope="module")
def shared(shared_config: TidemarkConfig) -> tuple[TidemarkStack, Template]:
    return synth_stack(shared_config, nag=False)


@pytest.fixture(scope="module")
def efo(efo_config: TidemarkConfig) -> tuple[TidemarkStack, Template]:
    return synth_stack(efo_config, nag=False)


def mappings(template: Template) -> dict[str, dict[str, Any]]:
    return {lid: r["Properties"] for lid, r in template.find_resources(ESM).items()}


def mapping_of(stack: TidemarkStack, template: Template, stream: str) -> dict[str, Any]:
    function = {"Ref": logical_id(stack.archiver.functions[stream])}
    (found,) = [props for props in mappings(template).values() if props["FunctionName"] == function]
    return found


def role_statements(stack: TidemarkStack, template: Template, stream: str) -> list[dict[str, Any]]:
    role = logical_id(stack.archiver.functions[stream].role)  # type: ignore[arg-type]
    return [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def kinesis_statements(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in statements if any(a.startswith("kinesis:") for a in listed(s["Action"]))]


def consumer_arn(stack: TidemarkStack, stream: str) -> dict[str, Any]:
    consumer = stack.source.kinesis[stream].consumer
    assert consumer is not None
    return {"Fn::GetAtt": [logical_id(consumer), "ConsumerARN"]}


# --- mappings ----------------------------------------------------------------------------------


def test_one_mapping_per_stream_and_the_msk_one_unchanged(
    shared: tuple[TidemarkStack, Template], example_config: TidemarkConfig
) -> None:
    stack, template = shared
    template.resource_count_is(ESM, 2)
    msk = mapping_of(stack, template, "orders")
    assert msk["EventSourceArn"] == example_config.streams[0].source.cluster_arn
    assert msk["Topics"] == ["orders"]
    assert "MetricsConfig" not in msk and "DestinationConfig" not in msk  # on-demand, unbounded retries
    assert "MaximumRetryAttempts" not in msk and "ParallelizationFactor" not in msk


def test_kinesis_mapping_reads_the_stream_whole_batches_in_order_until_they_succeed(
    shared: tuple[TidemarkStack, Template],
) -> None:
    stack, template = shared
    template.has_resource_properties(
        ESM,
        {
            "FunctionName": {"Ref": logical_id(stack.archiver.functions["clicks"])},
            "EventSourceArn": CLICKS_ARN,
            "BatchSize": 500,
            "MaximumBatchingWindowInSeconds": 2,
            "StartingPosition": "LATEST",
            "StartingPositionTimestamp": Match.absent(),
            "ParallelizationFactor": 1,
            # whole-batch retries until success: never split, never skipped, never aged out
            "BisectBatchOnFunctionError": False,
            "MaximumRetryAttempts": -1,
            "MaximumRecordAgeInSeconds": Match.absent(),
            "FunctionResponseTypes": Match.absent(),
            "TumblingWindowInSeconds": Match.absent(),
            # the same on-failure destination as the MSK mapping: the bucket's aws/lambda/ prefix
            "DestinationConfig": {
                "OnFailure": {"Destination": {"Fn::GetAtt": [logical_id(stack.storage.bucket), "Arn"]}}
            },
            "MetricsConfig": {"Metrics": ["EventCount"]},
            # nothing of Kafka's
            "Topics": Match.absent(),
            "AmazonManagedKafkaEventSourceConfig": Match.absent(),
            "ProvisionedPollerConfig": Match.absent(),
        },
    )
    template.resource_count_is(CONSUMER, 0)


def test_efo_mapping_reads_through_its_own_consumer_from_the_timestamp(
    efo: tuple[TidemarkStack, Template],
) -> None:
    stack, template = efo
    template.resource_count_is(CONSUMER, 1)
    template.has_resource_properties(CONSUMER, {"ConsumerName": "tidemark-views", "StreamARN": VIEWS_ARN})
    mapping = mapping_of(stack, template, "views")
    assert mapping["EventSourceArn"] == consumer_arn(stack, "views")
    assert mapping["StartingPosition"] == "AT_TIMESTAMP"
    assert mapping["StartingPositionTimestamp"] == VIEWS_FROM.timestamp()
    assert (mapping["ParallelizationFactor"], mapping["BisectBatchOnFunctionError"]) == (1, False)
    assert mapping["MaximumRetryAttempts"] == -1
    assert "FunctionResponseTypes" not in mapping


def test_a_naive_starting_timestamp_is_read_as_utc(example_config: TidemarkConfig) -> None:
    _, template = synth_stack(with_streams(example_config, views("2026-01-02T03:04:05")), nag=False)
    template.has_resource_properties(ESM, {"StartingPositionTimestamp": VIEWS_FROM.timestamp()})


# --- grants ------------------------------------------------------------------------------------


def test_shared_archiver_reads_only_its_stream(shared: tuple[TidemarkStack, Template]) -> None:
    stack, template = shared
    statements = role_statements(stack, template, "clicks")
    (read,) = kinesis_statements(statements)
    assert set(listed(read["Action"])) == STREAM_ACTIONS
    assert read["Resource"] == CLICKS_ARN
    granted = {a for s in statements for a in listed(s["Action"])}
    assert not {a for a in granted if a.startswith(("kafka", "kafka-cluster:"))}
    assert "ec2:DescribeVpcs" not in granted  # the MSK mapping's network lookup


def test_efo_archiver_reads_only_its_stream_and_consumer(efo: tuple[TidemarkStack, Template]) -> None:
    stack, template = efo
    by_resource = {
        json.dumps(s["Resource"], sort_keys=True): set(listed(s["Action"]))
        for s in kinesis_statements(role_statements(stack, template, "views"))
    }
    assert by_resource == {
        json.dumps(VIEWS_ARN): STREAM_ACTIONS,
        json.dumps(consumer_arn(stack, "views"), sort_keys=True): CONSUMER_ACTIONS,
    }


@pytest.mark.parametrize("variant", ["shared", "efo"])
def test_no_other_role_touches_kinesis_and_never_on_a_wildcard(variant: str, request: pytest.FixtureRequest) -> None:
    stack, template = request.getfixturevalue(variant)
    kinesis_stream_name = "clicks" if variant == "shared" else "views"
    own_role = {"Ref": logical_id(stack.archiver.functions[kinesis_stream_name].role)}
    lineage_role = {"Ref": logical_id(stack.sweeper.functions.complete_hours.role)}
    for policy in template.find_resources("AWS::IAM::Policy").values():
        statements = kinesis_statements(policy["Properties"]["PolicyDocument"]["Statement"])
        if lineage_role in policy["Properties"]["Roles"]:  # the sweeper lists shards, nothing else
            assert [listed(statement["Action"]) for statement in statements] == [["kinesis:ListShards"]]
        elif own_role not in policy["Properties"]["Roles"]:
            assert statements == []
        for statement in statements:
            resources = listed(statement["Resource"])
            assert "*" not in resources and not any("*" in render(r) for r in resources)
    assert role_statements(stack, template, "orders") and not kinesis_statements(
        role_statements(stack, template, "orders")
    )


# --- observability -----------------------------------------------------------------------------


def widgets(stack: TidemarkStack, template: Template, stream: str) -> dict[str, dict[str, Any]]:
    dashboard = template.find_resources("AWS::CloudWatch::Dashboard")[
        logical_id(stack.observability.dashboards[stream])
    ]
    body = json.loads(render(dashboard["Properties"]["DashboardBody"]))
    return {widget["properties"]["title"]: widget["properties"] for widget in body["widgets"]}


@pytest.mark.parametrize(
    ("variant", "stream", "throttle"),
    [
        ("shared", "clicks", ["AWS/Kinesis", "ReadProvisionedThroughputExceeded", "StreamName", "clickstream"]),
        (
            "efo",
            "views",
            [
                "AWS/Kinesis",
                "SubscribeToShard.RateExceeded",
                "ConsumerName",
                "tidemark-views",
                "StreamName",
                "page-views",
            ],
        ),
    ],
)
def test_kinesis_dashboard_graphs_iterator_age_and_read_throttles(
    variant: str, stream: str, throttle: list[str], request: pytest.FixtureRequest
) -> None:
    stack, template = request.getfixturevalue(variant)
    found = widgets(stack, template, stream)
    expected = [title for title in DASHBOARD_WIDGETS if title != "ESM offset lag"]
    expected.insert(DASHBOARD_WIDGETS.index("ESM offset lag"), "ESM iterator age")
    assert list(found) == [*expected, "Kinesis read throttles"]
    (age,) = found["ESM iterator age"]["metrics"]
    assert age[:3] == ["AWS/Lambda", "IteratorAge", "FunctionName"]
    assert age[-1]["stat"] == "Maximum"
    (throttled,) = found["Kinesis read throttles"]["metrics"]
    assert throttled[: len(throttle)] == throttle
    assert throttled[-1]["stat"] == "Sum"
    errors_and_throttles = {m[1] for m in found["Archiver errors and throttles"]["metrics"]}
    assert errors_and_throttles == {"Errors", "Throttles"}
    # the MSK stream's dashboard is the one it always had
    assert list(widgets(stack, template, "orders")) == DASHBOARD_WIDGETS


def lag_alarm(stack: TidemarkStack, template: Template, stream: str) -> dict[str, Any]:
    alarm: dict[str, Any]
    (alarm,) = [
        template.find_resources(ALARM)[logical_id(alarm)]["Properties"]
        for alarm in stack.observability.alarms[stream]
        if alarm.node.id == f"LagGrowing-{stream}"
    ]
    return alarm


@pytest.mark.parametrize(("variant", "stream"), [("shared", "clicks"), ("efo", "views")])
def test_kinesis_lag_alarm_is_iterator_age_above_threshold_and_growing(
    variant: str, stream: str, request: pytest.FixtureRequest
) -> None:
    stack, template = request.getfixturevalue(variant)
    kinesis, kafka = lag_alarm(stack, template, stream), lag_alarm(stack, template, "orders")
    threshold_ms = 15 * 60_000  # alarms.iterator_age's default
    (expression,) = [m for m in kinesis["Metrics"] if "Expression" in m]
    assert expression["Expression"] == f"IF(age > {threshold_ms} AND DIFF(age) > 0, 1, 0)"
    assert expression["ReturnData"] is True
    (age,) = [m for m in kinesis["Metrics"] if "MetricStat" in m]
    assert age["Id"] == "age" and age["ReturnData"] is False
    assert age["MetricStat"] == {
        "Metric": {
            "Namespace": "AWS/Lambda",
            "MetricName": "IteratorAge",
            "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": logical_id(stack.archiver.functions[stream])}}],
        },
        "Period": 300,
        "Stat": "Maximum",
    }
    # the Kafka lag alarm's rule: same periods, comparison, missing-data treatment and topic
    kafka_expression = next(m["Expression"] for m in kafka["Metrics"] if "Expression" in m)
    assert kafka_expression == "IF(lag > 100000 AND DIFF(lag) > 0, 1, 0)"
    same = ["Threshold", "ComparisonOperator", "EvaluationPeriods", "DatapointsToAlarm", "TreatMissingData"]
    assert {key: kinesis[key] for key in same} == {key: kafka[key] for key in same}
    assert kinesis["EvaluationPeriods"] == 3
    assert kinesis["AlarmActions"] == kafka["AlarmActions"] == [{"Ref": logical_id(stack.observability.topic)}]
    assert "iterator age" in kinesis["AlarmDescription"]


def test_every_stream_keeps_its_alarms(shared: tuple[TidemarkStack, Template]) -> None:
    stack, template = shared
    alarms = template.find_resources(ALARM)
    described = [alarm["Properties"]["AlarmDescription"].split(":")[0] for alarm in alarms.values()]
    # freshness included; orders, which has aggregations, also AggregationHoursFailed
    assert (described.count("orders"), described.count("clicks")) == (8, 7)
    assert len(stack.observability.alarms["clicks"]) == 7


# --- network, nag, refusals --------------------------------------------------------------------


def endpoint_services(template: Template) -> list[str]:
    return sorted(
        render(e["Properties"]["ServiceName"]).rsplit(".", 1)[-1]
        for e in template.find_resources("AWS::EC2::VPCEndpoint").values()
    )


def test_interface_endpoints_for_msk_pollers_and_kinesis_lineage(
    shared: tuple[TidemarkStack, Template], example_config: TidemarkConfig
) -> None:
    assert endpoint_services(shared[1]) == ["dynamodb", "kinesis-streams", "lambda", "s3", "sts"]
    stack, template = synth_stack(with_streams(example_config, clicks(), msk=False), nag=False)
    assert endpoint_services(template) == ["dynamodb", "kinesis-streams", "s3"]  # the sweeper's ListShards
    # the archiver still runs in the VPC on the staging file system
    function = template.find_resources("AWS::Lambda::Function")[logical_id(stack.archiver.functions["clicks"])]
    assert function["Properties"]["VpcConfig"]["SecurityGroupIds"]
    assert function["Properties"]["FileSystemConfigs"]


@pytest.mark.parametrize("variant", ["shared", "efo"])
def test_cdk_nag_stays_clean(variant: str, request: pytest.FixtureRequest) -> None:
    config = request.getfixturevalue(f"{variant}_config")
    assert findings(nagged(config)) == []


def test_provisioned_pollers_are_refused_for_kinesis(example_config: TidemarkConfig) -> None:
    stream = clicks()
    stream["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 2}}
    config = with_streams(example_config, stream)
    with pytest.raises(ConfigError, match=r"streams\[1\]\.archiver\.provisioned_pollers: provisioned mode"):
        TidemarkStack(App(context=cdk_context()), "Tidemark", config=config, nag=False)


def test_all_three_source_kinds_deploy_side_by_side(example_config: TidemarkConfig) -> None:
    stream = {"name": "logs", "source": {"kind": "kafka", "topic": "logs", "bootstrap_servers": ["b:9092"]}}
    stack = TidemarkStack(
        App(context=cdk_context()), "Tidemark", config=with_streams(example_config, stream, clicks()), nag=False
    )
    mappings = Template.from_stack(stack).find_resources("AWS::Lambda::EventSourceMapping").values()
    reads = sorted(
        "brokers" if "SelfManagedEventSource" in m["Properties"] else m["Properties"]["EventSourceArn"].split(":")[2]
        for m in mappings
    )
    assert reads == ["brokers", "kafka", "kinesis"]  # self-managed brokers, the MSK cluster, the Kinesis stream


def test_a_stream_of_another_region_is_refused(example_config: TidemarkConfig) -> None:
    config = with_streams(example_config, clicks(stream_arn=CLICKS_ARN.replace("us-east-1", "eu-west-1")))
    with pytest.raises(ConfigError, match=r"streams\[1\]\.source\.stream_arn: the stream is in eu-west-1"):
        TidemarkStack(App(context=cdk_context()), "Tidemark", config=config, env=TEST_ENV, nag=False)


def test_the_iterator_age_threshold_is_configurable(example_config: TidemarkConfig) -> None:
    config = with_streams(example_config, clicks())
    config = config.model_copy(
        update={"alarms": config.alarms.model_copy(update={"iterator_age": timedelta(minutes=5)})}
    )
    stack, template = synth_stack(config, nag=False)
    (expression,) = [m for m in lag_alarm(stack, template, "clicks")["Metrics"] if "Expression" in m]
    assert expression["Expression"] == "IF(age > 300000 AND DIFF(age) > 0, 1, 0)"
