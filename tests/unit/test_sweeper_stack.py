"""The sweeper construct: functions, state machine, schedule and least-privilege grants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Capture, Match, Template

from stacks.functions import Placement
from stacks.grants import ArchiveAccess
from stacks.network import NetworkConstruct
from stacks.staging import StagingConstruct
from stacks.storage import StorageConstruct
from stacks.sweeper import SweeperConstruct
from tests.support.cdk import cdk_context
from tidemark.config import TidemarkConfig
from tidemark.exceptions import ConfigError

REPO = Path(__file__).resolve().parents[2]


def build(config: TidemarkConfig, code_dir: Path = REPO / "functions" / "sweeper") -> Stack:
    """The sweeper in a bare stack with the storage, network and staging it needs."""
    stack = Stack(App(context=cdk_context()), "Test")
    storage = StorageConstruct(stack, "Storage", config=config)
    network = NetworkConstruct(stack, "Network", settings=config.network)
    staging = StagingConstruct(stack, "Staging", vpc=network.vpc, subnets=network.subnets)
    layer = lambda_.LayerVersion(stack, "Layer", code=lambda_.Code.from_asset(str(REPO / "layers" / "core")))
    SweeperConstruct(
        stack,
        "Sweeper",
        config=config,
        code_dir=code_dir,
        layer=layer,
        access=ArchiveAccess(storage.bucket, storage.encryption_key),
        ledger_table=storage.ledger_table,
        environment={"TIDEMARK_STAGING_ROOT": "/mnt/staging"},
        placement=Placement(
            vpc=network.vpc,
            subnets=network.subnets,
            security_group=network.function_security_group,
            filesystem=staging.mount,
        ),
    )
    return stack


@pytest.fixture(scope="module")
def template(example_config: TidemarkConfig) -> Template:
    return Template.from_stack(build(example_config))


def test_one_function_per_step_from_the_sweeper_code(template: Template) -> None:
    functions = template.find_resources("AWS::Lambda::Function")
    # (CDK's own custom resource that empties the VPC's default security group is the other one)
    handlers = sorted(
        fn["Properties"]["Handler"]
        for fn in functions.values()
        if fn["Properties"]["Handler"] != "__entrypoint__.handler"
    )
    assert handlers == [
        "handler.complete_hours",
        "handler.list_partitions",
        "handler.reconcile",
        "handler.sweep_partition",
    ]
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": "handler.sweep_partition",
            "Runtime": "python3.13",
            "Timeout": 270,  # ends well within one sweeper interval (5 minutes)
            "FileSystemConfigs": [Match.object_like({"LocalMountPath": "/mnt/staging"})],
            "VpcConfig": Match.object_like({"SubnetIds": Match.any_value()}),
            "Environment": {"Variables": Match.object_like({"TIDEMARK_STAGING_ROOT": "/mnt/staging"})},
        },
    )


def test_state_machine_sweeps_each_partition_then_reconciles_then_completes_hours(template: Template) -> None:
    definition = Capture()
    template.has_resource_properties("AWS::StepFunctions::StateMachine", {"DefinitionString": definition})
    text = "".join(part if isinstance(part, str) else "<arn>" for part in definition.as_object()["Fn::Join"][1])
    states = json.loads(text)
    assert states["StartAt"] == "ListPartitions"
    order = ["ListPartitions", "SweepEachPartition", "Reconcile", "CompleteHours", "TallySweeps", "AnySweepFailed"]
    assert [states["States"][name].get("Next") for name in order] == [*order[1:], None]
    each = states["States"]["SweepEachPartition"]
    assert (each["Type"], each["ItemsPath"], each["MaxConcurrency"], each["ResultPath"]) == (
        "Map",
        "$.partitions",
        8,
        "$.sweep_failed",
    )
    iteration = each["ItemProcessor"]["States"]
    sweep = iteration["SweepPartition"]
    assert any(retry["ErrorEquals"] == ["States.TaskFailed"] for retry in sweep["Retry"])
    # a partition that keeps failing is caught: it never stops the others or the later steps ...
    assert sweep["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "SweepFailed"}]
    assert (iteration["SweepFailed"]["Result"], iteration["Swept"]["Result"]) == (True, False)
    assert states["States"]["Reconcile"]["Catch"][0]["Next"] == "CompleteHours"
    # ... but the execution then fails, so the sweeper-failure alarm sees it
    tally = states["States"]["TallySweeps"]
    assert tally["Parameters"] == {"any.$": "States.ArrayContains($.sweep_failed, true)"}
    (choice,) = states["States"]["AnySweepFailed"]["Choices"]
    assert (choice["Variable"], choice["BooleanEquals"], choice["Next"]) == (
        "$.sweeps_failed.any",
        True,
        "PartitionSweepFailed",
    )
    assert states["States"]["PartitionSweepFailed"]["Type"] == "Fail"
    assert states["States"]["AnySweepFailed"]["Default"] == "SweptEveryPartition"


def definition_of(template: Template) -> dict[str, Any]:
    definition = Capture()
    template.has_resource_properties("AWS::StepFunctions::StateMachine", {"DefinitionString": definition})
    text = "".join(part if isinstance(part, str) else "<arn>" for part in definition.as_object()["Fn::Join"][1])
    states: dict[str, Any] = json.loads(text)
    return states


def test_an_execution_may_outlast_its_interval_by_one_unit_of_work(template: Template) -> None:
    """Issue 27, finding 5: TimeoutSeconds was the interval (300 s), while SweepPartition alone
    could take 270 s and two retries, so a slow partition timed every execution out before
    Reconcile and CompleteHours. The steps now stop starting work within 95 % of the interval
    (tidemark.sweeper.budget); what one of them started may still run to its function's timeout
    (270 s), so the execution gets the interval, that, and a minute for retries' waits."""
    functions = template.find_resources("AWS::Lambda::Function")
    step_timeout = max(
        fn["Properties"]["Timeout"]
        for fn in functions.values()
        if fn["Properties"]["Handler"] in ("handler.sweep_partition", "handler.reconcile", "handler.complete_hours")
    )
    assert step_timeout == 270
    assert definition_of(template)["TimeoutSeconds"] == 300 + 270 + 60


