"""Networking: the VPC the functions and the EFS staging file system live in.

Either an existing VPC (``network.vpc_id``, looked up at synth and cached in ``cdk.context.json``)
or a new one with isolated subnets only. The functions talk to S3 and DynamoDB (gateway
endpoints) and to EFS (NFS); the MSK event source mapping's pollers need STS and Lambda, which a
created VPC reaches through interface endpoints (only made when a stream reads MSK: a Kinesis
mapping polls from outside the VPC); with a Kinesis stream, the sweeper lists its shards through a
Kinesis interface endpoint. Nothing needs a NAT gateway or the internet.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from tidemark.config.deployment import NetworkSettings
from tidemark.exceptions import ConfigError

HTTPS = ec2.Port.tcp(443)


class NetworkConstruct(Construct):
    """The VPC, the subnets Tidemark uses in it, the endpoints and the functions' security group.

    Exposes ``vpc``, ``subnets`` (a selection: one subnet per AZ) and ``function_security_group``
    (egress HTTPS only; the staging construct adds NFS to the file system).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: NetworkSettings,
        msk_pollers: bool = True,
        kinesis: bool = False,
    ) -> None:
        """``msk_pollers``: a stream reads MSK, whose mapping's pollers run in the VPC.
        ``kinesis``: a stream reads Kinesis, whose shards the sweeper lists from the VPC."""
        super().__init__(scope, construct_id)
        if settings.vpc_id is not None:
            stack = Stack.of(self)
            if Token.is_unresolved(stack.account) or Token.is_unresolved(stack.region):
                raise ConfigError(
                    "network.vpc_id: looking up an existing VPC needs the stack's account and region; "
                    "run cdk with AWS credentials (CDK_DEFAULT_ACCOUNT/CDK_DEFAULT_REGION) "
                    "or pass -c account=... -c region=..."
                )
            self.vpc: ec2.IVpc = ec2.Vpc.from_lookup(self, "Vpc", vpc_id=settings.vpc_id)
            selection: dict[str, Any] = (
                {"subnet_filters": [ec2.SubnetFilter.by_ids(settings.subnet_ids)]}
                if settings.subnet_ids
                else {"subnet_type": ec2.SubnetType.PRIVATE_WITH_EGRESS, "one_per_az": True}
            )
        else:
            flow_logs = logs.LogGroup(self, "FlowLogs", retention=logs.RetentionDays.ONE_MONTH)
            self.vpc = ec2.Vpc(
                self,
                "Vpc",
                ip_addresses=ec2.IpAddresses.cidr(settings.cidr),
                max_azs=settings.max_azs,
                nat_gateways=0,
                subnet_configuration=[
                    ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=20)
                ],
                flow_logs={
                    "rejected": ec2.FlowLogOptions(
                        destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                        traffic_type=ec2.FlowLogTrafficType.REJECT,
                    )
                },
            )
            selection = {"subnet_type": ec2.SubnetType.PRIVATE_ISOLATED, "one_per_az": True}
        self._selection = selection
        self.subnets = ec2.SubnetSelection(**selection)
        # Before the CLI has looked the VPC up, from_lookup returns a placeholder: check only real data.
        if settings.subnet_ids and self.vpc.vpc_id == settings.vpc_id:
            selected = self.vpc.select_subnets(**selection)
            missing = sorted(set(settings.subnet_ids) - set(selected.subnet_ids))
            if missing:
                raise ConfigError(f"network.subnet_ids: {', '.join(missing)} not found in {settings.vpc_id}")
            if len(set(selected.availability_zones)) < len(settings.subnet_ids):
                raise ConfigError(
                    "network.subnet_ids: the subnets must be in different availability zones "
                    "(EFS takes one mount target per zone)"
                )

        if settings.endpoints:
            self.vpc.add_gateway_endpoint("S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3)
            self.vpc.add_gateway_endpoint("DynamoDbEndpoint", service=ec2.GatewayVpcEndpointAwsService.DYNAMODB)
            # The MSK event source mapping's pollers run in the cluster's subnets and call STS and
            # Lambda; interface endpoints keep that traffic inside the VPC. The functions call
            # neither, and a Kinesis mapping's pollers are not in the VPC: without an MSK stream,
            # no interface endpoint.
            if msk_pollers:
                for name, service in (
                    ("StsEndpoint", ec2.InterfaceVpcEndpointAwsService.STS),
                    ("LambdaEndpoint", ec2.InterfaceVpcEndpointAwsService.LAMBDA_),
                ):
                    self.vpc.add_interface_endpoint(
                        name, service=service, subnets=self.subnets, private_dns_enabled=True
                    )
            # The sweeper asks Kinesis for shard lineage (hour completeness after a resharding).
            if kinesis:
                self.vpc.add_interface_endpoint(
                    "KinesisEndpoint",
                    service=ec2.InterfaceVpcEndpointAwsService.KINESIS_STREAMS,
                    subnets=self.subnets,
                    private_dns_enabled=True,
                )

        self.function_security_group = ec2.SecurityGroup(
            self,
            "FunctionSecurityGroup",
            vpc=self.vpc,
            allow_all_outbound=False,
            description="Tidemark functions: HTTPS to AWS APIs (S3/DynamoDB endpoints), NFS to the staging file system",
        )
        # Gateway endpoints have no fixed address range to name here (their prefix lists are
        # per-region lookups), so HTTPS may go anywhere; the route tables keep S3 and DynamoDB
        # traffic on the endpoints. No other port leaves the functions except NFS to EFS.
        self.function_security_group.add_egress_rule(ec2.Peer.any_ipv4(), HTTPS, "HTTPS to AWS service endpoints")

    @property
    def subnet_ids(self) -> list[str]:
        return list(self.vpc.select_subnets(**self._selection).subnet_ids)
