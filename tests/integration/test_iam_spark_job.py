"""The Spark aggregation job's code paths under the IAM policy the synthesized template grants its role.

A moto server of this module's own enforces IAM (``tests.support.iam``). A small workload is
archived by the admin; then the job runs as the deployment runs it, under the job role's
statements (``stack.pipeline.job_role``) resolved to this test's bucket, ledger, aggregates
table and the CDK assets bucket:

* **The job's configuration**: the deployed schedule passes ``--config s3://<assets>/<hash>.json``
  (read from the state machine's definition here, with the job's environment from its Spark
  properties); ``jobs.aggregate.load_job_config`` reads it with the role's client.
* **The real Spark job** (``run_aggregation``) on the suite's shared ``spark`` session, no second
  JVM: the driver's ledger reads (``plan``: hour marks, committed objects), its schema samples
  (``ObjectStore.read``), the sink's ``Query`` and ``BatchWriteItem`` and the ledger's mark updates
  (``record_aggregated``, ``record_run``) use clients holding the role's credentials. The executors
  are Python workers, which take their environment from the ``SparkContext``'s ``environment``
  when a Python function is created (Spark keys its worker daemons by that environment): for the
  run it holds the role's temporary credentials and this server's endpoint, so the executors'
  boto3 fetches and Arrow reads (``fetch_objects``) run under the role too, in their own daemon.
  The bucket exists on this server only, and the server authorizes every request, so a read
  that succeeds was made with the role's credentials.
* **The executors' reads, recorded**: a worker's calls cannot be recorded from here, so
  ``fetch_objects`` is also run in the test process over the same objects with the role's
  client, which records each ``GetObject``.

* **What the run reports outside the ledger**: the driver puts the run's figures
  (``jobs.aggregation.metrics.publish``) with a CloudWatch client holding the role's credentials.
  The role may ``cloudwatch:PutMetricData`` on "*" only where ``cloudwatch:namespace`` is
  ``Tidemark``; the server evaluates that condition with the request's namespace
  (``tidemark.embedded.moto_server``: moto alone would ask for ``monitoring:PutMetricData`` and
  ignore the namespace), so the same call in another namespace is denied here as in AWS.

What cannot run here: the deployed job passes ``--archive-root s3://<bucket>`` (``spark_readers``),
so on EMR Spark's own readers read Parquet, JSON Lines and CSV through EMRFS; there is no EMRFS
(nor Hadoop S3 connector) here. Its grants are the same ``s3:GetObject`` on the streams' raw
prefixes this test exercises with boto3, plus ``s3:ListBucket`` conditioned on those prefixes,
which the unused-grant report explains by EMRFS and ``tests/unit/test_stack_wiring.py`` asserts on
the template. EMR Serverless itself fetches the entry point and ``--py-files`` as the role, and S3
uses the archive key on the role's behalf (``kms:Decrypt``), and EMR Serverless ships the
driver's stdout and stderr to the job log group as the role (the ``logs:`` grants, for the log
group the state machine's ``MonitoringConfiguration`` names): those grants are explained, not used.

A grant the job needs and the template lacks fails here as AccessDenied would fail the job run;
``test_a_grant_the_job_lacks_denies_its_step`` shows each step failing without its grant.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from aws_cdk import Stage
from botocore.exceptions import ClientError

from jobs.aggregate import ENV_AGGREGATES_TABLE, load_job_config
from jobs.aggregation import metrics, reader
from jobs.aggregation.job import RunReport, run_aggregation
from jobs.aggregation.reader import ObjectStore, fetch_objects, value_schema
from jobs.aggregation.sink import AggregateSink, aggregates_table_schema
from tests.integration.test_aggregate_job import assert_same, expected_aggregates, table_aggregates
from tests.support.cdk import logical_id, synth_stack
from tests.support.harness import EsmModel, small_config
from tests.support.iam import (
    ACCOUNT,
    PARTITION,
    REGION,
    IamArchive,
    IamServer,
    RoleSession,
    Step,
    TemplateGrants,
    Use,
    allowed_reason,
    granted,
    iam_actions,
    unused_grants,
    unused_leading_keys,
)
from tests.support.workload import Workload, make_orders
from tidemark.config import TidemarkConfig
from tidemark.ledger.dynamodb import DynamoDBLedger

pytestmark = pytest.mark.xdist_group("spark")  # the session's one JVM: with the other Spark tests

STREAM = "orders"
ENV_BUCKET, ENV_LEDGER_TABLE = "TIDEMARK_BUCKET", "TIDEMARK_LEDGER_TABLE"
EXECUTOR_ENV = "spark.executorEnv."


@dataclass(frozen=True)
class JobDeployment:
    """What the synthesized template gives the job: its role and how the schedule runs it."""

    config: TidemarkConfig
    template: dict[str, Any]
    role: str  # the job role's logical id
    bucket: str
    ledger: str
    aggregates: str
    machine: str
    config_key: str  # the configuration asset's key in the CDK assets bucket
    config_asset: bytes  # the file the deployment publishes there
    log_group: str  # the job log group's logical id

    def grants(self, archive: IamArchive, aggregates_table: str) -> TemplateGrants:
        arn = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{aggregates_table}"
        # The log group's name is the template's (a fixed name); its Arn attribute ends in ":*".
        log_group = self.template["Resources"][self.log_group]["Properties"]["LogGroupName"]
        return TemplateGrants(
            self.template,
            archive.physical(
                self.bucket,
                self.ledger,
                extra={
                    self.aggregates: (aggregates_table, arn),
                    self.log_group: (log_group, log_group_arn(log_group)),
                },
            ),
        )


def log_group_arn(name: str) -> str:
    """A log group's ARN as CloudFormation's ``Arn`` attribute gives it (its log streams: ``:*``)."""
    return f"arn:{PARTITION}:logs:{REGION}:{ACCOUNT}:log-group:{name}:*"


@dataclass(frozen=True)
class JobRun:
    """How the state machine runs the job, resolved to this test's resources."""

    arguments: list[str]  # the job's arguments for the stream (EntryPointArguments)
    entry_point: str  # s3:// of jobs/aggregate.py
    py_files: str  # s3:// of the code archive
    environment: dict[str, str]  # the executors' (and driver's) settings
    log_group: str | None  # where EMR Serverless ships the driver's stdout and stderr

    def argument(self, name: str) -> str | None:
        return self.arguments[self.arguments.index(name) + 1] if name in self.arguments else None

    @classmethod
    def of(cls, grants: TemplateGrants, machine: str) -> JobRun:
        definition = json.loads(grants.resolve(grants.resources[machine]["Properties"]["DefinitionString"]))
        (map_state,) = definition["States"].values()
        (task,) = map_state["ItemProcessor"]["States"].values()
        parameters = task["Parameters"]
        submit = parameters["JobDriver"]["SparkSubmit"]
        # States.Array('--stream', $.stream, '--config', 's3://...'): the Map item gives $.stream
        arguments = [
            STREAM if part == "$.stream" else part.strip("'")
            for part in re.findall(r"'[^']*'|\$\.stream", submit["EntryPointArguments.$"])
        ]
        (defaults,) = parameters["ConfigurationOverrides"]["ApplicationConfiguration"]
        environment = {
            name.removeprefix(EXECUTOR_ENV): value
            for name, value in defaults["Properties"].items()
            if name.startswith(EXECUTOR_ENV)
        }
        py_files = submit["SparkSubmitParameters"].removeprefix("--py-files ")
        logging = parameters["ConfigurationOverrides"].get("MonitoringConfiguration", {})
        cloudwatch = logging.get("CloudWatchLoggingConfiguration", {})
        log_group = cloudwatch.get("LogGroupName") if cloudwatch.get("Enabled") else None
        return cls(arguments, submit["EntryPoint"], py_files, environment, log_group)


