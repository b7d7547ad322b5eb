"""RabbitMQ sources on Amazon MQ: one mapping per queue on its archiver (the broker, the queue, the
credentials secret and the virtual host), grants on that broker and that one secret only, the
queue's depth as the lag and freshness alarms and on the dashboard -- next to a Kafka stream that
stays exactly as it was -- and cdk-nag clean.

Two configurations: ``orders`` alone (queue ``orders`` on the default virtual host ``/``), and the
example's MSK stream ``orders`` with a RabbitMQ stream ``payments`` on virtual host ``tenant-a``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App
from aws_cdk.assertions import Match, Template

from stacks.source import MQ_NETWORK_ACTIONS
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import REPO, TEST_ENV, cdk_context, logical_id, synth_stack
from tests.unit.test_stack_kinesis import mapping_of, role_statements, widgets, with_streams
from tests.unit.test_stack_nag import findings, nagged
from tests.unit.test_stack_wiring import DASHBOARD_WIDGETS, listed
from tidemark.config import TidemarkConfig, load_config
from tidemark.exceptions import ConfigError

ESM = "AWS::Lambda::EventSourceMapping"
ALARM = "AWS::CloudWatch::Alarm"
BROKER = "arn:aws:mq:us-east-1:123456789012:broker:orders:b-1234a5b6-78cd-901e-2fgh-3i45j6k178l9"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:mq-orders-AbCdEf"
PAYMENTS_BROKER = "arn:aws:mq:us-east-1:123456789012:broker:payments-mq:b-9bcfa592-423a-4942-879d-eb284b418fc8"
PAYMENTS_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:mq-payments-XyZ123"


def rabbitmq_stream(name: str, **source: Any) -> dict[str, Any]:
    return {"name": name, "source": {"kind": "rabbitmq", **source}}


def orders(**source: Any) -> dict[str, Any]:
    settings = {
        "broker_arn": BROKER,
        "queue": "orders",
        "virtual_host": "/",
        "batch_size": 100,
        "batching_window": "1s",
        "credentials_secret_arn": SECRET,
    }
    return rabbitmq_stream("orders", **{**settings, **source})


def payments() -> dict[str, Any]:
    return rabbitmq_stream(
        "payments",
        broker_arn=PAYMENTS_BROKER,
        queue="payments",
        virtual_host="tenant-a",
        batch_size=500,
        batching_window="3s",
        credentials_secret_arn=PAYMENTS_SECRET,
    )


@pytest.fixture(scope="module")
def alone_config(example_config: TidemarkConfig) -> TidemarkConfig:
    return with_streams(example_config, orders(), msk=False)


@pytest.fixture(scope="module")
def mixed_config(example_config: TidemarkConfig) -> TidemarkConfig:
    return with_streams(example_config, payments())


@pytest.fixture(scope="module")
def alone(alone_config: TidemarkConfig) -> tuple[TidemarkStack, Template]:
    return synth_stack(alone_config, nag=False)


@pytest.fixture(scope="module")
def mixed(mixed_config: TidemarkConfig) -> tuple[TidemarkStack, Template]:
    return synth_stack(mixed_config, nag=False)


def actions(statements: list[dict[str, Any]], prefix: str) -> set[str]:
    return {a for s in statements for a in listed(s["Action"]) if a.startswith(prefix)}


def alarm_of(stack: TidemarkStack, template: Template, construct_id: str, stream: str) -> dict[str, Any]:
    alarm: dict[str, Any]
    (alarm,) = [
        template.find_resources(ALARM)[logical_id(alarm)]["Properties"]
        for alarm in stack.observability.alarms[stream]
        if alarm.node.id == f"{construct_id}-{stream}"
    ]
    return alarm


def queue_stat(metric: dict[str, Any]) -> tuple[str, str, dict[str, str], int, str]:
    """(namespace, metric, dimensions, period, statistic) of an alarm's ``MetricStat`` input."""
    stat = metric["MetricStat"]
    dimensions = {d["Name"]: d["Value"] for d in stat["Metric"]["Dimensions"]}
    return stat["Metric"]["Namespace"], stat["Metric"]["MetricName"], dimensions, stat["Period"], stat["Stat"]


ORDERS_QUEUE = {"Broker": "orders", "VirtualHost": "/", "Queue": "orders"}


# --- the mapping -------------------------------------------------------------------------------


