"""Stack variants the configuration selects: an existing VPC, the dev MSK Serverless cluster,
several streams, provisioned pollers with bounded retries, no aggregations, alarm e-mails."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match, Template

from stacks.pipeline import PipelineConstruct
from stacks.source import consumer_group_id
from tests.support.cdk import REPO, TEST_ENV, cdk_context, logical_id, synth_stack, with_changes
from tidemark.config import TidemarkConfig
from tidemark.exceptions import ConfigError

VPC_ID = "vpc-0123456789abcdef0"
SUBNETS = ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"]
#: what `cdk synth` would cache in cdk.context.json after looking the VPC up
VPC_LOOKUP = {
    f"vpc-provider:account=123456789012:filter.vpc-id={VPC_ID}:region=us-east-1:returnAsymmetricSubnets=true": {
        "vpcId": VPC_ID,
        "vpcCidrBlock": "10.0.0.0/16",
        "ownerAccountId": "123456789012",
        "availabilityZones": [],
        "subnetGroups": [
            {
                "name": "Private",
                "type": "Private",
                "subnets": [
                    {
                        "subnetId": subnet,
                        "cidr": f"10.0.{32 * index}.0/19",
                        "availabilityZone": f"us-east-1{'abc'[index]}",
                        "routeTableId": f"rtb-0aaaaaaaaaaaaaaa{index}",
                    }
                    for index, subnet in enumerate([*SUBNETS, "subnet-0aaaaaaaaaaaaaaa3"])
                ],
            }
        ],
    }
}


def stream_data(config: TidemarkConfig) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(config.model_dump_json())["streams"][0]
    return data


def test_existing_vpc_is_looked_up_and_its_chosen_subnets_used(example_config: TidemarkConfig) -> None:
    config = with_changes(example_config, network={"vpc_id": VPC_ID, "subnet_ids": SUBNETS})
    stack, template = synth_stack(config, context=cdk_context(**VPC_LOOKUP), env=TEST_ENV, nag=False)
    template.resource_count_is("AWS::EC2::VPC", 0)
    template.resource_count_is("AWS::EC2::VPCEndpoint", 0)  # an existing VPC keeps its own endpoints
    mounts = template.find_resources("AWS::EFS::MountTarget")
    assert sorted(m["Properties"]["SubnetId"] for m in mounts.values()) == SUBNETS
    fn = template.find_resources("AWS::Lambda::Function")[logical_id(stack.archiver.functions["orders"])]
    assert sorted(fn["Properties"]["VpcConfig"]["SubnetIds"]) == SUBNETS
    group = template.find_resources("AWS::EC2::SecurityGroup")[logical_id(stack.network.function_security_group)]
    assert group["Properties"]["VpcId"] == VPC_ID


@pytest.mark.parametrize(
    ("subnets", "message"),
    [
        ([SUBNETS[0], "subnet-0bbbbbbbbbbbbbbb9"], "subnet-0bbbbbbbbbbbbbbb9 not found in vpc-0123456789abcdef0"),
        ([SUBNETS[0], SUBNETS[0].replace("1", "4")], "must be in different availability zones"),
    ],
)
def test_chosen_subnets_must_exist_and_span_zones(
    example_config: TidemarkConfig, subnets: list[str], message: str
) -> None:
    lookup = json.loads(json.dumps(VPC_LOOKUP))
    (response,) = lookup.values()
    response["subnetGroups"][0]["subnets"].append(
        {
            "subnetId": SUBNETS[0].replace("1", "4"),
            "cidr": "10.0.96.0/19",
            "availabilityZone": "us-east-1a",  # the same zone as the first
            "routeTableId": "rtb-0aaaaaaaaaaaaaaa4",
        }
    )
    config = with_changes(example_config, network={"vpc_id": VPC_ID, "subnet_ids": subnets})
    with pytest.raises(ConfigError, match=f"network.subnet_ids: .*{message}"):
        synth_stack(config, context=cdk_context(**lookup), env=TEST_ENV, nag=False)


def test_dev_cluster_is_created_and_read_with_iam_auth(example_config: TidemarkConfig) -> None:
    streams = [{**stream_data(example_config), "source": {"kind": "msk", "topic": "orders"}}]
    config = with_changes(example_config, dev_cluster={"enabled": True}, streams=streams)
    stack, template = synth_stack(config, nag=False)
    assert stack.source.dev_cluster is not None
    cluster = logical_id(stack.source.dev_cluster)
    template.has_resource_properties(
        "AWS::MSK::ServerlessCluster",
        {"ClientAuthentication": {"Sasl": {"Iam": {"Enabled": True}}}},
    )
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"EventSourceArn": {"Fn::GetAtt": [cluster, "Arn"]}, "Topics": ["orders"]},
    )
    group = template.find_resources("AWS::EC2::SecurityGroup")[logical_id(stack.source.dev_cluster_security_group)]
    ingress = group["Properties"].get("SecurityGroupIngress", [])
    rules = ingress + [
        r["Properties"]
        for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"]
        == {"Fn::GetAtt": [logical_id(stack.source.dev_cluster_security_group), "GroupId"]}
    ]
    assert [(r["FromPort"], r["ToPort"]) for r in rules] == [(9098, 9098)]
    # topic and group ARNs are derived from the cluster's ARN in the template
    policies = json.dumps(template.find_resources("AWS::IAM::Policy"))
    assert (
        '":topic/"' in policies and '"/orders"' in policies and f'"/{consumer_group_id(config.streams[0])}"' in policies
    )


def test_each_stream_gets_its_own_function_mapping_and_grants(example_config: TidemarkConfig) -> None:
    first = stream_data(example_config)
    second = {
        **first,
        "name": "payments",
        "source": {**first["source"], "topic": "payments", "consumer_group_id": "archive-payments"},
        "aggregations": [],
    }
    config = with_changes(example_config, streams=[first, second])
    stack, template = synth_stack(config, nag=False)
    assert sorted(stack.archiver.functions) == ["orders", "payments"]
    mappings = {
        m["Properties"]["Topics"][0]: m["Properties"]
        for m in template.find_resources("AWS::Lambda::EventSourceMapping").values()
    }
    assert mappings["payments"]["AmazonManagedKafkaEventSourceConfig"] == {"ConsumerGroupId": "archive-payments"}
    assert mappings["payments"]["FunctionName"] == {"Ref": logical_id(stack.archiver.functions["payments"])}
    role = logical_id(stack.archiver.functions["payments"].role)  # type: ignore[arg-type]
    statements = [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    text = json.dumps(statements)
    assert "/raw/payments/*" in text and "/raw/orders/*" not in text
    assert len(template.find_resources("AWS::CloudWatch::Dashboard")) == 2


def test_provisioned_pollers_and_bounded_retries_reach_the_mapping(example_config: TidemarkConfig) -> None:
    stream = stream_data(example_config)
    stream["archiver"] = {"provisioned_pollers": {"minimum": 2, "maximum": 20}, "retry_attempts": 5, "timeout": "10m"}
    _, template = synth_stack(with_changes(example_config, streams=[stream]), nag=False)
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"ProvisionedPollerConfig": {"MinimumPollers": 2, "MaximumPollers": 20}, "MaximumRetryAttempts": 5},
    )
    template.has_resource_properties("AWS::Lambda::Function", {"Handler": "handler.lambda_handler", "Timeout": 600})


def test_without_aggregations_there_is_no_spark_pipeline(example_config: TidemarkConfig) -> None:
    stream = {**stream_data(example_config), "aggregations": []}
    config = with_changes(example_config, streams=[stream], pipeline={})
    stack, template = synth_stack(config, nag=False)
    assert not stack.pipeline.enabled
    template.resource_count_is("AWS::EMRServerless::Application", 0)
    template.resource_count_is("AWS::StepFunctions::StateMachine", 1)  # the sweeper only
    template.resource_count_is("AWS::CloudWatch::Alarm", 11)  # all but AggregationFailures


def test_alarm_emails_are_subscribed(example_config: TidemarkConfig) -> None:
    config = with_changes(example_config, alarms={"emails": ["oncall@example.com"]})
    _, template = synth_stack(config, nag=False)
    template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "oncall@example.com", "TopicArn": Match.any_value()}
    )


def test_stack_synthesizes_without_an_environment(example_config: TidemarkConfig) -> None:
    """The example deploys anywhere: no account or region is baked into the template."""
    stack, template = synth_stack(example_config, nag=False)
    assert stack.resolve(stack.account) == {"Ref": "AWS::AccountId"}
    assert isinstance(template, Template)


def test_a_job_setting_too_long_for_an_emr_property_fails_synth(example_config: TidemarkConfig) -> None:
    stack, _ = synth_stack(example_config, nag=False)
    with pytest.raises(ConfigError, match="the job setting TIDEMARK_X is 1025 characters"):
        PipelineConstruct(
            stack,
            "Another",
            config=example_config,
            root=REPO,
            access=stack.access,
            ledger_table=stack.storage.ledger_table,
            aggregates_table=stack.storage.aggregates_table,
            environment={"TIDEMARK_X": "x" * 1025},
            runtime_config=example_config.runtime_json(),
        )


def test_bounded_retries_get_the_on_failure_destination_and_its_alarm(example_config: TidemarkConfig) -> None:
    """With a destination AWS caps unbounded Kafka retries at 10, so a mapping has one only when
    the stream bounds its retries; then what reaches it (or is dropped) alarms."""
    stream = stream_data(example_config)
    stream["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 4}, "retry_attempts": 5}
    stack, template = synth_stack(with_changes(example_config, streams=[stream]), nag=False)
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "MaximumRetryAttempts": 5,
            "DestinationConfig": {
                "OnFailure": {"Destination": {"Fn::GetAtt": [logical_id(stack.storage.bucket), "Arn"]}}
            },
            "MetricsConfig": {"Metrics": ["EventCount", "ErrorCount", "KafkaMetrics"]},
        },
    )
    mapping = logical_id(stack.archiver.mappings["orders"])
    (alarm,) = [
        props
        for props in (r["Properties"] for r in template.find_resources("AWS::CloudWatch::Alarm").values())
        if "AbandonedRecords-orders" in json.dumps(props.get("AlarmName", ""))
    ]
    metrics = {m["MetricStat"]["Metric"]["MetricName"]: m for m in alarm["Metrics"] if "MetricStat" in m}
    assert set(metrics) == {"OnFailureDestinationDeliveredEventCount", "DroppedEventCount"}
    assert "on-failure destination" in alarm["AlarmDescription"]
    assert "`tidemark recover` archives them from Kafka" in alarm["AlarmDescription"]
    for metric in metrics.values():
        assert metric["MetricStat"]["Metric"]["Dimensions"] == [
            {"Name": "EventSourceMappingUUID", "Value": {"Ref": mapping}}
        ]


def test_unbounded_retries_have_no_destination_and_no_abandoned_alarm(example_config: TidemarkConfig) -> None:
    stream = stream_data(example_config)
    stream["archiver"] = {"provisioned_pollers": {"minimum": 1, "maximum": 4}}
    _, template = synth_stack(with_changes(example_config, streams=[stream]), nag=False)
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "DestinationConfig": Match.absent(),
            "MaximumRetryAttempts": Match.absent(),
            "MetricsConfig": {"Metrics": ["EventCount", "ErrorCount", "KafkaMetrics"]},
        },
    )
    names = json.dumps(
        [r["Properties"].get("AlarmName") for r in template.find_resources("AWS::CloudWatch::Alarm").values()]
    )
    assert "AbandonedRecords" not in names


def test_a_latest_starting_position_is_warned_about_at_synth(example_config: TidemarkConfig) -> None:
    """AWS: with LATEST "the event source mapping could miss events during a create or update"
    (Apache Kafka polling and stream starting positions in Lambda)."""
    stream = stream_data(example_config)
    stream["source"] = {**stream["source"], "starting_position": "LATEST"}
    stack, _ = synth_stack(with_changes(example_config, streams=[stream]), nag=False)
    (warning,) = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(".*LATEST can miss.*"))
    assert "streams[0].source.starting_position" in json.dumps(warning.entry.data)
    default, _ = synth_stack(example_config, nag=False)
    assert Annotations.from_stack(default).find_warning("*", Match.string_like_regexp(".*LATEST.*")) == []