def s3_arn(url: str) -> str:
    return f"arn:{PARTITION}:s3:::{url.removeprefix('s3://')}"


@pytest.fixture(scope="module")
def deployment() -> JobDeployment:
    config = small_config(max_records=50)
    stack, template = synth_stack(config, nag=False)
    pipeline = stack.pipeline
    assert pipeline.enabled
    stage = Stage.of(stack)
    assert stage is not None
    staged = Path(stage.outdir) / pipeline.config_asset.asset_path  # the file `cdk deploy` publishes
    return JobDeployment(
        config,
        template.to_json(),
        logical_id(pipeline.job_role),
        logical_id(stack.storage.bucket),
        logical_id(stack.storage.ledger_table),
        logical_id(stack.storage.aggregates_table),
        logical_id(pipeline.state_machine),
        pipeline.config_asset.s3_object_key,
        staged.read_bytes(),
        logical_id(pipeline.log_group),
    )


def record_calls(role: RoleSession, client: Any, service: str) -> None:
    """Record a client's calls (a boto3 resource's) as ``RoleSession.client`` does."""

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        role.uses.update(iam_actions(service, model.name, params))

    client.meta.events.register(f"provide-client-params.{service}", record)


def role_resource(role: RoleSession, service: str) -> Any:
    session: Any = role.session
    resource = session.resource(service, endpoint_url=role.endpoint)
    record_calls(role, resource.meta.client, service)
    return resource


