"""Redeploying a Kafka stream's event source mapping under CloudFormation's and Lambda's rules.

A mapping re-pointed at another cluster, brokers or topic, or given another starting position,
must come out of ``cdk deploy`` reading what the configuration says, or the deploy must roll back
with the old mapping untouched (nothing lost) and only in the cases the README documents. The
deploy model (``tests/support/cfn_deploy.py``) holds AWS's rules; the reference below says, from
the two configurations alone, which deploys AWS refuses.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stacks.source import consumer_group_id, kafka_mapping_identity
from tests.conftest import EXAMPLE_CONFIG
from tests.support.cdk import synth_stack
from tests.support.cfn_deploy import Account, RolledBack, create_only_properties, group_id
from tidemark.config import StreamConfig, TidemarkConfig, parse_config
from tidemark.config.loader import load_config

CLUSTER_A = "arn:aws:kafka:us-east-1:123456789012:cluster/tidemark-demo/4f3e2d1c-0b9a-4c8d-9e7f-6a5b4c3d2e1f-1"
CLUSTER_B = "arn:aws:kafka:us-east-1:123456789012:cluster/archive-b/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d-2"
BROKERS_A = ["pkc-aaaaa.us-east-1.aws.confluent.cloud:9092"]
BROKERS_B = ["pkc-bbbbb.us-east-1.aws.confluent.cloud:9092"]

#: one change a deploy can make to the stream's source: (the setting it changes, its values)
CHANGES: dict[str, tuple[str, dict[str, Any]]] = {
    "cluster A": (
        "where",
        {"kind": "msk", "cluster_arn": CLUSTER_A, "bootstrap_servers": None, "allow_plaintext_public": False},
    ),
    "cluster B": (
        "where",
        {"kind": "msk", "cluster_arn": CLUSTER_B, "bootstrap_servers": None, "allow_plaintext_public": False},
    ),
    "brokers A": (
        "where",
        {"kind": "kafka", "cluster_arn": None, "bootstrap_servers": BROKERS_A, "allow_plaintext_public": True},
    ),
    "brokers B": (
        "where",
        {"kind": "kafka", "cluster_arn": None, "bootstrap_servers": BROKERS_B, "allow_plaintext_public": True},
    ),
    "topic orders": ("topic", {"topic": "orders"}),
    "topic payments": ("topic", {"topic": "payments"}),
    "from the start": ("start", {"starting_position": "TRIM_HORIZON"}),
    "from the end": ("start", {"starting_position": "LATEST"}),
    "batch 1000": ("batch", {"batch_size": 1000}),
    "batch 500": ("batch", {"batch_size": 500}),
    "default group": ("group", {"consumer_group_id": None}),
    "group g1": ("group", {"consumer_group_id": "archive-g1"}),
    "group g2": ("group", {"consumer_group_id": "archive-g2"}),
}


def canonical(changes: tuple[str, ...]) -> tuple[str, ...]:
    """The configuration after ``changes``, named by the last change to each setting (so
    templates are cached per configuration)."""
    latest = {CHANGES[change][0]: change for change in changes}
    return tuple(sorted(latest.values()))


def configured(changes: tuple[str, ...]) -> TidemarkConfig:
    data = json.loads(load_config(EXAMPLE_CONFIG).model_dump_json())
    for change in changes:
        data["streams"][0]["source"].update(CHANGES[change][1])
    return parse_config(data)


def stream_of(changes: tuple[str, ...]) -> StreamConfig:
    return configured(changes).streams[0]


@cache
def template_of(changes: tuple[str, ...]) -> dict[str, Any]:
    """The synthesized template of the configuration after ``changes`` (cached: a synth takes seconds)."""
    _, template = synth_stack(configured(changes), nag=False)
    return template.to_json()  # type: ignore[no-any-return]


def refused_by_aws(before: StreamConfig, after: StreamConfig) -> bool:
    """The reference: which deploys AWS refuses (README, "Re-pointing a Kafka stream").

    A new identity or a new group is a new mapping. AWS refuses it next to the old one when it
    reads the same event source and topic (a new starting position alone, a new group alone), or
    when it names the group the old one holds (a configured group kept across a new identity).
    """

    def place(stream: StreamConfig) -> tuple[object, ...]:
        src = stream.source
        return (src.kind, src.cluster_arn, src.bootstrap_servers, src.topic)

    new_identity = kafka_mapping_identity(before) != kafka_mapping_identity(after)
    new_mapping = new_identity or consumer_group_id(before) != consumer_group_id(after)
    kept_group = new_identity and consumer_group_id(before) == consumer_group_id(after)
    return new_mapping and (place(before) == place(after) or kept_group)


def reads_as_configured(account: Account, stream: StreamConfig) -> None:
    [live] = account.mappings.values()
    src = stream.source
    assert live.topics == (src.topic,)
    assert live.props["StartingPosition"] == src.starting_position
    assert live.props["BatchSize"] == src.batch_size
    assert group_id(live.props) == consumer_group_id(stream)
    if src.kind == "kafka":
        assert live.props["SelfManagedEventSource"] == {"Endpoints": {"KafkaBootstrapServers": src.bootstrap_servers}}
    else:
        assert live.props["EventSourceArn"] == src.cluster_arn


# -- the model's rules --------------------------------------------------------------------------


def test_replacing_properties_come_from_the_resource_schema() -> None:
    assert {"EventSourceArn", "SelfManagedEventSource", "StartingPosition"} <= create_only_properties()
    assert "Topics" not in create_only_properties()  # hence cloudformation-coverage-roadmap#2140


def _template(**mappings: dict[str, Any]) -> dict[str, Any]:
    base = {"FunctionName": {"Ref": "Fn"}, "StartingPosition": "TRIM_HORIZON", "Topics": ["orders"]}
    return {
        "Resources": {
            name: {"Type": "AWS::Lambda::EventSourceMapping", "Properties": {**base, **props}}
            for name, props in mappings.items()
        }
    }


def test_the_model_refuses_a_group_another_mapping_holds() -> None:
    account = Account()
    account.deploy(
        _template(A={"EventSourceArn": CLUSTER_A, "AmazonManagedKafkaEventSourceConfig": {"ConsumerGroupId": "g"}})
    )
    with pytest.raises(RolledBack, match="consumer group id 'g' is in use"):
        account.deploy(
            _template(B={"EventSourceArn": CLUSTER_B, "AmazonManagedKafkaEventSourceConfig": {"ConsumerGroupId": "g"}})
        )
    assert list(account.mappings) == ["A"]  # rolled back: the old mapping stays


def test_the_model_refuses_a_second_mapping_of_one_source_function_and_topic() -> None:
    account = Account()
    account.deploy(_template(A={"EventSourceArn": CLUSTER_A}))
    with pytest.raises(RolledBack, match="event source, function and topics already exists"):
        account.deploy(_template(A={"EventSourceArn": CLUSTER_A, "StartingPosition": "LATEST"}))
    account.deploy(_template(B={"EventSourceArn": CLUSTER_A, "Topics": ["payments"]}))  # another topic
    assert list(account.mappings) == ["B"]


def test_the_model_keeps_the_topic_and_refuses_a_new_group_on_update() -> None:
    account = Account()
    group = {"AmazonManagedKafkaEventSourceConfig": {"ConsumerGroupId": "g"}}
    account.deploy(_template(A={"EventSourceArn": CLUSTER_A, **group}))
    account.deploy(_template(A={"EventSourceArn": CLUSTER_A, "Topics": ["payments"], **group}))
    assert account.mappings["A"].topics == ("orders",)  # "updated", still reading orders
    with pytest.raises(RolledBack, match="cannot be updated"):
        account.deploy(
            _template(A={"EventSourceArn": CLUSTER_A, "AmazonManagedKafkaEventSourceConfig": {"ConsumerGroupId": "h"}})
        )


# -- Tidemark's mappings under them -------------------------------------------------------------


@pytest.mark.parametrize("change", ["cluster B", "brokers A", "topic payments", "batch 500"])
def test_a_redeploy_reads_what_the_configuration_says(change: str) -> None:
    """Failing first: the same group id for the new cluster's mapping (refused while the old
    exists), and a new topic "updated" onto the old mapping, which kept reading the old topic."""
    account = Account()
    account.deploy(template_of(()))
    reads_as_configured(account, stream_of(()))
    account.deploy(template_of(canonical((change,))))
    reads_as_configured(account, stream_of((change,)))


@pytest.mark.parametrize("change", ["from the end", "group g1"])
def test_a_new_starting_position_or_group_alone_is_refused_and_nothing_changes(change: str) -> None:
    account = Account()
    account.deploy(template_of(()))
    with pytest.raises(RolledBack, match="event source, function and topics already exists"):
        account.deploy(template_of(canonical((change,))))
    reads_as_configured(account, stream_of(()))


def test_a_configured_group_kept_across_a_new_cluster_is_refused() -> None:
    account = Account()
    account.deploy(template_of(("group g1",)))
    with pytest.raises(RolledBack, match="consumer group id 'archive-g1' is in use"):
        account.deploy(template_of(canonical(("group g1", "cluster B"))))
    reads_as_configured(account, stream_of(("group g1",)))
    account.deploy(template_of(canonical(("group g2", "cluster B"))))  # both in one deploy
    reads_as_configured(account, stream_of(("cluster B", "group g2")))


def test_a_new_mapping_gets_a_new_group_and_an_unchanged_one_keeps_its_own() -> None:
    base = stream_of(())
    assert consumer_group_id(base) == f"tidemark-orders-{kafka_mapping_identity(base)}"
    assert consumer_group_id(stream_of(("batch 500",))) == consumer_group_id(base)
    groups = {
        consumer_group_id(stream_of((change,)))
        for change in ("cluster B", "brokers A", "topic payments", "from the end")
    }
    assert len(groups) == 4 and consumer_group_id(base) not in groups


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(CHANGES)), min_size=1, max_size=4))
def test_every_sequence_of_redeploys_matches_the_reference(steps: list[str]) -> None:
    """Each deploy of a generated sequence either reads what its configuration says, or is
    refused exactly where the reference says and leaves the mapping as it was."""
    account = Account()
    account.deploy(template_of(()))
    deployed: tuple[str, ...] = ()
    for step in steps:
        wanted = canonical((*deployed, step))
        before, after = stream_of(deployed), stream_of(wanted)
        try:
            account.deploy(template_of(wanted))
        except RolledBack:
            assert refused_by_aws(before, after), f"refused: {deployed} -> {wanted}"
            reads_as_configured(account, before)
            continue
        assert not refused_by_aws(before, after), f"deployed, but AWS refuses: {deployed} -> {wanted}"
        reads_as_configured(account, after)
        deployed = wanted
