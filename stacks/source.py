"""The sources: an MSK cluster by ARN (or a dev MSK Serverless cluster), a self-managed Kafka by
its bootstrap servers (Confluent Cloud, Redpanda, Kafka on EC2), a Kinesis data stream by ARN,
read directly or through an enhanced fan-out consumer, or a RabbitMQ queue on an Amazon MQ broker.

Exposes, per stream, what its event source mapping reads (the cluster or Kinesis ARN, or the
bootstrap servers), how it authenticates (its source access configurations) and the IAM
statements a function needs to be that mapping's target. For MSK with IAM: the cluster, the
stream's topic and its consumer group only -- the IAM resource ARNs MSK defines for topics and
groups, never ``*``; with SASL/SCRAM or mTLS, the cluster's description and the one named secret.
For self-managed Kafka: the named secrets (credentials or client certificate, and the brokers'
root CA) and, for brokers in a VPC, the network descriptions the mapping makes. For Kinesis:
that one data stream (and its consumer with ``consumer: efo``), never ``*``. For RabbitMQ: the
broker's description, the one named credentials secret, and the network interfaces the mapping
places in the broker's VPC (``RabbitMQSource``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from aws_cdk import Arn, ArnFormat, Duration, Fn, Stack, Token
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_msk as msk
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from tidemark.config import StreamConfig, TidemarkConfig
from tidemark.exceptions import ConfigError

#: MSK's port for IAM-authenticated clients
KAFKA_IAM_PORT = 9098

#: Describe* calls the event source mapping makes on the cluster's network. AWS requires
#: ``Resource: "*"`` for EC2 Describe actions (they have no resource-level permissions).
ESM_NETWORK_DESCRIBE_ACTIONS = ("ec2:DescribeVpcs", "ec2:DescribeSecurityGroups")

#: what a Kinesis event source mapping calls on the data stream (Lambda's "Kinesis execution role
#: permissions"). All have the stream as their IAM resource; ``kinesis:ListStreams`` (which has
#: none, so it would need ``*``) is left out: the mapping is given the stream's ARN.
KINESIS_STREAM_READ_ACTIONS = (
    "kinesis:DescribeStream",
    "kinesis:DescribeStreamSummary",
    "kinesis:GetRecords",
    "kinesis:GetShardIterator",
    "kinesis:ListShards",
)
#: what the mapping calls on an enhanced fan-out consumer (their IAM resource is the consumer)
KINESIS_CONSUMER_READ_ACTIONS = ("kinesis:DescribeStreamConsumer", "kinesis:SubscribeToShard")

#: what a self-managed mapping in a VPC also describes (the subnets it places its pollers in)
ESM_SUBNET_DESCRIBE_ACTIONS = ("ec2:DescribeSubnets",)

#: What an Amazon MQ event source mapping calls as its function's role -- AWS Lambda Developer Guide,
#: "Using Lambda with Amazon MQ" > "Execution role permissions"
#: (https://docs.aws.amazon.com/lambda/latest/dg/with-mq.html#events-mq-permissions): mq:DescribeBroker,
#: secretsmanager:GetSecretValue, the six EC2 actions below, and logs:CreateLogGroup/CreateLogStream/
#: PutLogEvents. The mapping finds the broker's VPC, subnets and security groups with DescribeBroker
#: and puts its pollers' network interfaces there: a broker always has a VPC, also a publicly
#: accessible one (AWS SAM's "MQ" event lists these EC2 actions for that case). Logs need nothing
#: more: the function writes to its own, pre-created log group (``TidemarkFunction``).
MQ_BROKER_ACTIONS = ("mq:DescribeBroker",)
#: the mapping signs in to RabbitMQ (PLAIN, the only mechanism Lambda supports) with this secret's
#: ``username`` and ``password``
MQ_SECRET_ACTIONS = ("secretsmanager:GetSecretValue",)
#: On ``Resource: "*"``: EC2's Describe* actions have no resource-level permissions; the interface
#: actions do, but the mapping performs them as the role and AWS documents them on "*"
#: (``stacks/star_actions.py`` gives each action's reason and checks the stack).
MQ_NETWORK_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
)
#: RabbitMQ's default virtual host: a mapping that names none reads from it
DEFAULT_VIRTUAL_HOST = "/"
#: Amazon MQ's CloudWatch namespace; RabbitMQ queue metrics are dimensioned by broker (its name),
#: virtual host and queue
MQ_NAMESPACE = "AWS/AmazonMQ"

#: how each auth mechanism is named to the event source mapping, with its secret
AUTH_ACCESS = {
    "sasl_scram_256": lambda_.SourceAccessConfigurationType.SASL_SCRAM_256_AUTH,
    "sasl_scram_512": lambda_.SourceAccessConfigurationType.SASL_SCRAM_512_AUTH,
    "plain": lambda_.SourceAccessConfigurationType.BASIC_AUTH,
    "mtls": lambda_.SourceAccessConfigurationType.CLIENT_CERTIFICATE_TLS_AUTH,
}


@dataclass(frozen=True)
class KafkaResourceArns:
    """IAM resource ARNs of one stream's cluster, topic and consumer group."""

    cluster: str
    topic: str
    group: str


