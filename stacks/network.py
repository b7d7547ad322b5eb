"""Networking: the VPC the functions and the EFS staging file system live in.

Either an existing VPC (``network.vpc_id``, looked up at synth and cached in ``cdk.context.json``)
or a new one with isolated subnets only. The functions talk to S3 and DynamoDB (gateway
endpoints) and to EFS (NFS); the MSK event source mapping's pollers need STS and Lambda, which a
created VPC reaches through interface endpoints (only made when a stream reads MSK: a Kinesis
mapping polls from outside the VPC); with a Kinesis stream, the sweeper lists its shards through a
Kinesis interface endpoint. Nothing needs a NAT gateway or the internet.

No way out: the gateway endpoints' policies admit only this account's buckets
(``aws:ResourceAccount``) and tables (their ARNs), so a function -- or code that got into one --
cannot copy the archive to a bucket of another account through them; the functions' HTTPS egress
goes to the VPC's own range (interface endpoints) and the S3 and DynamoDB prefix lists, not
0.0.0.0/0, when the prefix lists are known (``network.prefix_list_ids``, or looked up at synth for
a stack that makes its endpoints and has an account and region; otherwise a synth warning says
HTTPS may go anywhere -- in a created VPC there is no route to anywhere else). An existing VPC
whose chosen subnets are not isolated (a NAT gateway or an internet gateway on their routes) is
warned about.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Annotations, Aws, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
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
        if settings.vpc_id is not None and self.vpc.vpc_id == settings.vpc_id:
            isolated = {subnet.subnet_id for subnet in self.vpc.isolated_subnets}
            routed = sorted(set(self.vpc.select_subnets(**selection).subnet_ids) - isolated)
            if routed:
                Annotations.of(self).add_warning_v2(
                    "tidemark:subnets-not-isolated",
                    f"network: subnets {', '.join(routed)} of {settings.vpc_id} route to a NAT or internet gateway; "
                    "Tidemark's functions need neither (isolated subnets with S3/DynamoDB gateway endpoints and "
                    "STS/Lambda interface endpoints keep the archive's traffic inside AWS)",
                )

        if settings.endpoints:
            s3 = self.vpc.add_gateway_endpoint("S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3)
            dynamodb = self.vpc.add_gateway_endpoint(
                "DynamoDbEndpoint", service=ec2.GatewayVpcEndpointAwsService.DYNAMODB
            )
            limit_to_account(s3, dynamodb)
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
        # Interface endpoints (STS, Lambda, Kinesis) are in the VPC's range; S3 and DynamoDB are
        # reached through the gateway endpoints, whose addresses are the region's managed prefix
        # lists. No other port leaves the functions except NFS to EFS (the staging construct's).
        self.function_security_group.add_egress_rule(
            ec2.Peer.ipv4(self.vpc.vpc_cidr_block), HTTPS, "HTTPS to interface endpoints in the VPC"
        )
        prefix_lists = self._gateway_prefix_lists(settings)
        if prefix_lists is None:
            self.function_security_group.add_egress_rule(ec2.Peer.any_ipv4(), HTTPS, "HTTPS to AWS service endpoints")
            Annotations.of(self).add_warning_v2(
                "tidemark:egress-anywhere",
                "network: the functions' HTTPS egress is open to 0.0.0.0/0 because the S3 and DynamoDB prefix lists "
                "are not known: set network.prefix_list_ids (with an existing VPC, also make sure Kinesis, if a "
                "stream reads it, has an endpoint in the VPC), or synth a stack that creates its endpoints with an "
                "account and region so they are looked up",
            )
        else:
            for name, prefix_list in prefix_lists.items():
                self.function_security_group.add_egress_rule(
                    ec2.Peer.prefix_list(prefix_list), HTTPS, f"HTTPS to the {name} gateway endpoint"
                )

    def _gateway_prefix_lists(self, settings: NetworkSettings) -> dict[str, str] | None:
        """The S3 and DynamoDB prefix list ids: configured; else looked up, when the stack makes
        the endpoints (then everything else the functions call -- Kinesis for the sweeper -- is an
        interface endpoint in the VPC's range) and knows its account and region; else None (an
        existing VPC's own routes decide how the functions reach Kinesis: egress stays open)."""
        if settings.prefix_list_ids is not None:
            return {str(name): value for name, value in settings.prefix_list_ids.items()}
        stack = Stack.of(self)
        if not settings.endpoints or Token.is_unresolved(stack.account) or Token.is_unresolved(stack.region):
            return None
        return {
            name: ec2.PrefixList.from_lookup(
                self, f"{name.title()}PrefixList", prefix_list_name=f"com.amazonaws.{stack.region}.{name}"
            ).prefix_list_id
            for name in ("s3", "dynamodb")
        }

    @property
    def subnet_ids(self) -> list[str]:
        return list(self.vpc.select_subnets(**self._selection).subnet_ids)


def limit_to_account(s3: ec2.GatewayVpcEndpoint, dynamodb: ec2.GatewayVpcEndpoint) -> None:
    """The gateway endpoints' policies: any action, by anyone in the VPC, on this account's
    buckets (``aws:ResourceAccount``: S3 ARNs carry no account) and tables (their ARNs) only.
    The default policy allows every bucket and table of every account."""
    s3.add_to_policy(
        iam.PolicyStatement(
            sid="ThisAccountsBuckets",
            principals=[iam.AnyPrincipal()],
            actions=["s3:*"],
            resources=["*"],
            conditions={"StringEquals": {"aws:ResourceAccount": Aws.ACCOUNT_ID}},
        )
    )
    dynamodb.add_to_policy(
        iam.PolicyStatement(
            sid="ThisAccountsTables",
            principals=[iam.AnyPrincipal()],
            actions=["dynamodb:*"],
            resources=[f"arn:{Aws.PARTITION}:dynamodb:{Aws.REGION}:{Aws.ACCOUNT_ID}:table/*"],
        )
    )
