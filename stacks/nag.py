"""cdk-nag AwsSolutions checks on the stack, with every suppression and its reason in one place.

Suppressions are attached to the constructs they concern (found by type, not by path) and name
the exact finding (``applies_to``) where cdk-nag supports it, so a new wildcard elsewhere still
fails the checks.
"""

from __future__ import annotations

from aws_cdk import Aspects
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from cdk_nag import AwsSolutionsChecks, NagPackSuppression, NagSuppressions
from constructs import IConstruct

from stacks.functions import TidemarkFunction
from stacks.operators import OperatorAccess

#: object grants scoped to a key prefix of the archive bucket (raw/<stream>/*, manifests/*, ...)
ARCHIVE_PREFIX_OBJECTS = {"regex": "/^Resource::<[A-Za-z0-9]*ArchiveBucket[A-Za-z0-9]*\\.Arn>\\/.+\\/\\*$/g"}
#: lambda:InvokeFunction on a function's versions and aliases (what LambdaInvoke grants)
FUNCTION_VERSIONS = {"regex": "/^Resource::<[A-Za-z0-9]+Function[A-Za-z0-9]*\\.Arn>:\\*$/g"}
#: glue:GetSchemaVersion on the schemas of the stream's Glue schema registry (what GlueSchemaRegistry grants)
GLUE_REGISTRY_SCHEMAS = {
    "regex": '/^Resource::\\["arn:\\$\\{AWS::Partition\\}:glue:\\$\\{AWS::Region\\}:\\$\\{AWS::AccountId\\}'
    ':schema\\/\\$\\{registryName\\}\\/\\*",\\{"registryName":"[A-Za-z0-9_$#-]+"\\}\\]$/g'
}
#: cloudformation:DescribeStacks on the stack's own ARN (its id, the last part, is made at deploy)
OWN_STACK = {
    "regex": "/^Resource::arn:<AWS::Partition>:cloudformation:<AWS::Region>:<AWS::AccountId>"
    ":stack\\/[A-Za-z0-9-]+\\/\\*$/g"
}
JOB_RUNS = {"regex": "/^Resource::arn:<AWS::Partition>:emr-serverless:.*\\/jobruns\\/\\*$/g"}
#: logs:DescribeLogGroups in the account and region (what EMR Serverless's CloudWatch logging asks of the job role)
ACCOUNT_LOG_GROUPS = "Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:*"

PREFIX_REASON = (
    "Object-level S3 actions scoped to one key prefix of the archive bucket (a stream's raw/ or errors/ "
    "folder, the manifests folder or the mapping's aws/lambda/ on-failure folder); keys below it are made at run time."
)
STAR_FUNCTION_REASON = (
    "Resource '*' only for the actions stacks/star_actions.py lists, each with its reason, which its "
    "StarResourceCheck aspect enforces per action (this suppression cannot): EC2's Describe* (no "
    "resource-level permissions: the Kafka mappings' DescribeVpcs/DescribeSecurityGroups/DescribeSubnets), "
    "the network interface actions Lambda performs as the role when it places the function, or the Amazon MQ "
    "(RabbitMQ) mapping's pollers in the broker's VPC (documented by AWS on '*'), and X-Ray's trace actions "
    "(no resource types)."
)


def _suppress(construct: IConstruct, rule: str, reason: str, *applies_to: object) -> None:
    NagSuppressions.add_resource_suppressions(
        construct,
        [NagPackSuppression(id=rule, reason=reason, applies_to=list(applies_to) or None)],  # type: ignore[arg-type]
        apply_to_children=True,
    )