#: what stands for the stack's own dev cluster in a mapping's identity (its ARN is a token)
DEV_CLUSTER = "dev-cluster"


def kafka_mapping_identity(stream: StreamConfig) -> str:
    """Eight hex digits naming what a Kafka mapping cannot change in place.

    That is where it reads (the cluster ARN, or the bootstrap servers as given), its topic and its
    starting position. CloudFormation replaces a mapping whose ``EventSourceArn``,
    ``SelfManagedEventSource`` or ``StartingPosition`` changes (the resource schema's
    ``createOnlyProperties``), creating the new mapping before it deletes the old; and it "updates"
    ``Topics`` in place without the mapping changing topic (cloudformation-coverage-roadmap#2140),
    so a mapping re-pointed at another topic would go on reading the old one. Each identity
    therefore gets a mapping of its own (the digest is part of its logical id: a new resource) and,
    by default, a consumer group of its own (AWS requires a group id unique among Kafka event
    sources, so the new mapping could not join the old one's group while that one exists).
    """
    src = stream.source
    where = ",".join(src.bootstrap_servers or ()) if src.kind == "kafka" else src.cluster_arn or DEV_CLUSTER
    identity = json.dumps([src.kind, where, src.topic, src.starting_position])
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:8]


def consumer_group_id(stream: StreamConfig) -> str:
    """The configured group, or ``tidemark-<stream>-<identity>``: fixed for as long as the mapping
    keeps its identity (the committed offsets survive every other redeploy, and IAM can name the
    group: an ESM's default group is its UUID), new with each new mapping
    (``kafka_mapping_identity``). A new group starts at the starting position; the ledger drops what
    was archived before (``tidemark.resets``)."""
    return stream.source.consumer_group_id or f"tidemark-{stream.name}-{kafka_mapping_identity(stream)}"


def kafka_mapping_id(stream: StreamConfig) -> str:
    """The construct id of the stream's Kafka mapping: a new identity or group is a new mapping
    (see ``kafka_mapping_identity``). With a configured group kept across an identity change, AWS
    refuses the new mapping and the deploy rolls back, nothing lost: change both in one deploy."""
    digest = hashlib.sha256(f"{kafka_mapping_identity(stream)}/{consumer_group_id(stream)}".encode()).hexdigest()
    return f"Mapping-{stream.name}-{digest[:8]}"


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


def kinesis_consumer_name(stream: StreamConfig) -> str:
    """``tidemark-<stream>``: the enhanced fan-out consumer's name, one per Tidemark stream."""
    return f"tidemark-{stream.name}"


