"""The whole stack from the example configuration: the wiring a reviewer of the template checks.

Synthesized in-process (jsii runs the CDK in a local Node process): no Docker, no network, no AWS.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Capture, Match, Template

from stacks import star_actions
from stacks.functions import spool_mb
from stacks.pipeline import IMAGE_PYTHON
from stacks.source import consumer_group_id
from stacks.staging import STAGING_MOUNT
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import REPO, logical_id, synth_stack
from tidemark.config import TidemarkConfig
from tidemark.config.deployment import PipelineSettings

ARCHIVER_HANDLER = "handler.lambda_handler"
CDK_CUSTOM_RESOURCE_HANDLER = "__entrypoint__.handler"  # CDK's own (empties the default SG)


@pytest.fixture(scope="module")
def synthesized(example_config: TidemarkConfig) -> tuple[TidemarkStack, Template]:
    return synth_stack(example_config, nag=False)


@pytest.fixture(scope="module")
def stack(synthesized: tuple[TidemarkStack, Template]) -> TidemarkStack:
    return synthesized[0]


@pytest.fixture(scope="module")
def template(synthesized: tuple[TidemarkStack, Template]) -> Template:
    return synthesized[1]


def tidemark_functions(template: Template) -> dict[str, dict[str, Any]]:
    return {
        lid: fn["Properties"]
        for lid, fn in template.find_resources("AWS::Lambda::Function").items()
        if fn["Properties"]["Handler"] != CDK_CUSTOM_RESOURCE_HANDLER
    }


def render(value: Any) -> str:
    """A ``Fn::Join`` of strings and references as one string (``Fn::Sub`` templates as they are,
    other references as ``<ref>``)."""
    if isinstance(value, str):
        return value
    if "Fn::Sub" in value:
        return str(value["Fn::Sub"])
    if "Fn::Join" not in value:
        return "<ref>"
    return "".join(render(part) for part in value["Fn::Join"][1])


# --- archiver: ESM -> function -> topic ------------------------------------------------------


def test_event_source_mapping_feeds_the_stream_function_from_its_topic(
    stack: TidemarkStack, template: Template, example_config: TidemarkConfig
) -> None:
    stream = example_config.streams[0]
    fn = stack.archiver.functions[stream.name]
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 1)
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionName": {"Ref": logical_id(fn)},
            "EventSourceArn": stream.source.cluster_arn,
            "Topics": [stream.source.topic],
            "BatchSize": stream.source.batch_size,
            "MaximumBatchingWindowInSeconds": 1,
            "StartingPosition": "TRIM_HORIZON",
            "AmazonManagedKafkaEventSourceConfig": {"ConsumerGroupId": consumer_group_id(stream)},
            # unbounded retries and no on-failure destination: with one, AWS caps unbounded retries
            # at 10 and then moves on (loss); a failing batch is retried, never skipped
            "DestinationConfig": Match.absent(),
            "MaximumRetryAttempts": Match.absent(),
            # the mapping's own metrics need provisioned mode (the function's OffsetLag does not)
            "MetricsConfig": Match.absent(),
        },
    )
    archiver = tidemark_functions(template)[logical_id(fn)]
    assert archiver["Handler"] == ARCHIVER_HANDLER
    assert (archiver["Runtime"], archiver["Architectures"]) == ("python3.13", ["arm64"])
    assert (archiver["Timeout"], archiver["MemorySize"]) == (300, 2048)
    assert archiver["Timeout"] < 14 * 60  # below the Kafka ESM's invocation limit
    # /tmp holds one rendered object of up to flush.max_bytes (64 MiB) twice over, plus the default
    assert archiver["EphemeralStorage"] == {"Size": 2 * 64 + 512}


def test_every_function_runs_on_the_core_layer_for_arm64_python_313(stack: TidemarkStack, template: Template) -> None:
    layer_id = logical_id(stack.core_layer)
    template.has_resource_properties(
        "AWS::Lambda::LayerVersion",
        {"CompatibleRuntimes": ["python3.13"], "CompatibleArchitectures": ["arm64"]},
    )
    functions = tidemark_functions(template)
    assert len(functions) == 5  # the archiver of the one stream and the four sweeper steps
    assert all(fn["Layers"] == [{"Ref": layer_id}] for fn in functions.values())


def test_spool_space_follows_the_largest_object() -> None:
    assert spool_mb(1024) == 514
    assert spool_mb(5 * 1024**3) == 10240  # capped at Lambda's 10 GiB


def test_the_spark_image_is_the_one_the_stack_runs() -> None:
    dockerfile = (REPO / "jobs" / "image" / "Dockerfile").read_text()
    assert f"ENV PYSPARK_PYTHON={IMAGE_PYTHON}" in dockerfile
    assert f"ARG EMR_RELEASE={PipelineSettings().release_label}" in dockerfile
    # the base image by digest, with no default: a build without one fails (issue 31)
    assert "/spark/${EMR_RELEASE}@${EMR_IMAGE_DIGEST}" in dockerfile
    assert re.search(r"^ARG EMR_IMAGE_DIGEST$", dockerfile, re.MULTILINE)
    assert ":latest\n" not in dockerfile.split("FROM", 1)[1]


# --- EFS staging -------------------------------------------------------------------------------


def test_every_function_mounts_the_staging_access_point(stack: TidemarkStack, template: Template) -> None:
    """The sweeper's steps mount the root access point at /mnt/staging; the archiver its stream's
    at /mnt/orders, under its staging root /mnt (tests/unit/test_staging_access_points.py)."""
    root = logical_id(stack.staging.access_point)
    own = logical_id(stack.staging.stream_access_points["orders"])
    archiver = logical_id(stack.archiver.functions["orders"])
    for lid, fn in tidemark_functions(template).items():
        (mount,) = fn["FileSystemConfigs"]
        variables = fn["Environment"]["Variables"]
        if lid == archiver:
            assert (mount["LocalMountPath"], variables["TIDEMARK_STAGING_ROOT"]) == ("/mnt/orders", "/mnt")
            assert own in json.dumps(mount["Arn"]) and root not in json.dumps(mount["Arn"])
        else:
            assert mount["LocalMountPath"] == STAGING_MOUNT == "/mnt/staging"
            assert root in json.dumps(mount["Arn"])
            assert variables["TIDEMARK_STAGING_ROOT"] == STAGING_MOUNT


def test_access_point_pins_a_posix_user_and_root_directory(template: Template) -> None:
    template.has_resource_properties("AWS::EFS::FileSystem", {"Encrypted": True, "ThroughputMode": "elastic"})
    template.has_resource_properties(
        "AWS::EFS::AccessPoint",
        {
            "PosixUser": {"Uid": "1001", "Gid": "1001"},
            "RootDirectory": {
                "Path": "/tidemark",
                "CreationInfo": {"OwnerUid": "1001", "OwnerGid": "1001", "Permissions": "750"},
            },
        },
    )
    template.resource_count_is("AWS::EFS::MountTarget", 2)  # one per AZ


# --- environment ---------------------------------------------------------------------------------


def test_functions_get_the_bucket_ledger_and_runtime_config(
    stack: TidemarkStack, template: Template, example_config: TidemarkConfig
) -> None:
    for fn in tidemark_functions(template).values():
        env = fn["Environment"]["Variables"]
        assert env["TIDEMARK_BUCKET"] == {"Ref": logical_id(stack.storage.bucket)}
        assert env["TIDEMARK_LEDGER_TABLE"] == {"Ref": logical_id(stack.storage.ledger_table)}
        assert env["TIDEMARK_CONFIG_JSON"] == example_config.runtime_json()
        # the functions never get the deployment-only sections
        assert not {"network", "pipeline", "alarms"} & set(json.loads(env["TIDEMARK_CONFIG_JSON"]))


# --- IAM -------------------------------------------------------------------------------------

#: the only actions allowed on "*" (each with its reason there)
STAR_ACTIONS = set(star_actions.STAR_ACTIONS)


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def tidemark_statements(template: Template) -> list[tuple[str, dict[str, Any]]]:
    """Every Allow statement of the stack's identity policies (CDK's custom resource aside)."""
    found = []
    for lid, policy in template.find_resources("AWS::IAM::Policy").items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Allow":
                found.append((lid, statement))
    return found


def test_no_wildcard_actions_anywhere(template: Template) -> None:
    statements = tidemark_statements(template)
    assert len(statements) > 40
    wildcards = [(lid, a) for lid, s in statements for a in listed(s["Action"]) if "*" in a]
    assert wildcards == []


def test_star_resources_only_where_aws_requires_them(template: Template) -> None:
    offenders = []
    for lid, statement in tidemark_statements(template):
        if "*" not in listed(statement["Resource"]):
            continue
        actions = set(listed(statement["Action"]))
        if actions <= STAR_ACTIONS:
            continue
        # EFS mount: CDK's grant is on "*" but conditioned on the staging access point
        if actions == {"elasticfilesystem:ClientMount"} and "elasticfilesystem:AccessPointArn" in json.dumps(
            statement.get("Condition", {})
        ):
            continue
        # The job's metrics: PutMetricData has no resource type; the condition keeps it to Tidemark's namespace
        if actions == {"cloudwatch:PutMetricData"} and statement.get("Condition") == {
            "StringEquals": {"cloudwatch:namespace": "Tidemark"}
        }:
            continue
        offenders.append((lid, sorted(actions)))
    assert offenders == []


def test_object_grants_are_scoped_to_a_key_prefix(template: Template) -> None:
    """No ``<bucket>/*``: every object-level resource names a prefix below the bucket."""
    for _, statement in tidemark_statements(template):
        for resource in listed(statement["Resource"]):
            if isinstance(resource, dict) and "Fn::Join" in resource:
                text = render(resource)
                if text.endswith("/*") and text.startswith("<ref>/"):
                    assert text.count("/") >= 2, text


def test_no_role_carries_a_managed_policy(template: Template) -> None:
    roles = template.find_resources("AWS::IAM::Role")
    with_managed = [
        lid for lid, role in roles.items() if role["Properties"].get("ManagedPolicyArns") and "CustomVpc" not in lid
    ]
    assert with_managed == []


def archiver_statements(stack: TidemarkStack, template: Template) -> list[dict[str, Any]]:
    role = logical_id(stack.archiver.functions["orders"].role)  # type: ignore[arg-type]
    return [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_archiver_writes_only_its_streams_prefixes_and_never_deletes(stack: TidemarkStack, template: Template) -> None:
    statements = archiver_statements(stack, template)
    puts = [s for s in statements if "s3:PutObject" in listed(s["Action"])]
    # no on-failure destination (unbounded retries): nothing under aws/lambda/
    assert sorted(render(r) for s in puts for r in listed(s["Resource"])) == [
        "<ref>/errors/orders/*",
        "<ref>/raw/orders/*",
    ]
    # a conditional upload that meets an existing object heads it (s3:GetObject)
    (reads,) = [s for s in statements if "s3:GetObject" in listed(s["Action"])]
    assert sorted(render(r) for r in listed(reads["Resource"])) == ["<ref>/errors/orders/*", "<ref>/raw/orders/*"]
    granted = {a for s in statements for a in listed(s["Action"])}
    assert not {a for a in granted if a.startswith(("s3:", "dynamodb:")) and "Delete" in a}
    assert "dynamodb:Scan" not in granted


def test_archiver_reads_only_its_topic_and_group(
    stack: TidemarkStack, template: Template, example_config: TidemarkConfig
) -> None:
    cluster = example_config.streams[0].source.cluster_arn
    assert cluster is not None
    by_action = {a: s["Resource"] for s in archiver_statements(stack, template) for a in listed(s["Action"])}
    assert by_action["kafka-cluster:Connect"] == cluster
    assert by_action["kafka:GetBootstrapBrokers"] == cluster
    name_uuid = cluster.split(":cluster/")[1]
    assert by_action["kafka-cluster:ReadData"] == f"arn:aws:kafka:us-east-1:123456789012:topic/{name_uuid}/orders"
    assert by_action["kafka-cluster:AlterGroup"] == (
        f"arn:aws:kafka:us-east-1:123456789012:group/{name_uuid}/{consumer_group_id(example_config.streams[0])}"
    )


# --- buckets -----------------------------------------------------------------------------------


def test_both_buckets_are_tls_only(template: Template) -> None:
    policies = template.find_resources("AWS::S3::BucketPolicy")
    buckets = set(template.find_resources("AWS::S3::Bucket"))
    tls_only = {
        policy["Properties"]["Bucket"]["Ref"]
        for policy in policies.values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Deny"
        and statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
        and statement["Principal"] == {"AWS": "*"}
    }
    assert tls_only == buckets and len(buckets) == 2


# --- network -----------------------------------------------------------------------------------


def test_created_vpc_has_isolated_subnets_and_endpoints_only(template: Template) -> None:
    template.resource_count_is("AWS::EC2::NatGateway", 0)
    template.resource_count_is("AWS::EC2::InternetGateway", 0)
    endpoints = template.find_resources("AWS::EC2::VPCEndpoint")
    services = sorted(
        (render(e["Properties"]["ServiceName"]).rsplit(".", 1)[-1], e["Properties"].get("VpcEndpointType", "Gateway"))
        for e in endpoints.values()
    )
    assert services == [("dynamodb", "Gateway"), ("lambda", "Interface"), ("s3", "Gateway"), ("sts", "Interface")]


def test_function_security_group_allows_only_https_and_nfs(stack: TidemarkStack, template: Template) -> None:
    group = template.find_resources("AWS::EC2::SecurityGroup")[logical_id(stack.network.function_security_group)]
    # environment-agnostic: the prefix lists are unknown, so HTTPS also goes anywhere (a synth
    # warning; tests/unit/test_stack_network_policies.py limits it)
    assert group["Properties"]["SecurityGroupEgress"] == [
        {
            "CidrIp": {"Fn::GetAtt": [logical_id(stack.network.vpc), "CidrBlock"]},  # type: ignore[arg-type]
            "Description": "HTTPS to interface endpoints in the VPC",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        },
        {
            "CidrIp": "0.0.0.0/0",
            "Description": "HTTPS to AWS service endpoints",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        },
    ]
    nfs = [
        rule["Properties"]
        for rule in template.find_resources("AWS::EC2::SecurityGroupEgress").values()
        if rule["Properties"]["GroupId"]
        == {"Fn::GetAtt": [logical_id(stack.network.function_security_group), "GroupId"]}
    ]
    assert [(rule["FromPort"], rule["ToPort"]) for rule in nfs] == [(2049, 2049)]


# --- sweeper and pipeline ------------------------------------------------------------------------


def test_state_machines_and_their_schedules(stack: TidemarkStack, template: Template) -> None:
    machines = template.find_resources("AWS::StepFunctions::StateMachine")
    assert set(machines) == {logical_id(stack.sweeper.state_machine), logical_id(stack.pipeline.state_machine)}
    rules = {
        rule["Properties"]["Targets"][0]["Arn"]["Ref"]: rule["Properties"]
        for rule in template.find_resources("AWS::Events::Rule").values()
    }
    assert rules[logical_id(stack.sweeper.state_machine)]["ScheduleExpression"] == "rate(5 minutes)"
    pipeline = rules[logical_id(stack.pipeline.state_machine)]
    assert pipeline["ScheduleExpression"] == "rate(1 hour)"
    assert json.loads(pipeline["Targets"][0]["Input"]) == {"streams": [{"stream": "orders"}]}


def test_emr_serverless_application_runs_spark_35_from_the_configured_image(
    template: Template, example_config: TidemarkConfig
) -> None:
    label = Capture()
    template.has_resource_properties(
        "AWS::EMRServerless::Application",
        {
            "Type": "Spark",
            "ReleaseLabel": label,
            "ImageConfiguration": {"ImageUri": example_config.pipeline.image_uri},
            "AutoStopConfiguration": {"Enabled": True, "IdleTimeoutMinutes": 15},
        },
    )
    major, minor, _ = label.as_string().removeprefix("emr-").split(".")
    assert major == "7"  # every EMR 7.x release ships Spark 3.5.x, the minor the job is tested on
    assert int(minor) >= 0


def test_pipeline_runs_the_job_asset_with_the_tables_in_its_environment(
    stack: TidemarkStack, template: Template
) -> None:
    body = template.find_resources("AWS::StepFunctions::StateMachine")[logical_id(stack.pipeline.state_machine)][
        "Properties"
    ]["DefinitionString"]
    text = render(body)
    definition = json.loads(text)
    task = definition["States"]["AggregateEachStream"]["ItemProcessor"]["States"]["RunAggregation"]
    assert task["Resource"].endswith(":states:::emr-serverless:startJobRun.sync")
    submit = task["Parameters"]["JobDriver"]["SparkSubmit"]
    config_url = render(stack.resolve(stack.pipeline.config_asset.s3_object_url))
    bucket = render(stack.resolve(stack.storage.bucket.bucket_name))
    assert submit["EntryPointArguments.$"] == (
        f"States.Array('--stream', $.stream, '--config', '{config_url}', '--archive-root', 's3://{bucket}')"
    )
    assert config_url.endswith(".json")
    assert submit["EntryPoint"].startswith("s3://") and submit["EntryPoint"].endswith(".py")
    assert submit["SparkSubmitParameters"].startswith("--py-files s3://")
    assert task["Parameters"]["ExecutionTimeoutMinutes"] == 50
    properties = task["Parameters"]["ConfigurationOverrides"]["ApplicationConfiguration"][0]["Properties"]
    for name in ("TIDEMARK_BUCKET", "TIDEMARK_LEDGER_TABLE", "TIDEMARK_AGGREGATES_TABLE", "AWS_REGION"):
        assert f"spark.emr-serverless.driverEnv.{name}" in properties
        assert f"spark.executorEnv.{name}" in properties
    # the configuration travels as an S3 object: EMR takes at most 1,024 characters per property
    assert not [key for key in properties if "TIDEMARK_CONFIG" in key]
    assert all(len(value) <= 1024 for value in properties.values() if isinstance(value, str))
    assert properties["spark.emr-serverless.driverEnv.PYSPARK_PYTHON"] == "/usr/bin/python3.11"
    assert definition["TimeoutSeconds"] == 3600  # one schedule period: runs never overlap


def run_aggregation_task(stack: TidemarkStack, template: Template) -> dict[str, Any]:
    body = template.find_resources("AWS::StepFunctions::StateMachine")[logical_id(stack.pipeline.state_machine)][
        "Properties"
    ]["DefinitionString"]
    definition = json.loads(render(body))
    task: dict[str, Any] = definition["States"]["AggregateEachStream"]["ItemProcessor"]["States"]["RunAggregation"]
    return task


def test_job_runs_ship_the_drivers_logs_to_the_job_log_group(stack: TidemarkStack, template: Template) -> None:
    """The driver's stdout and stderr (no LogTypes: EMR Serverless's default), where the job's
    ERROR line per failed hour goes, into a log group of the stack's own, per stream's prefix."""
    (group_id,) = template.find_resources("AWS::Logs::LogGroup", {"Properties": {"LogGroupName": Match.any_value()}})
    group = template.find_resources("AWS::Logs::LogGroup")[group_id]
    assert group_id == logical_id(stack.pipeline.log_group)
    assert group["Properties"] == {"LogGroupName": "/tidemark/Tidemark/aggregation", "RetentionInDays": 30}
    assert group["DeletionPolicy"] == group["UpdateReplacePolicy"] == "Delete"  # as the functions' log groups
    logging = run_aggregation_task(stack, template)["Parameters"]["ConfigurationOverrides"]["MonitoringConfiguration"]
    assert logging == {
        "CloudWatchLoggingConfiguration": {
            "Enabled": True,
            "LogGroupName": "/tidemark/Tidemark/aggregation",
            "LogStreamNamePrefix.$": "States.Format('tidemark-aggregate/{}', $.stream)",
        }
    }


def job_role_statements(stack: TidemarkStack, template: Template) -> list[dict[str, Any]]:
    role = logical_id(stack.pipeline.job_role)
    return [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_job_role_writes_only_its_log_group_and_puts_only_tidemark_metrics(
    stack: TidemarkStack, template: Template
) -> None:
    """What EMR Serverless's CloudWatch logging needs of the runtime role (DescribeLogGroups in the
    account, the rest on the group; no CreateLogGroup: the stack makes it), and PutMetricData in
    the Tidemark namespace only."""
    reporting = [
        (sorted(listed(s["Action"])), s["Resource"], s.get("Condition"))
        for s in job_role_statements(stack, template)
        if any(action.startswith(("logs:", "cloudwatch:")) for action in listed(s["Action"]))
    ]
    group_arn = {"Fn::GetAtt": [logical_id(stack.pipeline.log_group), "Arn"]}  # arn:...:log-group:<name>:*
    in_the_account = {
        "Fn::Join": [
            "",
            ["arn:", {"Ref": "AWS::Partition"}, ":logs:", {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"}, ":*"],
        ]
    }
    assert sorted(reporting, key=str) == sorted(
        [
            (["logs:DescribeLogGroups"], in_the_account, None),
            (["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"], group_arn, None),
            (["cloudwatch:PutMetricData"], "*", {"StringEquals": {"cloudwatch:namespace": "Tidemark"}}),
        ],
        key=str,
    )


# --- observability -------------------------------------------------------------------------------

DASHBOARD_WIDGETS = [
    "Alarms (runbook: README 'Runbook')",
    "Records in",
    "Duplicates dropped",
    "Dead-lettered",
    "Bytes staged",
    "Objects committed",
    "Flush latency",
    "ESM offset lag",
    "Archiver errors and throttles",
    "Archiver duration",
    "Sweeper recoveries",
    "Reconciliation findings",
    "EFS storage bytes",
    "EFS throughput: used vs permitted (bytes/s)",
    "Quarantines, flush errors and position resets",
    "Ledger conflicts and hours waiting",
    "Spark job outcomes",
]


def dashboard_widgets(template: Template) -> dict[str, dict[str, Any]]:
    (dashboard,) = template.find_resources("AWS::CloudWatch::Dashboard").values()
    body = json.loads(render(dashboard["Properties"]["DashboardBody"]))
    return {widget["properties"]["title"]: widget["properties"] for widget in body["widgets"]}


def test_dashboard_has_every_widget(template: Template) -> None:
    assert list(dashboard_widgets(template)) == DASHBOARD_WIDGETS


def test_dashboard_metrics_match_what_the_functions_emit(template: Template) -> None:
    widgets = dashboard_widgets(template)
    records = widgets["Records in"]["metrics"][0]
    assert records[:6] == ["Tidemark", "RecordsIn", "service", "tidemark-archiver", "stream", "orders"]
    latency = [metric[-1]["stat"] for metric in widgets["Flush latency"]["metrics"]]
    assert latency == ["p50", "p99"]
    lag = widgets["ESM offset lag"]["metrics"][0]
    assert lag[:3] == ["AWS/Lambda", "OffsetLag", "FunctionName"]
    outcomes = {metric[1] for metric in widgets["Spark job outcomes"]["metrics"]}
    assert {"ExecutionsSucceeded", "ExecutionsFailed", "SuccessJobs", "FailedJobs"} <= outcomes


def test_alarms_notify_the_topic(stack: TidemarkStack, template: Template) -> None:
    topic = logical_id(stack.observability.topic)
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    described = sorted(alarm["Properties"]["AlarmDescription"].split(":")[0] for alarm in alarms.values())
    # the stream's 8, reconciliation, sweeper executions and functions, EFS throughput, aggregation
    assert len(alarms) == 13
    assert all(alarm["Properties"]["AlarmActions"] == [{"Ref": topic}] for alarm in alarms.values())
    # lag growth, freshness, archiver errors, dead letters, quarantines, flush errors, position resets,
    # aggregation hours failed
    assert described.count("orders") == 8
    lag = next(a["Properties"] for a in alarms.values() if "offset lag" in a["Properties"]["AlarmDescription"])
    expression = next(m["Expression"] for m in lag["Metrics"] if "Expression" in m)
    assert expression == "IF(lag > 100000 AND DIFF(lag) > 0, 1, 0)"
    template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})


def test_spark_readers_may_list_only_the_streams_raw_prefixes(stack: TidemarkStack, template: Template) -> None:
    """The job reads Parquet/JSON/CSV through EMRFS (``--archive-root``), which lists an object's
    folder to find it: ``s3:ListBucket`` on the bucket, conditioned on the streams' raw prefixes."""
    role = logical_id(stack.pipeline.job_role)
    listing = [
        statement
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "s3:ListBucket" in listed(statement["Action"])
    ]
    assert len(listing) == 1
    assert listing[0]["Condition"] == {"StringLike": {"s3:prefix": ["raw/orders/*", "raw/orders/"]}}


def test_the_job_holds_exactly_the_table_actions_it_uses(stack: TidemarkStack, template: Template) -> None:
    """The ledger: hour marks and committed objects (Query), a cleared mark (UpdateItem), the run
    record (PutItem), never GetItem; the aggregates: Query and BatchWriteItem
    (tests/integration/test_iam_spark_job.py runs the job under these)."""
    role = logical_id(stack.pipeline.job_role)
    tables = {
        logical_id(stack.storage.ledger_table): "ledger",
        logical_id(stack.storage.aggregates_table): "aggregates",
    }
    actions: dict[str, set[str]] = {}
    for policy in template.find_resources("AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            for resource in listed(statement["Resource"]):
                table = tables.get(resource.get("Fn::GetAtt", [""])[0]) if isinstance(resource, dict) else None
                if table is not None:
                    actions.setdefault(table, set()).update(listed(statement["Action"]))
    assert actions == {
        "ledger": {"dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:PutItem"},
        "aggregates": {"dynamodb:Query", "dynamodb:BatchWriteItem"},
    }


def test_the_sweeper_is_updated_before_the_archiver_writes_anything_new(
    stack: TidemarkStack, template: Template
) -> None:
    """Readers before writers: every archiver function depends on the sweeper's partition sweep,
    so an upgrade never lets an old sweeper flush segments a new archiver staged."""
    sweep = logical_id(stack.sweeper.functions.sweep_partition)
    archivers = [logical_id(function) for function in stack.archiver.functions.values()]
    assert archivers
    resources = template.to_json()["Resources"]
    for archiver in archivers:
        assert sweep in resources[archiver].get("DependsOn", []), archiver


def test_who_writes_or_reads_archive_objects_may_use_the_archive_key(stack: TidemarkStack, template: Template) -> None:
    """SSE-KMS: S3 asks KMS on the caller's behalf, which no local S3 checks (DESIGN: Testing
    against moto): every writer of archive objects holds GenerateDataKey on the archive key, every
    reader Decrypt (a multipart upload needs Decrypt too)."""
    key = logical_id(stack.storage.encryption_key)
    policies = template.find_resources("AWS::IAM::Policy")
    checked = 0
    for policy in policies.values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        on_objects = {
            action
            for statement in statements
            for action in listed(statement["Action"])
            if action in ("s3:PutObject", "s3:GetObject")
            and any("StorageArchiveBucket" in json.dumps(resource) for resource in listed(statement["Resource"]))
        }
        if not on_objects:
            continue
        on_key = {
            action
            for statement in statements
            if statement["Resource"] == {"Fn::GetAtt": [key, "Arn"]}
            for action in listed(statement["Action"])
        }
        needed = {"kms:Decrypt"} | ({"kms:GenerateDataKey"} if "s3:PutObject" in on_objects else set())
        assert needed <= on_key, policy["Properties"]["Roles"]
        checked += 1
    assert checked == 5  # the archiver, SweepPartition, Reconcile, CompleteHours and the Spark job
