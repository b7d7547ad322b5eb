"""The Kafka source: an existing MSK cluster (IAM auth) by ARN, or a dev MSK Serverless cluster.

Exposes, per stream, the cluster ARN its event source mapping reads from and the IAM statements
a function needs to be that mapping's target: the cluster, the stream's topic and its consumer
group only -- the IAM resource ARNs MSK defines for topics and groups, never ``*``.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Fn, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_msk as msk
from constructs import Construct

from tidemark.config import StreamConfig, TidemarkConfig
from tidemark.exceptions import ConfigError

#: MSK's port for IAM-authenticated clients
KAFKA_IAM_PORT = 9098

#: Describe* calls the event source mapping makes on the cluster's network. AWS requires
#: ``Resource: "*"`` for EC2 Describe actions (they have no resource-level permissions).
ESM_NETWORK_DESCRIBE_ACTIONS = ("ec2:DescribeVpcs", "ec2:DescribeSecurityGroups")


@dataclass(frozen=True)
class KafkaResourceArns:
    """IAM resource ARNs of one stream's cluster, topic and consumer group."""

    cluster: str
    topic: str
    group: str


def consumer_group_id(stream: StreamConfig) -> str:
    """The configured group, or ``tidemark-<stream>``: a fixed id keeps the committed offsets
    across redeploys and lets IAM name the group (an ESM's default group is its UUID)."""
    return stream.source.consumer_group_id or f"tidemark-{stream.name}"


def kafka_resource_arns(cluster_arn: str, topic: str, group: str) -> KafkaResourceArns:
    """Topic and group ARNs under a cluster ARN ``arn:<partition>:kafka:<region>:<account>:cluster/<name>/<uuid>``.

    A literal ARN (an existing cluster) is split here; a token (a cluster of this stack) with
    CloudFormation functions, so the template names the same resources either way.
    """
    if not Token.is_unresolved(cluster_arn):
        head, _, name_and_uuid = cluster_arn.partition(":cluster/")
        return KafkaResourceArns(
            cluster=cluster_arn,
            topic=f"{head}:topic/{name_and_uuid}/{topic}",
            group=f"{head}:group/{name_and_uuid}/{group}",
        )
    head = Fn.select(0, Fn.split(":cluster/", cluster_arn))
    name_and_uuid = Fn.select(1, Fn.split(":cluster/", cluster_arn))
    return KafkaResourceArns(
        cluster=cluster_arn,
        topic=Fn.join("", [head, ":topic/", name_and_uuid, "/", topic]),
        group=Fn.join("", [head, ":group/", name_and_uuid, "/", group]),
    )


class SourceConstruct(Construct):
    """Resolves every stream's cluster; creates the dev MSK Serverless cluster when enabled."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: TidemarkConfig,
        vpc: ec2.IVpc,
        subnet_ids: list[str],
    ) -> None:
        super().__init__(scope, construct_id)
        for index, stream in enumerate(config.streams):
            if stream.source.kind != "msk":
                raise ConfigError(
                    f"streams[{index}].source.kind: the stack deploys MSK sources only; "
                    f"'{stream.source.kind}' runs with the embedded runner (tidemark demo) for now"
                )
        self.dev_cluster: msk.CfnServerlessCluster | None = None
        self.dev_cluster_security_group: ec2.SecurityGroup | None = None
        if config.dev_cluster.enabled:
            group = ec2.SecurityGroup(
                self,
                "DevClusterSecurityGroup",
                vpc=vpc,
                allow_all_outbound=False,
                description="Tidemark dev MSK Serverless cluster and the event source mapping pollers",
            )
            # The mapping's pollers get this group too: they reach the brokers through it, STS and
            # Lambda through the VPC's interface endpoints, and S3 (the on-failure destination)
            # through the gateway endpoint, whose addresses are S3's public ranges: HTTPS anywhere.
            group.add_ingress_rule(group, ec2.Port.tcp(KAFKA_IAM_PORT), "Kafka (IAM auth) within the group")
            group.add_egress_rule(group, ec2.Port.tcp(KAFKA_IAM_PORT), "Kafka (IAM auth) within the group")
            group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to STS, Lambda and S3 endpoints")
            self.dev_cluster_security_group = group
            self.dev_cluster = msk.CfnServerlessCluster(
                self,
                "DevCluster",
                # one per stack: two stacks in an account must not ask for the same name
                cluster_name=f"{Stack.of(self).stack_name.lower()}-dev"[:64],
                client_authentication=msk.CfnServerlessCluster.ClientAuthenticationProperty(
                    sasl=msk.CfnServerlessCluster.SaslProperty(iam=msk.CfnServerlessCluster.IamProperty(enabled=True))
                ),
                vpc_configs=[
                    msk.CfnServerlessCluster.VpcConfigProperty(
                        subnet_ids=subnet_ids,
                        security_groups=[group.security_group_id],
                    )
                ],
            )

    def cluster_arn(self, stream: StreamConfig) -> str:
        if stream.source.cluster_arn is not None:
            return stream.source.cluster_arn
        if self.dev_cluster is None:  # the config model makes this unreachable; stay explicit
            raise ConfigError(f"streams[{stream.name}].source.cluster_arn is required without dev_cluster.enabled")
        return self.dev_cluster.attr_arn

    def arns(self, stream: StreamConfig) -> KafkaResourceArns:
        return kafka_resource_arns(self.cluster_arn(stream), stream.source.topic, consumer_group_id(stream))

    def read_statements(self, stream: StreamConfig) -> list[iam.PolicyStatement]:
        """What an event source mapping's target role needs to consume the stream's topic."""
        arns = self.arns(stream)
        return [
            iam.PolicyStatement(
                sid="MskCluster",
                actions=[
                    "kafka:DescribeClusterV2",
                    "kafka:GetBootstrapBrokers",
                    "kafka-cluster:Connect",
                    "kafka-cluster:DescribeClusterDynamicConfiguration",
                ],
                resources=[arns.cluster],
            ),
            iam.PolicyStatement(
                sid="MskTopic",
                actions=["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData"],
                resources=[arns.topic],
            ),
            iam.PolicyStatement(
                sid="MskConsumerGroup",
                actions=["kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup"],
                resources=[arns.group],
            ),
            iam.PolicyStatement(
                sid="MskNetworkDescribe",
                actions=list(ESM_NETWORK_DESCRIBE_ACTIONS),
                resources=["*"],  # required by AWS: see ESM_NETWORK_DESCRIBE_ACTIONS
            ),
        ]