@dataclass(frozen=True)
class KinesisSource:
    """One stream's Kinesis data stream (imported by ARN) and, with ``consumer: efo``, the
    enhanced fan-out consumer this stack registers on it."""

    stream: kinesis.IStream
    consumer: kinesis.IStreamConsumer | None
    consumer_name: str | None

    @property
    def event_source_arn(self) -> str:
        """What the mapping reads: the consumer (dedicated throughput), else the stream itself."""
        return self.consumer.stream_consumer_arn if self.consumer is not None else self.stream.stream_arn

    def read_statements(self) -> list[iam.PolicyStatement]:
        """What the mapping's target role needs: this stream, and its consumer with EFO.

        A stream encrypted with a customer-managed KMS key also needs ``kms:Decrypt`` on that key,
        which the configuration does not name (an AWS-managed ``aws/kinesis`` key needs nothing):
        add it to the archiver role by hand for such a stream.
        """
        statements = [
            iam.PolicyStatement(
                sid="KinesisStream",
                actions=list(KINESIS_STREAM_READ_ACTIONS),
                resources=[self.stream.stream_arn],
            )
        ]
        if self.consumer is not None:
            statements.append(
                iam.PolicyStatement(
                    sid="KinesisConsumer",
                    actions=list(KINESIS_CONSUMER_READ_ACTIONS),
                    resources=[self.consumer.stream_consumer_arn],
                )
            )
        return statements

    def read_throttles(self, period: Duration) -> cw.Metric:
        """Reads of the mapping that Kinesis throttled: ``GetRecords`` over the shards' shared 2 MB/s
        (``ReadProvisionedThroughputExceeded``), or with EFO refused subscriptions
        (``SubscribeToShard.RateExceeded``). Kinesis publishes these in the stream's account and
        region, which the metric names when they are not the stack's."""
        arn = Arn.split(self.stream.stream_arn, ArnFormat.SLASH_RESOURCE_NAME)
        dimensions = {"StreamName": self.stream.stream_name}
        if self.consumer is None:
            name, label = "ReadProvisionedThroughputExceeded", "GetRecords throttled (shared throughput)"
        else:
            name, label = "SubscribeToShard.RateExceeded", "SubscribeToShard rate exceeded (EFO)"
            dimensions["ConsumerName"] = str(self.consumer_name)
        # A plain Metric: the stream's own metric() would pin it to this stack's account and region.
        return cw.Metric(
            namespace="AWS/Kinesis",
            metric_name=name,
            dimensions_map=dimensions,
            statistic="Sum",
            period=period,
            label=label,
            stack_account=arn.account,
            stack_region=arn.region,
        )


