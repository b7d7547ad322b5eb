"""The Spark pipeline: an EMR Serverless application and a schedule that runs the aggregation job.

    EventBridge rate(pipeline.schedule) ──▶ Step Functions: Map(stream) ──▶ emr-serverless:startJobRun.sync

The job (``jobs/aggregate.py``) and the code it imports (the ``tidemark`` and ``jobs`` packages,
zipped for ``--py-files``) are CDK assets; the interpreter and third-party libraries come from
the image (``pipeline.image_uri``, built from ``jobs/image/Dockerfile``), because EMR's own image
has Python 3.9 and the job needs 3.11. Every run picks the hours the ledger marks dirty itself.

Runs never overlap: each job run is limited to ``pipeline.job_timeout``, which the config keeps
below ``pipeline.schedule``, and an execution is stopped (cancelling its job runs) after one
schedule period.

What a run reports outside the ledger (``jobs/aggregation/metrics.py``): the driver's stdout and
stderr go to the job log group (``/tidemark/<stack>/aggregation``, log streams under
``tidemark-aggregate/<stream>/``), where each hour the run could not aggregate has an ERROR line
naming it and the reason; and the driver puts ``AggregationHoursFailed`` and its siblings in the
``Tidemark`` namespace, which the job role may put metrics in and no other. The stack alarms on
``AggregationHoursFailed`` per stream (``stacks/observability.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import (
    AssetHashType,
    Aws,
    BundlingOptions,
    DockerImage,
    Duration,
    ILocalBundling,
    RemovalPolicy,
    Stack,
    Stage,
    Token,
)
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_emrserverless as emrs
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.assets import CORE_LOCAL_ONLY, ShippedPackage, tree_hash, workflow
from stacks.grants import ArchiveAccess, Keys, grant_ledger, table_statement
from stacks.observability import NAMESPACE
from stacks.paths import ProjectSources
from tidemark.config import TidemarkConfig
from tidemark.exceptions import ConfigError

#: the interpreter jobs/image/Dockerfile installs
IMAGE_PYTHON = "/usr/bin/python3.11"
#: the managed EventBridge rule Step Functions uses to follow a .sync EMR Serverless job run
SYNC_RULE = "StepFunctionsGetEventsForEMRServerlessJobRule"
#: EMR Serverless refuses a configuration property value longer than this
MAX_PROPERTY_CHARS = 1024
#: a job run's log streams are named from ``<this>/<stream>`` (EMR Serverless adds the rest)
LOG_STREAM_PREFIX = "tidemark-aggregate"


#: the ledger items the job reads of its streams: hour marks (which hours are dirty), committed
#: objects (what an hour holds)
JOB_READS = (Keys.HOUR_MARKS, Keys.OBJECTS)
#: and writes: hour marks (an hour aggregated, or dirty again), its runs
JOB_WRITES = (Keys.HOUR_MARKS, Keys.RUNS)


def job_log_group_name(stack_name: str) -> str:
    """The job log group: named after the stack (one Tidemark per stack), so an alarm
    description and the runbook can name it."""
    return f"/tidemark/{stack_name}/aggregation"


def job_packages(root: Path | ProjectSources) -> list[ShippedPackage]:
    """The job's ``--py-files``: the core package as the layer ships it, and ``jobs`` without its
    image (built separately from ``jobs/image/Dockerfile``). ``root`` is the repository, or the
    sources of the installed package."""
    sources = ProjectSources.locate(root)
    return [
        ShippedPackage(sources.core_package, leave_out=CORE_LOCAL_ONLY),
        ShippedPackage(sources.jobs, leave_out=("image",)),
    ]


@jsii.implements(ILocalBundling)
class CopyPackages:
    """Local bundling of the job's ``--py-files`` archive: the two packages side by side."""

    def __init__(self, root: Path | ProjectSources) -> None:
        self.root = root

    def try_bundle(self, output_dir: str, options: Any = None, **_: Any) -> bool:
        for package in job_packages(self.root):
            package.copy_into(Path(output_dir))
        return True


