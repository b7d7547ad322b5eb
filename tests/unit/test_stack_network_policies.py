"""Issue 31, part 3: no way out. The gateway endpoints admit only this account's buckets and
tables; the functions' HTTPS egress goes to the VPC's range and the S3/DynamoDB prefix lists, not
0.0.0.0/0, whenever those are known; an existing VPC whose subnets are not isolated is warned
about. Asserted on the synthesized template (no VPC runs here)."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Annotations, Match

from tests.support.cdk import TEST_ENV, cdk_context, logical_id, synth_stack, with_changes
from tests.unit.test_stack_variants import SUBNETS, VPC_ID, VPC_LOOKUP
from tidemark.config import TidemarkConfig

PREFIX_LISTS = {"s3": "pl-63a5400a", "dynamodb": "pl-02cd2c6b"}
NOT_ISOLATED = "tidemark:subnets-not-isolated"
OPEN_EGRESS = "tidemark:egress-anywhere"


def endpoint(template: Any, service: str) -> dict[str, Any]:
    (found,) = [
        body["Properties"]
        for body in template.find_resources("AWS::EC2::VPCEndpoint").values()
        if body["Properties"].get("VpcEndpointType", "Gateway") == "Gateway"
        and f".{service}" in json.dumps(body["Properties"]["ServiceName"])
    ]
    return found


def egress(stack: Any, template: Any) -> list[dict[str, Any]]:
    group = logical_id(stack.network.function_security_group)
    inline = template.find_resources("AWS::EC2::SecurityGroup")[group]["Properties"].get("SecurityGroupEgress", [])
    separate = [
        body["Properties"]
        for body in template.find_resources("AWS::EC2::SecurityGroupEgress").values()
        if body["Properties"]["GroupId"] == {"Fn::GetAtt": [group, "GroupId"]}
    ]
    return [*inline, *separate]


def warnings(stack: Any, code: str) -> list[Any]:
    return Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(code))


def test_the_gateway_endpoints_admit_only_this_accounts_buckets_and_tables(example_config: TidemarkConfig) -> None:
    _stack, template = synth_stack(example_config, nag=False)
    (s3,) = endpoint(template, "s3")["PolicyDocument"]["Statement"]
    assert s3["Effect"] == "Allow" and s3["Principal"] == {"AWS": "*"} and s3["Resource"] == "*"
    assert s3["Condition"] == {"StringEquals": {"aws:ResourceAccount": {"Ref": "AWS::AccountId"}}}
    (tables,) = endpoint(template, "dynamodb")["PolicyDocument"]["Statement"]
    assert tables["Action"] == "dynamodb:*" and "Condition" not in tables
    rendered = json.dumps(tables["Resource"])
    assert ":dynamodb:" in rendered and '{"Ref": "AWS::AccountId"}' in rendered and ":table/*" in rendered


def test_egress_goes_to_the_vpc_and_the_prefix_lists_when_they_are_configured(example_config: TidemarkConfig) -> None:
    config = with_changes(example_config, network={"prefix_list_ids": PREFIX_LISTS})
    stack, template = synth_stack(config, nag=False)
    rules = egress(stack, template)
    https = [rule for rule in rules if rule["FromPort"] == 443]
    assert not any(rule.get("CidrIp") == "0.0.0.0/0" for rule in rules)
    assert sorted(rule["DestinationPrefixListId"] for rule in https if "DestinationPrefixListId" in rule) == sorted(
        PREFIX_LISTS.values()
    )
    assert [rule["CidrIp"] for rule in https if "CidrIp" in rule] == [
        {"Fn::GetAtt": [logical_id(stack.network.vpc), "CidrBlock"]}
    ]
    assert {rule["FromPort"] for rule in rules} == {443, 2049}  # HTTPS, and NFS to the file system
    assert warnings(stack, OPEN_EGRESS) == []


def test_egress_is_looked_up_for_a_stack_with_an_account_and_region(example_config: TidemarkConfig) -> None:
    stack, template = synth_stack(example_config, env=TEST_ENV, nag=False)
    rules = egress(stack, template)
    assert not any(rule.get("CidrIp") == "0.0.0.0/0" for rule in rules)
    assert any("DestinationPrefixListId" in rule for rule in rules)  # the lookups' (here: CDK's dummy) ids


def test_open_egress_is_warned_about_when_the_prefix_lists_are_unknown(example_config: TidemarkConfig) -> None:
    stack, template = synth_stack(example_config, nag=False)  # environment-agnostic: nothing to look up
    assert any(rule.get("CidrIp") == "0.0.0.0/0" for rule in egress(stack, template))
    assert len(warnings(stack, OPEN_EGRESS)) == 1


def test_an_existing_vpc_whose_subnets_are_not_isolated_is_warned_about(example_config: TidemarkConfig) -> None:
    config = with_changes(example_config, network={"vpc_id": VPC_ID, "subnet_ids": SUBNETS})
    stack, _template = synth_stack(config, context=cdk_context(**VPC_LOOKUP), env=TEST_ENV, nag=False)
    (found,) = warnings(stack, NOT_ISOLATED)
    assert all(subnet in found.entry.data for subnet in SUBNETS)
    isolated = json.loads(json.dumps(VPC_LOOKUP))
    (response,) = isolated.values()
    response["subnetGroups"][0].update(name="Isolated", type="Isolated")
    stack, _template = synth_stack(config, context=cdk_context(**isolated), env=TEST_ENV, nag=False)
    assert warnings(stack, NOT_ISOLATED) == []
    # an existing VPC without the stack's endpoints: its routes decide how Kinesis is reached, egress stays open
    assert len(warnings(stack, OPEN_EGRESS)) == 1
