"""One way to build a Tidemark Lambda function: own role, own log group, in the VPC, on EFS.

CDK's default function role carries the AWS managed policies ``AWSLambdaBasicExecutionRole`` and
``AWSLambdaVPCAccessExecutionRole``, whose statements allow any log group and more. Each function
here gets a role of its own with exactly what it needs: writing its own log group, the network
interfaces a VPC function must manage, and what its construct grants on top.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy, Size
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.layer import LAMBDA_RUNTIME

#: What a function in a VPC needs to attach to it, on ``Resource: "*"``: Describe* have no
#: resource-level permissions; the others do, but Lambda performs them as the role and AWS documents
#: the grant on "*" (``stacks/star_actions.py`` gives each action's reason and checks the stack).
VPC_NETWORK_INTERFACE_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)


#: Lambda's /tmp limits (MiB)
MIN_EPHEMERAL_MB, MAX_EPHEMERAL_MB = 512, 10240


def spool_mb(max_object_bytes: int) -> int:
    """/tmp a function needs to render one object before uploading it: the object (at most the
    buffer's bytes; compression only shrinks it) twice over, for headroom, plus the default."""
    needed = 2 * -(-max_object_bytes // (1024 * 1024)) + MIN_EPHEMERAL_MB
    return max(MIN_EPHEMERAL_MB, min(MAX_EPHEMERAL_MB, needed))


@dataclass(frozen=True)
class Placement:
    """Where every Tidemark function runs: the VPC, its subnets, a security group, the EFS mount."""

    vpc: ec2.IVpc
    subnets: ec2.SubnetSelection
    security_group: ec2.ISecurityGroup
    filesystem: lambda_.FileSystem


class TidemarkFunction(Construct):
    """A Python 3.13 (``LAMBDA_RUNTIME``) arm64 function over its layers (the core layer first; the formats layer when
    it renders Parquet, Avro or CSV), traced, with a one-month log group."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: str,
        code: lambda_.Code,
        layers: Sequence[lambda_.ILayerVersion],
        environment: Mapping[str, str],
        placement: Placement,
        timeout: Duration,
        memory_mb: int,
        description: str,
        reserved_concurrency: int | None = None,
        ephemeral_mb: int = MIN_EPHEMERAL_MB,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Tidemark {construct_id}: {description}",
        )
        self.log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
        )
        self.log_group.grant_write(self.role)
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="VpcNetworkInterfaces",
                actions=list(VPC_NETWORK_INTERFACE_ACTIONS),
                resources=["*"],  # required by AWS: see VPC_NETWORK_INTERFACE_ACTIONS
            )
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=LAMBDA_RUNTIME,
            architecture=lambda_.Architecture.ARM_64,
            handler=handler,
            code=code,
            layers=list(layers),
            memory_size=memory_mb,
            timeout=timeout,
            environment=dict(environment),
            role=self.role,
            vpc=placement.vpc,
            vpc_subnets=placement.subnets,
            security_groups=[placement.security_group],
            filesystem=placement.filesystem,
            tracing=lambda_.Tracing.ACTIVE,
            log_group=self.log_group,
            reserved_concurrent_executions=reserved_concurrency,
            # objects are rendered to /tmp before the upload (the runtime's spool directory)
            ephemeral_storage_size=Size.mebibytes(ephemeral_mb),
            description=description,
        )