class PipelineConstruct(Construct):
    """EMR Serverless application, job role, job assets, and the scheduled state machine.

    Built only when a stream has aggregations (``enabled`` says whether it was); ``application``,
    ``job_role``, ``log_group`` (the job runs' driver logs; its name in ``log_group_name``) and
    ``state_machine`` are then set. The job role may also put metrics in the ``Tidemark``
    namespace, and EMR Serverless writes the driver's logs to ``log_group`` as the job role.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: TidemarkConfig,
        root: Path | ProjectSources | None = None,
        access: ArchiveAccess,
        ledger_table: dynamodb.ITable,
        aggregates_table: dynamodb.ITable,
        environment: Mapping[str, str],
        runtime_config: str,
    ) -> None:
        """``environment`` holds the job's short settings (bucket and table names);
        ``runtime_config`` the configuration's JSON, which goes to S3 as an asset; ``root`` is
        where the job's code is (``ProjectSources.locate``: this checkout, or the installed package)."""
        super().__init__(scope, construct_id)
        settings = config.pipeline
        self.streams = [stream.name for stream in config.streams if stream.aggregations]
        self.enabled = bool(self.streams)
        if not self.enabled:
            return
        if settings.image_uri is None:
            raise ConfigError(
                "pipeline.image_uri is required when a stream has aggregations: EMR Serverless's own image has "
                "Python 3.9 and the job needs 3.11; build and push jobs/image/Dockerfile and set its ECR URI"
            )

        self.application = emrs.CfnApplication(
            self,
            "Application",
            release_label=settings.release_label,
            type="Spark",
            architecture="X86_64",
            image_configuration=emrs.CfnApplication.ImageConfigurationInputProperty(image_uri=settings.image_uri),
            auto_start_configuration=emrs.CfnApplication.AutoStartConfigurationProperty(enabled=True),
            auto_stop_configuration=emrs.CfnApplication.AutoStopConfigurationProperty(
                enabled=True, idle_timeout_minutes=int(settings.idle_timeout.total_seconds() // 60)
            ),
            maximum_capacity=emrs.CfnApplication.MaximumAllowedResourcesProperty(
                cpu=settings.max_cpu, memory=settings.max_memory
            ),
        )
        self.application_arn = (
            f"arn:{Aws.PARTITION}:emr-serverless:{Aws.REGION}:{Aws.ACCOUNT_ID}"
            f":/applications/{self.application.attr_application_id}"
        )

        sources = ProjectSources.locate(root)
        self.script = s3_assets.Asset(self, "JobScript", path=str(sources.jobs / "aggregate.py"))
        self.code = s3_assets.Asset(
            self,
            "JobCode",
            path=str(sources.jobs),
            asset_hash_type=AssetHashType.CUSTOM,
            asset_hash=tree_hash(job_packages(sources)),
            bundling=BundlingOptions(
                # Only used if local bundling declined; it never does.
                image=DockerImage.from_registry("public.ecr.aws/docker/library/python:3.11-slim"),
                local=CopyPackages(sources),
            ),
        )

        # The configuration as a file asset: far too long for a Spark property (1,024 characters).
        # Written next to the assembly, named by its content, so a synth leaves nothing elsewhere.
        stage = Stage.of(self)
        if stage is None:  # every construct of an App has one; a bare construct tree does not
            raise ValueError("PipelineConstruct must be built inside a CDK App")
        config_file = Path(stage.outdir) / (
            f"tidemark-config-{hashlib.sha256(runtime_config.encode()).hexdigest()[:16]}.json"
        )
        config_file.write_text(runtime_config, encoding="utf-8")
        self.config_asset = s3_assets.Asset(self, "JobConfig", path=str(config_file))

        self.job_role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal(
                "emr-serverless.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {"aws:SourceArn": self.application_arn},
                },
            ),
            description="Tidemark aggregation job: reads archived hours, writes hourly aggregates",
        )
        for asset in (self.script, self.code, self.config_asset):
            self.job_role.add_to_policy(
                iam.PolicyStatement(
                    actions=["s3:GetObject"], resources=[asset.bucket.arn_for_objects(asset.s3_object_key)]
                )
            )
        # Spark's own readers (EMRFS) look objects up by path, which lists their folder.
        access.read(
            self.job_role,
            [f"{config.archive.raw_prefix}/{stream}" for stream in self.streams],
            list_objects=settings.spark_readers,
        )
        self._archive_root = f"s3://{access.bucket.bucket_name}" if settings.spark_readers else None
        # The job queries hour marks and committed objects, clears marks (UpdateItem) and records
        # its run (PutItem); it gets no item by key (tests/integration/test_iam_spark_job.py). Only
        # its streams' marks, objects and runs (JOB_READS, JOB_WRITES): never a partition's state
        # (raising a staged offset would make the archiver drop new records as duplicates), nor
        # a committed object's item.
        grant_ledger(
            ledger_table,
            self.job_role,
            self.streams,
            reads=JOB_READS,
            writes=JOB_WRITES,
            read_actions=("dynamodb:Query",),
        )
        # The sink queries an hour's items, then puts and deletes them in batches: its streams' only.
        self.job_role.add_to_principal_policy(
            table_statement(
                aggregates_table, ["dynamodb:Query", "dynamodb:BatchWriteItem"], self.streams, [Keys.AGGREGATES]
            )
        )
        self._grant_reporting(Stack.of(self).stack_name)

        self.state_machine = self._state_machine(config, environment)
        self.schedule = events.Rule(
            self,
            "Schedule",
            schedule=events.Schedule.rate(Duration.minutes(int(settings.schedule.total_seconds() // 60))),
            targets=[
                targets.SfnStateMachine(
                    self.state_machine,
                    input=events.RuleTargetInput.from_object({"streams": [{"stream": name} for name in self.streams]}),
                )
            ],
            description="Runs the Tidemark aggregation job every pipeline.schedule",
        )

    def _grant_reporting(self, stack_name: str) -> None:
        """The job log group, and what the job role needs to report outside the ledger.

        Driver logs: EMR Serverless ships them to CloudWatch Logs as the job's runtime role, which
        needs ``logs:DescribeLogGroups`` on ``arn:<partition>:logs:<region>:<account>:*`` and
        ``logs:PutLogEvents``, ``logs:CreateLogStream`` and ``logs:DescribeLogStreams`` on the log
        group (EMR Serverless User Guide, "Logging for EMR Serverless with Amazon CloudWatch",
        required permissions: https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/logging.html#jobs-log-storage-cw).
        The group exists (this stack makes it), so no ``logs:CreateLogGroup``. Not KMS-encrypted,
        like the stack's other log groups, so no key grant either.

        Metrics: ``cloudwatch:PutMetricData`` has no resource type, so its resource is "*"; the
        ``cloudwatch:namespace`` condition keeps the role to the ``Tidemark`` namespace ("Using
        condition keys to limit access to CloudWatch namespaces":
        https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/iam-cw-condition-keys-namespace.html).
        """
        self.log_group_name = job_log_group_name(stack_name)
        self.log_group = logs.LogGroup(
            self,
            "JobLogs",
            log_group_name=self.log_group_name,
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.job_role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:DescribeLogGroups"],
                resources=[f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:*"],
            )
        )
        self.job_role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"],
                resources=[self.log_group.log_group_arn],  # arn:...:log-group:<name>:*
            )
        )
        self.job_role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": NAMESPACE}},
            )
        )

    def log_location(self, stream: str) -> str:
        """Where a stream's job runs log (the driver's stdout and stderr), for people to read."""
        return f"log group {self.log_group_name}, log streams {LOG_STREAM_PREFIX}/{stream}/..."

    def _job_arguments(self) -> str:
        """The job's arguments, a States.Array over the stream of the Map iteration."""
        arguments = f"'--stream', $.stream, '--config', '{self.config_asset.s3_object_url}'"
        if self._archive_root is not None:
            arguments += f", '--archive-root', '{self._archive_root}'"
        return f"States.Array({arguments})"

    def _spark_properties(self, environment: Mapping[str, str]) -> dict[str, str]:
        """Driver and executor environment, as spark-defaults properties (no shell quoting)."""
        env = {**environment, "AWS_REGION": Aws.REGION, "PYSPARK_PYTHON": IMAGE_PYTHON}
        for name, value in env.items():
            if not Token.is_unresolved(value) and len(value) > MAX_PROPERTY_CHARS:
                raise ConfigError(
                    f"pipeline: the job setting {name} is {len(value)} characters; "
                    f"EMR Serverless takes at most {MAX_PROPERTY_CHARS} per property"
                )
        properties = {f"spark.emr-serverless.driverEnv.{name}": value for name, value in env.items()}
        properties.update({f"spark.executorEnv.{name}": value for name, value in env.items()})
        return properties

    def _state_machine(self, config: TidemarkConfig, environment: Mapping[str, str]) -> sfn.StateMachine:
        settings = config.pipeline
        job_minutes = int(settings.job_timeout.total_seconds() // 60)
        run_job = sfn.CustomState(
            self,
            "RunAggregation",
            state_json={
                "Type": "Task",
                "Resource": f"arn:{Aws.PARTITION}:states:::emr-serverless:startJobRun.sync",
                "Parameters": {
                    "ApplicationId": self.application.attr_application_id,
                    "ExecutionRoleArn": self.job_role.role_arn,
                    "Name.$": "States.Format('tidemark-aggregate-{}', $.stream)",
                    "ExecutionTimeoutMinutes": job_minutes,
                    "JobDriver": {
                        "SparkSubmit": {
                            "EntryPoint": self.script.s3_object_url,
                            "EntryPointArguments.$": self._job_arguments(),
                            "SparkSubmitParameters": f"--py-files {self.code.s3_object_url}",
                        }
                    },
                    "ConfigurationOverrides": {
                        "ApplicationConfiguration": [
                            {"Classification": "spark-defaults", "Properties": self._spark_properties(environment)}
                        ],
                        # No LogTypes: the driver's stdout and stderr, the default (API reference,
                        # CloudWatchLoggingConfiguration.logTypes), where the job's log lines are.
                        "MonitoringConfiguration": {
                            "CloudWatchLoggingConfiguration": {
                                "Enabled": True,
                                "LogGroupName": self.log_group_name,
                                "LogStreamNamePrefix.$": f"States.Format('{LOG_STREAM_PREFIX}/{{}}', $.stream)",
                            }
                        },
                    },
                },
            },
        )
        each_stream = sfn.Map(
            self,
            "AggregateEachStream",
            items_path="$.streams",
            # Streams are independent; one run per stream at a time.
            max_concurrency=len(self.streams),
        )
        each_stream.item_processor(run_job)
        machine = workflow(
            self,
            each_stream,
            timeout=Duration.minutes(int(settings.schedule.total_seconds() // 60)),
            comment="Tidemark aggregation: one EMR Serverless job run per stream with aggregations",
        )
        # CustomState adds no permissions: exactly what startJobRun.sync needs.
        machine.add_to_role_policy(
            iam.PolicyStatement(actions=["emr-serverless:StartJobRun"], resources=[self.application_arn])
        )
        machine.add_to_role_policy(
            iam.PolicyStatement(
                actions=["emr-serverless:GetJobRun", "emr-serverless:CancelJobRun"],
                resources=[f"{self.application_arn}/jobruns/*"],  # job run ids are made per run
            )
        )
        machine.add_to_role_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[self.job_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "emr-serverless.amazonaws.com"}},
            )
        )
        machine.add_to_role_policy(
            iam.PolicyStatement(
                actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
                resources=[f"arn:{Aws.PARTITION}:events:{Aws.REGION}:{Aws.ACCOUNT_ID}:rule/{SYNC_RULE}"],
            )
        )
        return machine
