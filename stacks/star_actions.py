"""No wildcard that can hide: every ``Resource: "*"`` of the stack's policies, checked per action.

cdk-nag's ``AwsSolutions-IAM5`` can be suppressed only per resource string: one suppression of
``Resource::*`` on a role covers any action on ``*``, so ``dynamodb:DeleteTable`` added there
would be reported as suppressed. :class:`StarResourceCheck` is an Aspect that every Tidemark
stack and ``TidemarkArchive`` construct applies to its own subtree: an Allow statement whose
resources include ``*`` may carry only the actions of :data:`STAR_ACTIONS` (each with why AWS
needs ``*`` for it), or those of :data:`CONDITIONED_STAR_ACTIONS` under the condition key named
there; any other action, or any action with a wildcard in it, is a synth error on the policy
(``cdk synth`` fails; ``aws_cdk.assertions.Annotations`` finds it in tests).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import jsii
from aws_cdk import Annotations, IAspect, Stack
from aws_cdk import aws_iam as iam
from constructs import IConstruct

_EC2_DESCRIBE = (
    "EC2's Describe* actions have no resource-level permissions: AWS authorizes them only on '*' "
    "(Service Authorization Reference, Amazon EC2)"
)
_ENI = (
    "Lambda creates and deletes the network interfaces itself, as the role, when it places the function "
    "(or the mapping's pollers) in the VPC; the action has resource-level permissions, but AWS documents the "
    "execution role's grant on '*' (AWSLambdaVPCAccessExecutionRole) and Lambda validates the role when the "
    "function is created, which this project cannot run against a real account: kept on '*'"
)
_XRAY = "X-Ray's trace and sampling actions have no resource types (Service Authorization Reference, AWS X-Ray)"
_LOG_DELIVERY = (
    "Step Functions' log delivery to CloudWatch Logs: these actions have no resource types, and AWS documents "
    "the state machine role's grant on '*' (Step Functions, 'Logging using CloudWatch Logs')"
)

#: actions AWS authorizes only on ``Resource: "*"`` (or that AWS itself performs as the role and
#: documents on "*"), with why
STAR_ACTIONS: dict[str, str] = {
    "ec2:DescribeNetworkInterfaces": _EC2_DESCRIBE,
    "ec2:DescribeSubnets": _EC2_DESCRIBE,
    "ec2:DescribeVpcs": _EC2_DESCRIBE,
    "ec2:DescribeSecurityGroups": _EC2_DESCRIBE,
    "ec2:CreateNetworkInterface": _ENI,
    "ec2:DeleteNetworkInterface": _ENI,
    "ec2:AssignPrivateIpAddresses": _ENI,
    "ec2:UnassignPrivateIpAddresses": _ENI,
    "xray:PutTraceSegments": _XRAY,
    "xray:PutTelemetryRecords": _XRAY,
    "xray:GetSamplingRules": _XRAY,
    "xray:GetSamplingTargets": _XRAY,
    "logs:CreateLogDelivery": _LOG_DELIVERY,
    "logs:GetLogDelivery": _LOG_DELIVERY,
    "logs:UpdateLogDelivery": _LOG_DELIVERY,
    "logs:DeleteLogDelivery": _LOG_DELIVERY,
    "logs:ListLogDeliveries": _LOG_DELIVERY,
    "logs:PutResourcePolicy": _LOG_DELIVERY,
    "logs:DescribeResourcePolicies": _LOG_DELIVERY,
    "logs:DescribeLogGroups": _LOG_DELIVERY,
}
#: actions allowed on ``*`` only under a condition that narrows them (the condition key they need)
CONDITIONED_STAR_ACTIONS: dict[str, str] = {
    # PutMetricData has no resource type; the namespace condition keeps the role to Tidemark's
    "cloudwatch:PutMetricData": "cloudwatch:namespace",
}


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _condition_keys(statement: dict[str, Any]) -> set[str]:
    conditions = statement.get("Condition") or {}
    return {key.lower() for operator in conditions.values() if isinstance(operator, dict) for key in operator}


def star_findings(document: dict[str, Any]) -> list[str]:
    """What a policy document grants on ``*`` that it may not: one line per action."""
    findings = []
    for statement in _listed(document.get("Statement", [])):
        if statement.get("Effect") != "Allow" or "*" not in _listed(statement.get("Resource", [])):
            continue
        keys = _condition_keys(statement)
        for action in _listed(statement.get("Action", [])):
            if not isinstance(action, str) or "*" in action or "?" in action:
                findings.append(f"{json.dumps(action)} on Resource '*': a wildcard action may grant anything")
            elif action in STAR_ACTIONS:
                continue
            elif action in CONDITIONED_STAR_ACTIONS:
                needed = CONDITIONED_STAR_ACTIONS[action]
                if needed.lower() not in keys:
                    findings.append(f"{action} on Resource '*' without a {needed} condition")
            else:
                findings.append(
                    f"{action} on Resource '*': not an action AWS authorizes only on '*' "
                    "(stacks/star_actions.py lists those, each with its reason); scope it to its resources"
                )
    return findings


def _documents(node: IConstruct) -> Iterable[Any]:
    if isinstance(node, iam.CfnPolicy | iam.CfnManagedPolicy):
        yield node.policy_document
    elif isinstance(node, iam.CfnRole):
        for policy in _listed(Stack.of(node).resolve(node.policies) or []):
            yield policy.get("PolicyDocument") if isinstance(policy, dict) else policy


@jsii.implements(IAspect)
class StarResourceCheck:
    """An error on every IAM policy of the subtree that grants an action on ``*`` which
    :data:`STAR_ACTIONS` (or :data:`CONDITIONED_STAR_ACTIONS`, with its condition) does not list."""

    def visit(self, node: IConstruct) -> None:
        for document in _documents(node):
            resolved = Stack.of(node).resolve(document)
            if not isinstance(resolved, dict):
                continue
            for finding in star_findings(resolved):
                Annotations.of(node).add_error(f"Tidemark star-resource check: {finding}")