def test_the_mapping_reads_the_queue_on_the_broker_with_the_secret(alone: tuple[TidemarkStack, Template]) -> None:
    stack, template = alone
    template.resource_count_is(ESM, 1)
    template.has_resource_properties(
        ESM,
        {
            "FunctionName": {"Ref": logical_id(stack.archiver.functions["orders"])},
            "EventSourceArn": BROKER,
            "Queues": ["orders"],
            # the default virtual host "/" is what a mapping naming none reads: only the secret
            "SourceAccessConfigurations": [{"Type": "BASIC_AUTH", "URI": SECRET}],
            "BatchSize": 100,
            "MaximumBatchingWindowInSeconds": 1,
            # nothing Amazon MQ refuses: no positions, no retry bounds, no on-failure destination
            "StartingPosition": Match.absent(),
            "MaximumRetryAttempts": Match.absent(),
            "DestinationConfig": Match.absent(),
            "MetricsConfig": Match.absent(),
            "ParallelizationFactor": Match.absent(),
            # nothing of Kafka's
            "Topics": Match.absent(),
            "AmazonManagedKafkaEventSourceConfig": Match.absent(),
            "SelfManagedEventSource": Match.absent(),
            "ProvisionedPollerConfig": Match.absent(),
        },
    )
    assert stack.mappings["orders"] is stack.archiver.mappings["orders"]


def test_a_named_virtual_host_goes_to_the_mapping(mixed: tuple[TidemarkStack, Template]) -> None:
    stack, template = mixed
    mapping = mapping_of(stack, template, "payments")
    assert mapping["EventSourceArn"] == PAYMENTS_BROKER
    assert mapping["Queues"] == ["payments"]
    assert mapping["SourceAccessConfigurations"] == [
        {"Type": "BASIC_AUTH", "URI": PAYMENTS_SECRET},
        {"Type": "VIRTUAL_HOST", "URI": "tenant-a"},
    ]
    assert (mapping["BatchSize"], mapping["MaximumBatchingWindowInSeconds"]) == (500, 3)


def test_the_default_virtual_host_written_or_not_is_the_same_mapping(
    alone: tuple[TidemarkStack, Template], example_config: TidemarkConfig
) -> None:
    without = orders()
    del without["source"]["virtual_host"]
    _, template = synth_stack(with_streams(example_config, without, msk=False), nag=False)
    (written,) = alone[1].find_resources(ESM).values()
    (omitted,) = template.find_resources(ESM).values()
    assert omitted == written


# --- grants ------------------------------------------------------------------------------------


def test_the_archiver_reads_its_broker_and_exactly_its_secret(alone: tuple[TidemarkStack, Template]) -> None:
    stack, template = alone
    statements = role_statements(stack, template, "orders")
    by_sid = {s.get("Sid"): s for s in statements}
    assert by_sid["MqBroker"]["Action"] == "mq:DescribeBroker"
    assert by_sid["MqBroker"]["Resource"] == BROKER
    assert by_sid["MqCredentials"]["Action"] == "secretsmanager:GetSecretValue"
    assert by_sid["MqCredentials"]["Resource"] == SECRET
    # only there: no other statement of any role reads a secret or describes a broker, and none on "*"
    for _, policy in template.find_resources("AWS::IAM::Policy").items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if actions([statement], "secretsmanager:") or actions([statement], "mq:"):
                assert statement in (by_sid["MqBroker"], by_sid["MqCredentials"])
                assert "*" not in json.dumps(statement["Resource"])
    # the network interfaces the mapping places in the broker's VPC: on "*", as AWS requires
    assert set(listed(by_sid["MqNetwork"]["Action"])) == set(MQ_NETWORK_ACTIONS)
    assert by_sid["MqNetwork"]["Resource"] == "*"
    assert not actions(statements, "kafka") and not actions(statements, "kinesis:")