def apply_nag(scope: IConstruct) -> None:
    """cdk-nag's AwsSolutions checks on ``scope`` (a stack, or a ``TidemarkArchive`` in a stack of
    another app) and everything below it, with Tidemark's suppressions."""
    Aspects.of(scope).add(AwsSolutionsChecks(verbose=True))
    for construct in scope.node.find_all():
        if isinstance(construct, TidemarkFunction):
            _suppress(
                construct.function,
                "AwsSolutions-L1",
                "Python 3.13 (Amazon Linux 2023), not 3.14: the layers' wheels are resolved for cp313, and the "
                "formats layer's pyarrow 20 (the last with manylinux2014 wheels) has none for cp314; moving the "
                "runtime is a deliberate change of both (stacks/layer.py, LAMBDA_RUNTIME).",
            )
            _suppress(construct.role, "AwsSolutions-IAM5", STAR_FUNCTION_REASON, "Resource::*")
            _suppress(construct.role, "AwsSolutions-IAM5", PREFIX_REASON, ARCHIVE_PREFIX_OBJECTS)
            _suppress(
                construct.role,
                "AwsSolutions-IAM5",
                "glue:GetSchemaVersion on the schemas of the one Glue schema registry the stream's mapping "
                "validates records with (source.schema_registry); its schemas are registered by the producers.",
                GLUE_REGISTRY_SCHEMAS,
            )
        elif isinstance(construct, sfn.StateMachine):
            _suppress(
                construct.role,
                "AwsSolutions-IAM5",
                "Resource '*' only for X-Ray (PutTraceSegments, PutTelemetryRecords, GetSampling*) and CloudWatch "
                "Logs delivery (logs:*LogDelivery*, DescribeResourcePolicies, DescribeLogGroups), which have no "
                "resource-level permissions.",
                "Resource::*",
            )
            _suppress(
                construct.role,
                "AwsSolutions-IAM5",
                "lambda:InvokeFunction on the step's own function, including its versions and aliases.",
                FUNCTION_VERSIONS,
            )
            _suppress(
                construct.role,
                "AwsSolutions-IAM5",
                "GetJobRun/CancelJobRun on the job runs of Tidemark's own application; run ids are made per run.",
                JOB_RUNS,
            )
        elif isinstance(construct, ec2.InterfaceVpcEndpoint):
            _suppress(
                construct,
                "CdkNagValidationFailure",
                "The endpoint's security group admits HTTPS from the VPC's own CIDR block, a token cdk-nag "
                "cannot evaluate (AwsSolutions-EC23); it is never 0.0.0.0/0.",
            )
        elif isinstance(construct, s3.Bucket) and construct.node.id == "AccessLogsBucket":
            _suppress(
                construct,
                "AwsSolutions-S1",
                "This is the access-log bucket of the archive bucket; logging it to itself would log its own writes.",
            )
        elif isinstance(construct, OperatorAccess):
            _suppress(construct.policy, "AwsSolutions-IAM5", PREFIX_REASON, ARCHIVE_PREFIX_OBJECTS)
            _suppress(
                construct.policy,
                "AwsSolutions-IAM5",
                "cloudformation:DescribeStacks on this stack only (--stack-name reads its outputs); the stack's id, "
                "the last part of its ARN, is made when it is created.",
                OWN_STACK,
            )
        elif isinstance(construct, iam.Role) and construct.node.id == "JobRole":
            _suppress(construct, "AwsSolutions-IAM5", PREFIX_REASON, ARCHIVE_PREFIX_OBJECTS)
            _suppress(
                construct,
                "AwsSolutions-IAM5",
                "Resource '*' only for cloudwatch:PutMetricData, which has no resource-level permissions; the "
                "statement is conditioned on cloudwatch:namespace = Tidemark, the job's metrics' namespace.",
                "Resource::*",
            )
            _suppress(
                construct,
                "AwsSolutions-IAM5",
                "logs:DescribeLogGroups in this account and region, as EMR Serverless's CloudWatch logging requires "
                "of the job runtime role (EMR Serverless User Guide, 'Logging for EMR Serverless with Amazon "
                "CloudWatch'); writing is granted on the job log group only.",
                ACCOUNT_LOG_GROUPS,
            )