class Executors:
    """The shared session's Python workers, for one run, with another environment.

    A Python function takes the ``SparkContext``'s ``environment`` when it is made, and Spark
    starts a worker daemon per distinct environment: the run's workers are a daemon of their own,
    started with the role's credentials, and later runs on the session get the session's again."""

    def __init__(self, spark: Any) -> None:
        self.environment: dict[str, str] = spark.sparkContext.environment

    def run_as(self, role: RoleSession, settings: dict[str, str], action: Callable[[], RunReport]) -> RunReport:
        session = role.session.get_credentials()
        assert session is not None
        credentials = session.get_frozen_credentials()
        assert credentials.token is not None  # assumed: temporary credentials
        saved = dict(self.environment)
        self.environment.update(
            {name: value for name, value in settings.items() if name != "PYSPARK_PYTHON"}  # this venv's, not EMR's
        )
        self.environment.update(
            AWS_ACCESS_KEY_ID=str(credentials.access_key),
            AWS_SECRET_ACCESS_KEY=str(credentials.secret_key),
            AWS_SESSION_TOKEN=str(credentials.token),
            AWS_ENDPOINT_URL=role.endpoint,
            AWS_DEFAULT_REGION=REGION,
        )
        try:
            return action()
        finally:
            self.environment.clear()
            self.environment.update(saved)


@dataclass
class Aggregated:
    """The module's run: the workload archived, the job run under its role, what it used."""

    deployment: JobDeployment
    archive: IamArchive
    aggregates_table: str
    run: JobRun
    statements: list[dict[str, Any]]
    role: RoleSession
    workload: Workload
    report: RunReport
    executor_rows: int  # records fetch_objects read in this process, under the role
    published: Step  # metrics.publish of the run's summary, under the role


def archive_workload(archive: IamArchive, config: TidemarkConfig) -> Workload:
    """Two hours of two partitions, late records and dead letters, archived by the admin."""
    workload = make_orders(partitions=2, per_partition=150, hours=2, late_share=0.05, bad_share=0.05, seed=27)
    runtimes = archive.runtimes(config, role=None)
    EsmModel(workload, runtimes).drain(40)
    archive.clock.advance(minutes=16)
    runtime = runtimes(None)
    for partition in workload.records:
        runtime.writer(config.streams[0], partition).drain()
    return workload