def test_kafka_and_rabbitmq_side_by_side(mixed: tuple[TidemarkStack, Template], example_config: TidemarkConfig) -> None:
    stack, template = mixed
    template.resource_count_is(ESM, 2)
    msk, rabbitmq = mapping_of(stack, template, "orders"), mapping_of(stack, template, "payments")
    # the MSK stream's mapping is the one it always had
    assert msk["EventSourceArn"] == example_config.streams[0].source.cluster_arn
    assert msk["Topics"] == ["orders"] and "Queues" not in msk
    assert "MetricsConfig" not in msk and "DestinationConfig" not in msk  # on-demand, unbounded retries
    assert rabbitmq["Queues"] == ["payments"] and "Topics" not in rabbitmq
    # each archiver holds its own source's grants only
    kafka_role, mq_role = role_statements(stack, template, "orders"), role_statements(stack, template, "payments")
    assert actions(kafka_role, "kafka-cluster:") and not actions(kafka_role, "mq:")
    assert not actions(kafka_role, "secretsmanager:")
    assert actions(mq_role, "mq:") == {"mq:DescribeBroker"} and not actions(mq_role, "kafka")
    assert [s["Resource"] for s in mq_role if actions([s], "secretsmanager:")] == [PAYMENTS_SECRET]
    assert set(stack.observability.dashboards) == {"orders", "payments"}


# --- observability -----------------------------------------------------------------------------


def test_the_lag_alarm_is_the_queue_depth_above_threshold_and_growing(alone: tuple[TidemarkStack, Template]) -> None:
    stack, template = alone
    alarm = alarm_of(stack, template, "LagGrowing", "orders")
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["Expression"] == "IF(depth > 100000 AND DIFF(depth) > 0, 1, 0)"  # alarms.offset_lag
    (depth,) = [m for m in alarm["Metrics"] if "MetricStat" in m]
    assert depth["Id"] == "depth" and depth["ReturnData"] is False
    assert queue_stat(depth) == ("AWS/AmazonMQ", "MessageCount", ORDERS_QUEUE, 300, "Maximum")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"], alarm["TreatMissingData"]) == (
        3,
        3,
        "notBreaching",
    )
    assert alarm["AlarmActions"] == [{"Ref": logical_id(stack.observability.topic)}]
    assert alarm["AlarmDescription"].startswith("orders: RabbitMQ queue orders (virtual host /) holds more than")


def test_the_queue_depth_threshold_is_the_offset_lag_setting(alone_config: TidemarkConfig) -> None:
    config = alone_config.model_copy(update={"alarms": alone_config.alarms.model_copy(update={"offset_lag": 2500})})
    stack, template = synth_stack(config, nag=False)
    (expression,) = [m for m in alarm_of(stack, template, "LagGrowing", "orders")["Metrics"] if "Expression" in m]
    assert expression["Expression"] == "IF(depth > 2500 AND DIFF(depth) > 0, 1, 0)"


def test_freshness_alarms_when_messages_wait_and_nothing_is_committed(alone: tuple[TidemarkStack, Template]) -> None:
    stack, template = alone
    alarm = alarm_of(stack, template, "Freshness", "orders")
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["Expression"] == (
        "IF(depth > 0 AND FILL(committed_archiver, 0) + FILL(committed_sweeper, 0) == 0, 1, 0)"
    )
    inputs = {m["Id"]: m for m in alarm["Metrics"] if "MetricStat" in m}
    assert set(inputs) == {"depth", "committed_archiver", "committed_sweeper"}
    # the minimum over the window: messages waited all through it (15m max_age + 2 x 5m sweeps)
    assert queue_stat(inputs["depth"]) == ("AWS/AmazonMQ", "MessageCount", ORDERS_QUEUE, 25 * 60, "Minimum")
    # the broker publishes the queue's depth whether or not the mapping consumes: silence is no alarm
    assert alarm["TreatMissingData"] == "notBreaching"
    assert "messages wait in RabbitMQ queue orders" in alarm["AlarmDescription"]


def test_every_stream_keeps_its_alarms_with_queue_runbooks(mixed: tuple[TidemarkStack, Template]) -> None:
    stack, template = mixed
    described = [a["Properties"]["AlarmDescription"] for a in template.find_resources(ALARM).values()]
    # as many as the Kafka stream's, but for its AggregationHoursFailed (payments has no aggregations)
    assert [d.split(":")[0] for d in described].count("payments") == 7
    assert [d.split(":")[0] for d in described].count("orders") == 8
    quarantine = alarm_of(stack, template, "Quarantines", "payments")["AlarmDescription"]
    assert "A queue cannot be replayed" in quarantine and "Kafka" not in quarantine
    assert "another broker" in alarm_of(stack, template, "PositionResets", "payments")["AlarmDescription"]
    # the Kafka stream's runbooks are the ones they always were
    assert (
        "Replay the quarantined offsets from Kafka"
        in alarm_of(stack, template, "Quarantines", "orders")["AlarmDescription"]
    )
    kafka_lag = alarm_of(stack, template, "LagGrowing", "orders")
    assert next(m["Expression"] for m in kafka_lag["Metrics"] if "Expression" in m).startswith("IF(lag > 100000")