@dataclass(frozen=True)
class RabbitMQSource:
    """One stream's RabbitMQ queue on an Amazon MQ broker: what its event source mapping reads,
    how it signs in, what its function's role needs, and the broker's metrics of the queue.

    Built from the configuration alone (``of``): the broker is not this stack's, so there is
    nothing to import, and observability builds the same object for the queue's metrics.
    """

    broker_arn: str
    queue: str
    virtual_host: str
    credentials_secret_arn: str

    @classmethod
    def of(cls, stream: StreamConfig) -> RabbitMQSource:
        src = stream.source
        if src.kind != "rabbitmq" or src.broker_arn is None or src.credentials_secret_arn is None:
            # the config model makes this unreachable for a rabbitmq source; stay explicit
            raise ConfigError(
                f"streams[{stream.name}].source: a RabbitMQ source needs broker_arn and credentials_secret_arn"
            )
        return cls(
            broker_arn=src.broker_arn,
            queue=src.topic,  # the queue stands in the topic (``queue:`` in the YAML)
            virtual_host=src.virtual_host or DEFAULT_VIRTUAL_HOST,
            credentials_secret_arn=src.credentials_secret_arn,
        )

    @property
    def broker_name(self) -> str:
        """``<name>`` of ``arn:<partition>:mq:<region>:<account>:broker:<name>:<id>``: the ``Broker``
        dimension of Amazon MQ's metrics."""
        return self.broker_arn.split(":")[6]

    @property
    def region(self) -> str:
        return self.broker_arn.split(":")[3]

    @property
    def account(self) -> str:
        return self.broker_arn.split(":")[4]

    def access_configurations(self) -> list[lambda_.SourceAccessConfiguration]:
        """The credentials secret, and the virtual host unless it is the default ``/`` (which a
        mapping naming none reads: leaving it out keeps ``virtual_host: /`` and no virtual host
        the same mapping)."""
        kinds = lambda_.SourceAccessConfigurationType
        found = [lambda_.SourceAccessConfiguration(type=kinds.BASIC_AUTH, uri=self.credentials_secret_arn)]
        if self.virtual_host != DEFAULT_VIRTUAL_HOST:
            found.append(lambda_.SourceAccessConfiguration(type=kinds.VIRTUAL_HOST, uri=self.virtual_host))
        return found

    def read_statements(self) -> list[iam.PolicyStatement]:
        """What the mapping's target role needs (see ``MQ_BROKER_ACTIONS``): the broker's
        description and the one secret, never ``*``; the network interfaces on ``*`` as AWS requires.

        A secret encrypted with a customer-managed KMS key also needs ``kms:Decrypt`` on that key,
        which the configuration does not name (the default ``aws/secretsmanager`` key needs
        nothing): add it to the archiver role by hand for such a secret.
        """
        return [
            iam.PolicyStatement(sid="MqBroker", actions=list(MQ_BROKER_ACTIONS), resources=[self.broker_arn]),
            iam.PolicyStatement(
                sid="MqCredentials", actions=list(MQ_SECRET_ACTIONS), resources=[self.credentials_secret_arn]
            ),
            iam.PolicyStatement(
                sid="MqNetwork",
                actions=list(MQ_NETWORK_ACTIONS),
                resources=["*"],  # required by AWS: see MQ_NETWORK_ACTIONS
            ),
        ]

    def add_mapping(
        self,
        scope: Construct,
        construct_id: str,
        *,
        target: lambda_.IFunction,
        batch_size: int,
        batching_window: Duration,
    ) -> lambda_.EventSourceMapping:
        """The queue's event source mapping on ``target``.

        CDK's ``EventSourceMapping`` has no ``queues`` property (nor an Amazon MQ event source
        class): ``Queues`` is set on its CloudFormation resource. Everything a log's mapping sets
        is left out because Amazon MQ takes none of it: no starting position (a queue has none),
        no retry bounds or on-failure destination (a failed batch is retried whole until it
        succeeds or its messages expire on the broker), no metrics configuration (Kafka's and the
        stream sources' only). Lambda runs one invocation at a time per RabbitMQ mapping, so the
        queue's batches reach the archiver one after another; nothing to configure.
        """
        mapping = lambda_.EventSourceMapping(
            scope,
            construct_id,
            target=target,
            event_source_arn=self.broker_arn,
            source_access_configurations=self.access_configurations(),
            batch_size=batch_size,
            max_batching_window=batching_window,
        )
        resource = mapping.node.default_child
        assert isinstance(resource, lambda_.CfnEventSourceMapping)
        resource.add_property_override("Queues", [self.queue])
        return mapping

    def queue_metric(self, name: str, *, statistic: str, period: Duration, label: str | None = None) -> cw.Metric:
        """One of the broker's metrics of the queue (``MessageCount``: ready plus unacknowledged,
        the queue's depth; ``MessageReadyCount``; ``MessageUnacknowledgedCount``; ``ConsumerCount``).
        The broker publishes them whether or not anything consumes: they are the queue's, not the
        mapping's (which publishes no lag metric for Amazon MQ)."""
        return cw.Metric(
            namespace=MQ_NAMESPACE,
            metric_name=name,
            dimensions_map={"Broker": self.broker_name, "VirtualHost": self.virtual_host, "Queue": self.queue},
            statistic=statistic,
            period=period,
            label=label,
        )