def publish_job_config(archive: IamArchive, url: str, deployment: JobDeployment) -> None:
    """What ``cdk deploy`` publishes: the configuration asset, in the CDK assets bucket."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    assert key == deployment.config_key  # the job is given the asset the stack uploads
    archive.s3.create_bucket(Bucket=bucket)
    archive.s3.put_object(Bucket=bucket, Key=key, Body=deployment.config_asset)


def committed_raw(archive: IamArchive) -> list[tuple[str, str]]:
    """Every raw object the ledger committed, as (key, hour), read by the admin."""
    ledger = DynamoDBLedger(archive.table, client=archive.dynamodb)
    return [
        (item.key, item.hour)
        for mark in ledger.hour_marks(STREAM)
        for item in ledger.committed_objects(STREAM, mark.hour)
        if item.kind == "raw"
    ]


def read_in_process(root: str, objects: list[tuple[str, str]], source: str) -> int:
    """The executors' code, ``fetch_objects``, in this process over one batch of (key, hour) rows
    (``s3_client`` patched by the caller); the records it read."""
    store = ObjectStore(root)
    values = value_schema(((key, store.read(key)) for key, _hour in objects[:2]), source=source)
    keys, hours = zip(*objects, strict=True)
    batch = pa.RecordBatch.from_pydict({"key": list(keys), "hour": list(hours)})
    return sum(out.num_rows for out in fetch_objects(root, values, source)([batch]))


@pytest.fixture(scope="module")
def aggregated(
    spark: Any, iam_server: IamServer, deployment: JobDeployment, tmp_path_factory: pytest.TempPathFactory
) -> Aggregated:
    archive = IamArchive.create(iam_server, tmp_path_factory.mktemp("iam-job"))
    aggregates_table = f"{archive.table}-aggregates"
    archive.dynamodb.create_table(**aggregates_table_schema(aggregates_table))
    grants = deployment.grants(archive, aggregates_table)
    run = JobRun.of(grants, deployment.machine)
    config_url = run.argument("--config")
    assert config_url is not None and config_url.startswith("s3://cdk-")
    publish_job_config(archive, config_url, deployment)
    workload = archive_workload(archive, deployment.config)

    statements = grants.statements(deployment.role)
    role = archive.assume("job", statements)
    # jobs/aggregate.py main(), with the role's clients (main would stop the shared session)
    config = load_job_config(config_url, s3=role.client("s3"))
    stream = config.stream(run.argument("--stream") or "")
    env = run.environment
    assert (env[ENV_BUCKET], env[ENV_LEDGER_TABLE], env[ENV_AGGREGATES_TABLE]) == (
        archive.bucket,
        archive.table,
        aggregates_table,
    )
    ledger = DynamoDBLedger(env[ENV_LEDGER_TABLE], client=role.client("dynamodb"))
    sink = AggregateSink(env[ENV_AGGREGATES_TABLE], resource=role_resource(role, "dynamodb"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reader, "s3_client", lambda: role.client("s3"))  # the driver's, in this process
        report = Executors(spark).run_as(
            role,
            env,
            lambda: run_aggregation(spark, stream, ledger=ledger, bucket=env[ENV_BUCKET], sink=sink, tasks=2),
        )
        rows = read_in_process(f"s3://{env[ENV_BUCKET]}", committed_raw(archive), stream.source.shape.kind)
    # what main does after the run: the figures to CloudWatch (a denial fails its own test)
    published = Step.run(lambda: metrics.publish(report.summary(), cloudwatch=role.client("cloudwatch")))
    return Aggregated(deployment, archive, aggregates_table, run, statements, role, workload, report, rows, published)


def test_the_job_aggregates_the_archive_under_its_role(aggregated: Aggregated) -> None:
    report, workload = aggregated.report, aggregated.workload
    archived = sum(1 for expected in workload.expected if expected.hour)
    assert report.records == archived and report.duplicates == 0
    assert report.readers == {"arrow": len(report.objects)}  # executors: boto3 and Arrow, under the role
    assert report.still_dirty == [] and sorted(report.cleared) == sorted(report.hours)
    table = aggregated.archive.server.admin.resource("dynamodb", endpoint_url=aggregated.archive.endpoint).Table(
        aggregated.aggregates_table
    )
    assert_same(table_aggregates(table), expected_aggregates(workload.expected))
    assert aggregated.executor_rows == archived  # fetch_objects in this process, same objects


def test_the_job_used_only_its_own_streams_objects_and_its_tables(aggregated: Aggregated) -> None:
    archive, run = aggregated.archive, aggregated.run
    table = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/"
    config = s3_arn(run.argument("--config") or "")
    actions = {(use.action, use.resource.split("?", 1)[0]) for use in aggregated.role.uses}
    assert {
        ("s3:GetObject", config),
        ("dynamodb:Query", table + archive.table),  # hour marks, committed objects
        ("dynamodb:UpdateItem", table + archive.table),  # record_aggregated
        ("dynamodb:PutItem", table + archive.table),  # record_run
        ("dynamodb:Query", table + aggregated.aggregates_table),
        ("dynamodb:BatchWriteItem", table + aggregated.aggregates_table),
    } <= actions
    objects = {resource for action, resource in actions if action == "s3:GetObject" and resource != config}
    assert objects == {s3_arn(f"{archive.bucket}/{key}") for key in aggregated.report.objects}
    assert all("/raw/orders/" in resource for resource in objects)  # never a dead letter (errors/)


def test_the_job_puts_its_figures_in_the_tidemark_namespace_under_its_role(aggregated: Aggregated) -> None:
    """The run's three figures, dimensioned by service and stream, reach CloudWatch under the
    role (the stack's AggregationHoursFailed alarm watches the first)."""
    aggregated.published.ok()
    assert Use("cloudwatch:PutMetricData", "*") in aggregated.role.uses
    cloudwatch = aggregated.archive.server.admin_client("cloudwatch")
    put = {
        metric["MetricName"]: metric["Dimensions"]
        for metric in cloudwatch.list_metrics(Namespace="Tidemark")["Metrics"]
        if {"Name": "service", "Value": "tidemark-aggregation"} in metric["Dimensions"]
    }
    dimensions = [{"Name": "service", "Value": "tidemark-aggregation"}, {"Name": "stream", "Value": STREAM}]
    assert put == dict.fromkeys(
        ["AggregationHoursFailed", "AggregationHoursAggregated", "AggregationItemsWritten"], dimensions
    )


def test_the_job_may_put_metrics_in_no_other_namespace(aggregated: Aggregated) -> None:
    """The same figures in another namespace are denied: the statement's condition on
    ``cloudwatch:namespace`` is evaluated with the request's namespace (see the module's docstring),
    so this fails if the template's PutMetricData grant loses its condition."""
    (statement,) = [s for s in aggregated.statements if "cloudwatch:PutMetricData" in json.dumps(s["Action"])]
    assert statement["Condition"] == {"StringEquals": {"cloudwatch:namespace": "Tidemark"}}
    cloudwatch = aggregated.role.client("cloudwatch")
    with pytest.raises(ClientError) as denied:
        cloudwatch.put_metric_data(Namespace="Elsewhere", MetricData=metrics.metric_data(aggregated.report.summary()))
    assert denied.value.response["Error"]["Code"] == "AccessDenied"
    assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # and without the condition the same call is allowed: the denial above is the condition's doing
    unconditioned = [
        {key: value for key, value in s.items() if key != "Condition"} if s is statement else s
        for s in aggregated.statements
    ]
    role = aggregated.archive.server.assume("job-any-namespace", unconditioned)
    role.client("cloudwatch").put_metric_data(
        Namespace="Elsewhere", MetricData=metrics.metric_data(aggregated.report.summary())
    )


def without(statements: list[dict[str, Any]], resource: str) -> list[dict[str, Any]]:
    """The statements with every resource containing ``resource`` left out."""
    kept = []
    for statement in statements:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        remaining = [name for name in resources if resource not in name]
        if remaining:
            kept.append({**statement, "Resource": remaining})
    return kept


@pytest.mark.parametrize("step", ["config", "plan", "read", "sink"])
def test_a_grant_the_job_lacks_denies_its_step(
    aggregated: Aggregated, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step with its grant taken out of the template's statements fails with AccessDenied."""
    archive, run = aggregated.archive, aggregated.run
    config_url = run.argument("--config") or ""
    left_out = {
        "config": config_url.rsplit("/", 1)[1],
        "plan": f":table/{archive.table}",
        "read": f"{archive.bucket}/raw/",
        "sink": f":table/{aggregated.aggregates_table}",
    }[step]
    statements = without(aggregated.statements, left_out)
    assert statements != aggregated.statements
    role = archive.server.assume(f"job-without-{step}", statements)
    monkeypatch.setattr(reader, "s3_client", lambda: role.client("s3"))
    actions: dict[str, Callable[[], object]] = {
        "config": lambda: load_job_config(config_url, s3=role.client("s3")),
        "plan": lambda: DynamoDBLedger(archive.table, client=role.client("dynamodb")).hour_marks(STREAM),
        "read": lambda: ObjectStore.of_bucket(archive.bucket).read(aggregated.report.objects[0]),
        "sink": lambda: AggregateSink(
            aggregated.aggregates_table, resource=role_resource(role, "dynamodb")
        ).replace_hour(STREAM, "orders_by_product", "2026-11-21T08", [], "denied"),
    }
    with pytest.raises(ClientError) as denied:
        actions[step]()
    assert denied.value.response["Error"]["Code"] in ("AccessDenied", "AccessDeniedException")


def job_reasons(aggregated: Aggregated) -> dict[Use, str]:
    """Grants of the job role no code path here uses, and who uses them in AWS."""
    run, bucket = aggregated.run, aggregated.archive.bucket
    reasons = {
        Use("s3:GetObject", s3_arn(run.entry_point)): "EMR Serverless fetches the entry point as the job's role",
        Use("s3:GetObject", s3_arn(run.py_files)): "EMR Serverless fetches --py-files as the job's role",
    }
    if run.argument("--archive-root") == f"s3://{bucket}":
        reasons[Use("s3:ListBucket", f"arn:{PARTITION}:s3:::{bucket}")] = (
            "EMRFS (--archive-root, Spark's own readers) lists an object's folder; cannot run here"
        )
    if run.log_group is not None:
        # EMR Serverless ships the driver's stdout and stderr to the log group the state machine's
        # MonitoringConfiguration names, as the job's role; nothing here can run EMR Serverless
        shipping = "EMR Serverless writes the driver's logs to the job log group as the job's role; cannot run here"
        reasons[Use("logs:DescribeLogGroups", f"arn:{PARTITION}:logs:{REGION}:{ACCOUNT}:*")] = shipping
        for action in ("logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"):
            reasons[Use(action, log_group_arn(run.log_group))] = shipping
    return reasons


def test_every_job_grant_is_used_by_the_job_or_by_aws_with_a_reason(aggregated: Aggregated) -> None:
    """The unused-grant report for the job role: a grant no path used and nobody explains fails."""
    grants = granted(aggregated.statements)
    unused = unused_grants(grants, aggregated.role.uses)
    reasons = job_reasons(aggregated)

    def reason(grant: Use) -> str | None:
        if grant in reasons:
            return reasons[grant]
        # Of the suite's reasons only SSE-KMS applies to the job (the rest are Lambda's and the ESM's)
        return allowed_reason(grant) if grant.action.startswith("kms:") else None

    report = {grant: reason(grant) for grant in sorted(unused)}
    print("\n".join(f"unused by the job: {grant.action} on {grant.resource}: {why}" for grant, why in report.items()))
    unexplained = sorted(grant for grant, why in report.items() if why is None)
    assert unexplained == [], "\n".join(f"{grant.action} on {grant.resource}" for grant in unexplained)
    assert set(reasons) <= grants  # every explanation is for a grant the template holds


def test_every_ledger_and_aggregates_request_of_the_job_is_within_its_leading_keys(aggregated: Aggregated) -> None:
    """The job's table grants carry ``dynamodb:LeadingKeys`` conditions (its streams' hour marks,
    committed objects and runs; their aggregates), which moto ignores: the role's clients (the
    ledger's and the sink's, from the role's session) evaluate them before a call is sent
    (``tests.support.iam.LeadingKeysEvaluator``, standing in for AWS), so a run reaching a
    partition's state or another stream's items would have failed above. Every request of the
    real run was allowed, named its stream only, and each pattern was used."""
    role = aggregated.role
    assert role.requests and role.denied == []
    keys = {key for request in role.requests for key in request.leading_keys}
    assert {key.split("#")[0] for key in keys} == {"HOURS", "HOUR", "RUNS", "AGG"}
    assert {key.split("#")[1] for key in keys} == {STREAM}
    assert unused_leading_keys(aggregated.statements, role.requests) == set()