def test_the_dashboard_graphs_the_queue_depth_and_consumers(mixed: tuple[TidemarkStack, Template]) -> None:
    stack, template = mixed
    found = widgets(stack, template, "payments")
    expected = [("Queue depth" if title == "ESM offset lag" else title) for title in DASHBOARD_WIDGETS]
    assert list(found) == [*expected, "Queue consumers"]
    queue = {"Broker": "payments-mq", "VirtualHost": "tenant-a", "Queue": "payments"}  # the broker's name
    depth = found["Queue depth"]["metrics"]
    assert [m[:2] for m in depth] == [
        ["AWS/AmazonMQ", "MessageCount"],
        ["AWS/AmazonMQ", "MessageReadyCount"],
        ["AWS/AmazonMQ", "MessageUnacknowledgedCount"],
    ]
    for metric in depth:
        assert dict(zip(metric[2:8:2], metric[3:8:2], strict=True)) == queue
        assert metric[-1]["stat"] == "Maximum"
    (consumers,) = found["Queue consumers"]["metrics"]
    assert consumers[:2] == ["AWS/AmazonMQ", "ConsumerCount"]
    # the MSK stream's dashboard is the one it always had
    assert list(widgets(stack, template, "orders")) == DASHBOARD_WIDGETS


# --- nag, refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["alone", "mixed", "shipped"])
def test_cdk_nag_stays_clean(variant: str, request: pytest.FixtureRequest) -> None:
    config = (
        load_config(REPO / "config" / "rabbitmq.yaml")
        if variant == "shipped"
        else request.getfixturevalue(f"{variant}_config")
    )
    stack = nagged(config)
    assert findings(stack) == []
    # the one wildcard (the mapping's network interfaces) is the reasoned Resource::* suppression
    role = Template.from_stack(stack).find_resources("AWS::IAM::Role")[
        logical_id(stack.archiver.functions[config.streams[-1].name].role)  # type: ignore[arg-type]
    ]
    reasons = [
        r["reason"] for r in role["Metadata"]["cdk_nag"]["rules_to_suppress"] if "Resource::*" in r["applies_to"]
    ]
    assert any("Amazon MQ" in reason for reason in reasons)


@pytest.mark.parametrize(
    ("arn", "message"),
    [
        (BROKER.replace("us-east-1", "eu-west-1"), r"broker_arn: the broker is in region eu-west-1"),
        (BROKER.replace("123456789012", "210987654321"), r"broker_arn: the broker is in account 210987654321"),
    ],
)
def test_a_broker_of_another_region_or_account_is_refused(
    example_config: TidemarkConfig, arn: str, message: str
) -> None:
    config = with_streams(example_config, orders(broker_arn=arn), msk=False)
    with pytest.raises(ConfigError, match=r"streams\[0\]\.source\." + message):
        TidemarkStack(App(context=cdk_context()), "Tidemark", config=config, env=TEST_ENV, nag=False)


def test_provisioned_pollers_are_refused_for_rabbitmq(example_config: TidemarkConfig) -> None:
    stream = orders()
    stream["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 2}}
    config = with_streams(example_config, stream, msk=False)
    with pytest.raises(ConfigError, match=r"streams\[0\]\.archiver\.provisioned_pollers: provisioned mode"):
        TidemarkStack(App(context=cdk_context()), "Tidemark", config=config, nag=False)


def test_the_mapping_waits_for_its_grants(alone: tuple[TidemarkStack, Template]) -> None:
    """The mapping checks the broker and the secret when it is created: the role's policy must be
    attached first. The mapping names its function, which depends on that policy."""
    stack, template = alone
    fn = stack.archiver.functions["orders"]
    (mapping,) = template.find_resources(ESM).values()
    assert mapping["Properties"]["FunctionName"] == {"Ref": logical_id(fn)}
    policy = fn.role.node.find_child("DefaultPolicy")  # type: ignore[union-attr]
    assert logical_id(policy) in template.find_resources("AWS::Lambda::Function")[logical_id(fn)]["DependsOn"]
