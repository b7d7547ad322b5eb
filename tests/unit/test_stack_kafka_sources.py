"""Every Kafka source kind and auth mode the stack deploys: the mapping's wiring (what it reads,
how it authenticates, where its pollers run), least-privilege grants (only the named secret and
key), and cdk-nag clean."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match, Template

from tests.support.cdk import synth_stack, with_changes
from tests.unit.test_stack_nag import findings, nagged
from tidemark.config import TidemarkConfig

SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:kafka-creds-AbCdEf"
MSK_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:AmazonMSK_orders-AbCdEf"
CA_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:kafka-root-ca-AbCdEf"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
BROKERS = ["pkc-12345.us-east-1.aws.confluent.cloud:9092"]
SUBNETS = ["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"]
GROUPS = ["sg-0ccccccccccccccc1"]
#: the default consumer group: the stream and the mapping's identity (tests/unit/test_mapping_redeploys.py)
GROUP_OF_ORDERS = r"tidemark-orders-[0-9a-f]{8}"


def with_source(config: TidemarkConfig, **source: Any) -> TidemarkConfig:
    stream = json.loads(config.model_dump_json())["streams"][0]
    if source.get("kind") == "kafka":
        stream["source"] = {"topic": "orders", **source}
    else:
        stream["source"] = {**stream["source"], **source}
    return with_changes(config, streams=[stream])


def archiver_statements(template: Template) -> list[dict[str, Any]]:
    """The archiver role's policy statements (the mapping's permissions are its target's)."""
    return [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if any("Archiver" in role["Ref"] for role in policy["Properties"]["Roles"])
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def actions_on(statements: list[dict[str, Any]], resource: str) -> set[str]:
    found: set[str] = set()
    for statement in statements:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        if resource in resources:
            actions = statement["Action"]
            found.update([actions] if isinstance(actions, str) else actions)
    return found


def mapping(template: Template) -> dict[str, Any]:
    [found] = template.find_resources("AWS::Lambda::EventSourceMapping").values()
    properties: dict[str, Any] = found["Properties"]
    return properties


def test_msk_with_iam_names_no_secret_and_grants_the_topic_and_group(example_config: TidemarkConfig) -> None:
    _, template = synth_stack(example_config, nag=False)
    props = mapping(template)
    assert "SourceAccessConfigurations" not in props and props["EventSourceArn"].startswith("arn:aws:kafka:")
    statements = json.dumps(archiver_statements(template))
    assert "kafka-cluster:ReadData" in statements and "secretsmanager" not in statements


@pytest.mark.parametrize(
    ("auth", "access_type"),
    [
        ({"mechanism": "sasl_scram_512", "secret_arn": MSK_SECRET, "kms_key_arn": KEY}, "SASL_SCRAM_512_AUTH"),
        ({"mechanism": "mtls", "secret_arn": SECRET}, "CLIENT_CERTIFICATE_TLS_AUTH"),
    ],
)
def test_msk_with_a_secret_reads_the_cluster_with_it(
    example_config: TidemarkConfig, auth: dict[str, str], access_type: str
) -> None:
    _, template = synth_stack(with_source(example_config, auth=auth), nag=False)
    props = mapping(template)
    assert props["SourceAccessConfigurations"] == [{"Type": access_type, "URI": auth["secret_arn"]}]
    assert re.fullmatch(GROUP_OF_ORDERS, props["AmazonManagedKafkaEventSourceConfig"]["ConsumerGroupId"])
    statements = archiver_statements(template)
    assert actions_on(statements, auth["secret_arn"]) == {"secretsmanager:GetSecretValue"}
    text = json.dumps(statements)
    assert "kafka-cluster:" not in text  # IAM's data-plane actions only go with IAM auth
    assert "kafka:GetBootstrapBrokers" in text
    # one statement reads secrets: that one secret
    assert [s["Resource"] for s in statements if "secretsmanager" in json.dumps(s["Action"])] == [auth["secret_arn"]]
    if "kms_key_arn" in auth:
        [decrypt] = [s for s in statements if s.get("Sid") == "KafkaSecretsKey"]
        assert decrypt["Resource"] == KEY and decrypt["Action"] == "kms:Decrypt"
        assert decrypt["Condition"] == {"StringEquals": {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"}}


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        (None, []),
        ({"mechanism": "plain", "secret_arn": SECRET}, [{"Type": "BASIC_AUTH", "URI": SECRET}]),
        ({"mechanism": "sasl_scram_256", "secret_arn": SECRET}, [{"Type": "SASL_SCRAM_256_AUTH", "URI": SECRET}]),
        ({"mechanism": "sasl_scram_512", "secret_arn": SECRET}, [{"Type": "SASL_SCRAM_512_AUTH", "URI": SECRET}]),
        (
            {"mechanism": "mtls", "secret_arn": SECRET, "root_ca_secret_arn": CA_SECRET},
            [
                {"Type": "CLIENT_CERTIFICATE_TLS_AUTH", "URI": SECRET},
                {"Type": "SERVER_ROOT_CA_CERTIFICATE", "URI": CA_SECRET},
            ],
        ),
    ],
)
def test_self_managed_kafka_on_a_public_endpoint(
    example_config: TidemarkConfig, auth: dict[str, str] | None, expected: list[dict[str, str]]
) -> None:
    plaintext = {"allow_plaintext_public": True} if auth is None else {}  # said so: refused otherwise
    config = with_source(example_config, kind="kafka", bootstrap_servers=BROKERS, auth=auth, **plaintext)
    _, template = synth_stack(config, nag=False)
    props = mapping(template)
    assert "EventSourceArn" not in props
    assert props["SelfManagedEventSource"] == {"Endpoints": {"KafkaBootstrapServers": BROKERS}}
    assert re.fullmatch(GROUP_OF_ORDERS, props["SelfManagedKafkaEventSourceConfig"]["ConsumerGroupId"])
    assert props.get("SourceAccessConfigurations", []) == expected
    assert props["Topics"] == ["orders"] and props["StartingPosition"] == "TRIM_HORIZON"
    statements = archiver_statements(template)
    secrets = [s for s in statements if "secretsmanager:GetSecretValue" in json.dumps(s["Action"])]
    wanted = [item["URI"] for item in expected]
    assert [s["Resource"] for s in secrets] == ([wanted if len(wanted) > 1 else wanted[0]] if wanted else [])
    assert "kafka" not in json.dumps([s["Action"] for s in statements])  # no MSK action for another cluster
    assert "OffsetLag" in json.dumps(template.find_resources("AWS::CloudWatch::Alarm"))  # lag alarms, as MSK's


def test_self_managed_kafka_in_a_vpc_places_the_pollers_in_its_subnets(example_config: TidemarkConfig) -> None:
    network = {"subnet_ids": SUBNETS, "security_group_ids": GROUPS}
    auth = {"mechanism": "sasl_scram_512", "secret_arn": SECRET, "kms_key_arn": KEY}
    config = with_source(example_config, kind="kafka", bootstrap_servers=BROKERS, auth=auth, network=network)
    _, template = synth_stack(config, nag=False)
    assert mapping(template)["SourceAccessConfigurations"] == [
        {"Type": "SASL_SCRAM_512_AUTH", "URI": SECRET},
        {"Type": "VPC_SUBNET", "URI": f"subnet:{SUBNETS[0]}"},
        {"Type": "VPC_SUBNET", "URI": f"subnet:{SUBNETS[1]}"},
        {"Type": "VPC_SECURITY_GROUP", "URI": f"security_group:{GROUPS[0]}"},
    ]
    [describe] = [s for s in archiver_statements(template) if s.get("Sid") == "KafkaNetworkDescribe"]
    assert set(describe["Action"]) == {"ec2:DescribeVpcs", "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets"}


@pytest.mark.parametrize(
    "source",
    [
        {"auth": {"mechanism": "sasl_scram_512", "secret_arn": MSK_SECRET, "kms_key_arn": KEY}},
        {"auth": {"mechanism": "mtls", "secret_arn": SECRET}},
        {"kind": "kafka", "bootstrap_servers": BROKERS, "auth": {"mechanism": "plain", "secret_arn": SECRET}},
        {
            "kind": "kafka",
            "bootstrap_servers": BROKERS,
            "auth": {"mechanism": "mtls", "secret_arn": SECRET, "root_ca_secret_arn": CA_SECRET, "kms_key_arn": KEY},
            "network": {"subnet_ids": SUBNETS, "security_group_ids": GROUPS},
        },
    ],
    ids=["msk-scram", "msk-mtls", "kafka-plain", "kafka-mtls-vpc"],
)
def test_every_auth_mode_is_nag_clean(example_config: TidemarkConfig, source: dict[str, Any]) -> None:
    assert findings(nagged(with_source(example_config, **source))) == []


REGISTRY = "arn:aws:glue:us-east-1:123456789012:registry/orders"
POLLERS = {"provisioned_pollers": {"minimum": 1, "maximum": 4}}


def with_registry(config: TidemarkConfig, registry: dict[str, Any], **source: Any) -> TidemarkConfig:
    stream = json.loads(config.model_dump_json())["streams"][0]
    stream["source"] = {**stream["source"], **source, "schema_registry": registry}
    stream["archiver"] = {**stream["archiver"], **POLLERS}
    return with_changes(config, streams=[stream])


def test_a_glue_registry_reaches_the_mapping_with_grants_on_it_only(example_config: TidemarkConfig) -> None:
    registry = {"kind": "glue", "registry_arn": REGISTRY, "record_format": "json", "validate": ["key", "value"]}
    stack, template = synth_stack(with_registry(example_config, registry), nag=False)
    assert mapping(template)["AmazonManagedKafkaEventSourceConfig"]["SchemaRegistryConfig"] == {
        "EventRecordFormat": "JSON",
        "SchemaRegistryURI": REGISTRY,
        "SchemaValidationConfigs": [{"Attribute": "KEY"}, {"Attribute": "VALUE"}],
    }
    assert mapping(template)["ProvisionedPollerConfig"] == {"MinimumPollers": 1, "MaximumPollers": 4}
    # unbounded retries and no destination (a bound would abandon a refused batch too): the
    # records the registry cannot decode are dropped by the mapping, and that alarms
    assert "MaximumRetryAttempts" not in mapping(template) and "DestinationConfig" not in mapping(template)
    (alarm,) = [
        a["Properties"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
        if "AbandonedRecords-orders" in json.dumps(a["Properties"]["AlarmName"])
    ]
    names = {m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert names == {"OnFailureDestinationDeliveredEventCount", "DroppedEventCount", "SchemaRegistryErrorCount"}
    # the alarm says where the dropped records are found and how they are archived
    described = alarm["AlarmDescription"]
    assert "`tidemark audit` names their offsets as gaps" in described and "`tidemark recover`" in described
    assert "retention" in described and len(described) <= 1024  # CloudWatch's limit
    # ... and the drop is said at synth, with the way to recover them and to dead-letter them instead
    (warning,) = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(".*cannot decode.*"))
    said = json.dumps(warning.entry.data)
    assert "`tidemark recover` archives them from Kafka as dead letters" in said and "`tidemark audit`" in said
    assert "encoding.wire_format: confluent" in said
    statements = archiver_statements(template)
    assert actions_on(statements, REGISTRY) == {"glue:GetRegistry", "glue:GetSchemaVersion"}
    assert "glue:*" not in json.dumps(statements)


def test_a_confluent_registry_signs_in_with_its_secret(example_config: TidemarkConfig) -> None:
    registry = {
        "kind": "confluent",
        "url": "https://psrc-12345.us-east-1.aws.confluent.cloud",
        "auth": "basic",
        "secret_arn": SECRET,
        "record_format": "source",
    }
    stream = json.loads(example_config.model_dump_json())["streams"][0]
    stream["source"] = {
        "kind": "kafka",
        "topic": "orders",
        "bootstrap_servers": BROKERS,
        "schema_registry": registry,
        "allow_plaintext_public": True,
    }
    stream["archiver"] = {**stream["archiver"], **POLLERS}
    _, template = synth_stack(with_changes(example_config, streams=[stream]), nag=False)
    assert mapping(template)["SelfManagedKafkaEventSourceConfig"]["SchemaRegistryConfig"] == {
        "AccessConfigs": [{"Type": "BASIC_AUTH", "URI": SECRET}],
        "EventRecordFormat": "SOURCE",
        "SchemaRegistryURI": "https://psrc-12345.us-east-1.aws.confluent.cloud",
        "SchemaValidationConfigs": [{"Attribute": "VALUE"}],
    }
    assert actions_on(archiver_statements(template), SECRET) >= {"secretsmanager:GetSecretValue"}


def test_a_registry_is_nag_clean(example_config: TidemarkConfig) -> None:
    assert findings(nagged(with_registry(example_config, {"kind": "glue", "registry_arn": REGISTRY}))) == []