class SourceConstruct(Construct):
    """Resolves every stream's cluster, Kinesis stream or RabbitMQ queue; creates the dev MSK
    Serverless cluster when enabled and an enhanced fan-out consumer per ``consumer: efo`` stream
    (``kinesis[name]``); ``rabbitmq[name]`` is each RabbitMQ stream's queue."""

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
        self.kinesis: dict[str, KinesisSource] = {
            stream.name: self._kinesis(index, stream)
            for index, stream in enumerate(config.streams)
            if stream.source.kind == "kinesis"
        }
        self.rabbitmq: dict[str, RabbitMQSource] = {
            stream.name: self._rabbitmq(index, stream)
            for index, stream in enumerate(config.streams)
            if stream.source.kind == "rabbitmq"
        }
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

    def _kinesis(self, index: int, stream: StreamConfig) -> KinesisSource:
        arn = stream.source.stream_arn
        if arn is None:  # the config model makes this unreachable; stay explicit
            raise ConfigError(f"streams[{index}].source.stream_arn is required when kind is 'kinesis'")
        region, here = Arn.split(arn, ArnFormat.SLASH_RESOURCE_NAME).region, Stack.of(self).region
        if not Token.is_unresolved(here) and region != here:
            raise ConfigError(
                f"streams[{index}].source.stream_arn: the stream is in {region} and the stack in {here}; "
                "an event source mapping reads Kinesis streams of its own region only"
            )
        imported = kinesis.Stream.from_stream_arn(self, f"KinesisStream-{stream.name}", arn)
        if stream.source.consumer != "efo":
            return KinesisSource(stream=imported, consumer=None, consumer_name=None)
        # A registered consumer gets the shards' full read throughput for itself (HTTP/2 push).
        # Replacing it (a new name), or switching between shared and efo, gives the mapping a new
        # source ARN, so a new mapping that starts over at starting_position: from TRIM_HORIZON the
        # ledger drops what was archived (sequence numbers are never reused: a replay, not a reset);
        # from LATEST, what the old mapping had not delivered yet is never delivered.
        name = kinesis_consumer_name(stream)
        consumer = kinesis.StreamConsumer(
            self, f"KinesisConsumer-{stream.name}", stream=imported, stream_consumer_name=name
        )
        return KinesisSource(stream=imported, consumer=consumer, consumer_name=name)

    def _rabbitmq(self, index: int, stream: StreamConfig) -> RabbitMQSource:
        source = RabbitMQSource.of(stream)
        # Lambda reads Amazon MQ brokers of its own account and region only (no cross-account processing)
        stack = Stack.of(self)
        for what, broker, here in (("region", source.region, stack.region), ("account", source.account, stack.account)):
            if not Token.is_unresolved(here) and broker != here:
                raise ConfigError(
                    f"streams[{index}].source.broker_arn: the broker is in {what} {broker} and the stack in {here}; "
                    "an event source mapping reads Amazon MQ brokers of its own account and region only"
                )
        return source

    def event_source_arn(self, stream: StreamConfig) -> str | None:
        """What the stream's event source mapping reads: the cluster, the Kinesis stream or its
        consumer, the Amazon MQ broker; ``None`` for self-managed Kafka (its mapping names
        bootstrap servers)."""
        if stream.source.kind == "kinesis":
            return self.kinesis[stream.name].event_source_arn
        if stream.source.kind == "rabbitmq":
            return self.rabbitmq[stream.name].broker_arn
        if stream.source.kind == "kafka":
            return None
        return self.cluster_arn(stream)

    def schema_registry(self, stream: StreamConfig) -> lambda_.ISchemaRegistry | None:
        """The mapping's schema registry integration (``source.schema_registry``), or ``None``.

        The constructs grant the archiver's role what the mapping reads with it, and nothing
        more: a Glue registry and its schemas (``glue:GetRegistry``, ``glue:GetSchemaVersion``), or
        a Confluent registry's one secret."""
        registry = stream.source.schema_registry
        if registry is None:
            return None
        record_format = lambda_.EventRecordFormat.of(registry.record_format.upper())
        validate = [
            lambda_.KafkaSchemaValidationConfig(attribute=lambda_.KafkaSchemaValidationAttribute.of(part.upper()))
            for part in registry.validate_parts
        ]
        if registry.kind == "glue":
            return sources.GlueSchemaRegistry(
                schema_registry_arn=registry.registry_arn,
                event_record_format=record_format,
                schema_validation_configs=validate,
            )
        assert registry.url is not None and registry.secret_arn is not None  # the config model checks both
        secret = secretsmanager.Secret.from_secret_complete_arn(
            self, f"SchemaRegistrySecret-{stream.name}", registry.secret_arn
        )
        kinds = lambda_.KafkaSchemaRegistryAccessConfigType
        return sources.ConfluentSchemaRegistry(
            schema_registry_uri=registry.url,
            event_record_format=record_format,
            authentication_type=kinds.BASIC_AUTH if registry.auth == "basic" else kinds.CLIENT_CERTIFICATE_TLS_AUTH,
            secret=secret,
            schema_validation_configs=validate,
        )

    @staticmethod
    def access_configurations(stream: StreamConfig) -> list[lambda_.SourceAccessConfiguration]:
        """How a Kafka mapping authenticates and where its pollers run: the secret of the auth
        mechanism, the brokers' root CA, and a self-managed VPC's subnets and security groups. A
        RabbitMQ mapping: its credentials secret and virtual host (``RabbitMQSource``)."""
        src, kinds = stream.source, lambda_.SourceAccessConfigurationType
        if src.kind == "rabbitmq":
            return RabbitMQSource.of(stream).access_configurations()
        found = []
        if src.auth is not None and src.auth.secret_arn is not None:
            found.append(
                lambda_.SourceAccessConfiguration(type=AUTH_ACCESS[src.auth.mechanism], uri=src.auth.secret_arn)
            )
        if src.auth is not None and src.auth.root_ca_secret_arn is not None:
            found.append(
                lambda_.SourceAccessConfiguration(
                    type=kinds.SERVER_ROOT_CA_CERTIFICATE, uri=src.auth.root_ca_secret_arn
                )
            )
        if src.network is not None:
            found += [
                lambda_.SourceAccessConfiguration(type=kinds.VPC_SUBNET, uri=f"subnet:{subnet}")
                for subnet in src.network.subnet_ids
            ]
            found += [
                lambda_.SourceAccessConfiguration(type=kinds.VPC_SECURITY_GROUP, uri=f"security_group:{group}")
                for group in src.network.security_group_ids
            ]
        return found

    def cluster_arn(self, stream: StreamConfig) -> str:
        if stream.source.cluster_arn is not None:
            return stream.source.cluster_arn
        if self.dev_cluster is None:  # the config model makes this unreachable; stay explicit
            raise ConfigError(f"streams[{stream.name}].source.cluster_arn is required without dev_cluster.enabled")
        return self.dev_cluster.attr_arn

    def arns(self, stream: StreamConfig) -> KafkaResourceArns:
        return kafka_resource_arns(self.cluster_arn(stream), stream.source.topic, consumer_group_id(stream))

    def read_statements(self, stream: StreamConfig) -> list[iam.PolicyStatement]:
        """What an event source mapping's target role needs to consume the stream's topic, Kinesis
        stream or RabbitMQ queue."""
        src = stream.source
        if src.kind == "kinesis":
            return self.kinesis[stream.name].read_statements()
        if src.kind == "rabbitmq":
            return self.rabbitmq[stream.name].read_statements()
        statements = secret_statements(stream)
        if src.kind == "kafka":
            if src.network is not None:
                statements.append(
                    iam.PolicyStatement(
                        sid="KafkaNetworkDescribe",
                        actions=[*ESM_NETWORK_DESCRIBE_ACTIONS, *ESM_SUBNET_DESCRIBE_ACTIONS],
                        resources=["*"],  # required by AWS: see ESM_NETWORK_DESCRIBE_ACTIONS
                    )
                )
            return statements
        if src.auth_mechanism != "iam":
            # SASL/SCRAM or mTLS: the mapping finds the brokers through the cluster, and signs in
            # with the secret; no kafka-cluster data-plane action is IAM's to grant then.
            return [
                iam.PolicyStatement(
                    sid="MskCluster",
                    actions=["kafka:DescribeClusterV2", "kafka:GetBootstrapBrokers"],
                    resources=[self.cluster_arn(stream)],
                ),
                *statements,
                iam.PolicyStatement(
                    sid="MskNetworkDescribe",
                    actions=list(ESM_NETWORK_DESCRIBE_ACTIONS),
                    resources=["*"],  # required by AWS: see ESM_NETWORK_DESCRIBE_ACTIONS
                ),
            ]
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


def secret_statements(stream: StreamConfig) -> list[iam.PolicyStatement]:
    """Reading the stream's named secrets (and decrypting them with its named key): nothing else."""
    auth = stream.source.auth
    if auth is None:
        return []
    secrets = [arn for arn in (auth.secret_arn, auth.root_ca_secret_arn) if arn is not None]
    statements = []
    if secrets:
        statements.append(
            iam.PolicyStatement(sid="KafkaSecrets", actions=["secretsmanager:GetSecretValue"], resources=secrets)
        )
    if auth.kms_key_arn is not None:
        statements.append(
            iam.PolicyStatement(
                sid="KafkaSecretsKey",
                actions=["kms:Decrypt"],
                resources=[auth.kms_key_arn],
                # only as Secrets Manager decrypts the secrets, in their own region
                conditions={
                    "StringEquals": {"kms:ViaService": f"secretsmanager.{secrets[0].split(':')[3]}.amazonaws.com"}
                },
            )
        )
    return statements