def test_every_step_with_a_budget_gets_the_execution_start(template: Template) -> None:
    """The origin of each step's time budget is the execution's start, in its payload."""
    states = definition_of(template)["States"]
    each = states["SweepEachPartition"]
    assert each["ItemSelector"] == {
        "stream.$": "$$.Map.Item.Value.stream",
        "partition.$": "$$.Map.Item.Value.partition",
        "execution_started.$": "$$.Execution.StartTime",
    }
    assert "Parameters" not in each["ItemProcessor"]["States"]["SweepPartition"]  # the item, as selected
    for step in ("Reconcile", "CompleteHours"):  # the start only: not the state with every partition
        assert states[step]["Parameters"] == {"execution_started.$": "$$.Execution.StartTime"}


def test_schedule_runs_the_state_machine_every_interval(template: Template) -> None:
    machine = Capture()
    template.has_resource_properties(
        "AWS::Events::Rule",
        {"ScheduleExpression": "rate(5 minutes)", "Targets": [Match.object_like({"Arn": {"Ref": machine}})]},
    )
    assert machine.as_string() in template.find_resources("AWS::StepFunctions::StateMachine")


def statements_of(template: Template, handler: str) -> list[dict[str, Any]]:
    functions = template.find_resources("AWS::Lambda::Function")
    (role,) = [
        fn["Properties"]["Role"]["Fn::GetAtt"][0] for fn in functions.values() if fn["Properties"]["Handler"] == handler
    ]
    policies = template.find_resources("AWS::IAM::Policy")
    return [
        statement
        for policy in policies.values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def actions(statements: list[dict[str, Any]]) -> set[str]:
    found: set[str] = set()
    for statement in statements:
        action = statement["Action"]
        found.update([action] if isinstance(action, str) else action)
    return found


def test_reconciliation_can_read_but_never_write_or_delete_objects(template: Template) -> None:
    granted = actions(statements_of(template, "handler.reconcile"))
    assert {"s3:GetObject", "s3:ListBucket"} <= granted
    assert not {a for a in granted if a.startswith("s3:") and ("Put" in a or "Delete" in a)}
    assert "*" not in granted


def test_reconciliation_lists_only_the_streams_folders(template: Template) -> None:
    (listing,) = [s for s in statements_of(template, "handler.reconcile") if s["Action"] == "s3:ListBucket"]
    assert sorted(listing["Condition"]["StringLike"]["s3:prefix"]) == [
        "errors/orders/",
        "errors/orders/*",
        "raw/orders/",
        "raw/orders/*",
    ]


@pytest.mark.parametrize(
    "handler",
    ["handler.list_partitions", "handler.sweep_partition", "handler.reconcile", "handler.complete_hours"],
)
def test_no_step_can_delete_objects_or_ledger_items_or_scan(template: Template, handler: str) -> None:
    granted = actions(statements_of(template, handler))
    assert not {a for a in granted if a.startswith(("s3:", "dynamodb:")) and "Delete" in a}, granted
    assert not {"dynamodb:Scan", "dynamodb:BatchWriteItem", "*"} & granted
    assert {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query"} <= granted


def test_complete_hours_writes_only_under_the_manifests_prefix(template: Template) -> None:
    puts = [s for s in statements_of(template, "handler.complete_hours") if "s3:PutObject" in actions([s])]
    assert len(puts) == 1
    resource = json.dumps(puts[0]["Resource"])
    assert "/manifests/*" in resource


def test_a_code_directory_without_a_handler_is_refused(example_config: TidemarkConfig, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"has no handler\.py"):
        build(example_config, code_dir=tmp_path)
