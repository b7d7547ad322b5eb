"""``staging.throughput``: the EFS throughput mode, and the alarm on throughput near the limit."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match, Template
from pydantic import ValidationError

from stacks.staging import StagingConstruct
from tests.support.cdk import synth_stack
from tidemark.config import TidemarkConfig
from tidemark.config.deployment import StagingSettings

FILE_SYSTEM = "AWS::EFS::FileSystem"


def staging_template(settings: StagingSettings | None) -> Template:
    stack = Stack(App(), "Staging")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    StagingConstruct(stack, "Staging", vpc=vpc, subnets=ec2.SubnetSelection(), settings=settings)
    return Template.from_stack(stack)


def test_elastic_is_the_default() -> None:
    staging_template(None).has_resource_properties(FILE_SYSTEM, {"ThroughputMode": "elastic"})
    props = staging_template(None).find_resources(FILE_SYSTEM)
    assert all("ProvisionedThroughputInMibps" not in r["Properties"] for r in props.values())


def test_provisioned_throughput_is_applied() -> None:
    template = staging_template(StagingSettings(throughput="provisioned", provisioned_mibps=24))
    template.has_resource_properties(FILE_SYSTEM, {"ThroughputMode": "provisioned", "ProvisionedThroughputInMibps": 24})


def test_settings_need_mibps_with_provisioned_only() -> None:
    with pytest.raises(ValidationError, match="provisioned_mibps is required"):
        StagingSettings(throughput="provisioned")
    with pytest.raises(ValidationError, match="only when throughput is 'provisioned'"):
        StagingSettings(provisioned_mibps=10)


def test_default_config_leaves_staging_out_of_the_runtime_config(example_config: TidemarkConfig) -> None:
    assert example_config.staging == StagingSettings()
    provisioned = example_config.model_copy(
        update={"staging": StagingSettings(throughput="provisioned", provisioned_mibps=10)}
    )
    assert "staging" not in provisioned.runtime_json()  # the functions never read it


def test_throughput_alarm_fires_above_80_percent_of_permitted_for_3_periods(example_config: TidemarkConfig) -> None:
    stack, template = synth_stack(example_config, nag=False)
    alarms = template.find_resources(
        "AWS::CloudWatch::Alarm", {"Properties": {"AlarmName": Match.string_like_regexp("EfsThroughput")}}
    )
    (alarm,) = alarms.values()
    props = alarm["Properties"]
    assert props["AlarmName"] == f"{stack.stack_name}-EfsThroughput"
    assert props["Threshold"] == 80
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["EvaluationPeriods"] == 3 and props["DatapointsToAlarm"] == 3
    assert props["AlarmActions"]
    metrics = {m["Id"]: m for m in props["Metrics"]}
    assert metrics["metered"]["MetricStat"]["Metric"]["MetricName"] == "MeteredIOBytes"
    assert metrics["metered"]["MetricStat"]["Stat"] == "Sum"
    assert metrics["permitted"]["MetricStat"]["Metric"]["MetricName"] == "PermittedThroughput"
    (expression,) = [m for m in props["Metrics"] if "Expression" in m]
    assert expression["Expression"] == "100 * (metered / PERIOD(metered)) / permitted"
    body = str(template.find_resources("AWS::CloudWatch::Dashboard"))
    assert "EFS throughput: used vs permitted" in body and "PermittedThroughput" in body
