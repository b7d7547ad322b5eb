"""The sweeper: a Step Functions workflow on an EventBridge schedule.

    ListPartitions ──▶ Map (per partition, max_concurrency) SweepPartition ──▶ Reconcile ──▶ CompleteHours

Each step is a Lambda function from ``functions/sweeper`` (one code asset, one handler each) over
the core layer. Every step is idempotent. A partition whose sweep keeps failing (after retries)
is caught, so it never stops the other partitions, the reconciliation or the completeness step;
then the execution fails (``PartitionSweepFailed``), which the sweeper-failure alarm reports. A
failing reconciliation does not stop completeness.

Time: the payload of SweepPartition, Reconcile and CompleteHours carries the execution's start
(``$$.Execution.StartTime``), and each of them stops starting new work at its share of the
interval from it (``tidemark.sweeper.budget``: sweeps 50 %, reconciliation 75 %, completeness
95 %), so a slow partition cannot keep the later steps from running. Work already started is
not interrupted: a flush begun just before its deadline may run to the function's timeout. The
execution's ``TimeoutSeconds`` allows for that (``execution_timeout``) rather than equalling the
interval, so an execution can outlast its interval and overlap the next one (as a delivery of the
schedule twice can, EventBridge being at least once): overlapping steps are two writers on one
partition, fenced by the ledger.

Its functions serve every stream: they mount the staging file system's root access point
(``StagingConstruct.mount``, ``/tidemark`` at ``/mnt/staging``), and reach each stream's ledger
items, each step only the key families it reads and writes (``SWEEPER_KEYS``, a
``dynamodb:LeadingKeys`` condition on each grant): only SweepPartition, which finishes a
partition's flushes as the archiver would, writes a partition's state or commits an object; the
other steps write hour marks and the partition registry only.

SweepPartition renders the objects of idle and resumed flushes, of any stream: when a stream
needs the formats layer (``needs_format_layer``), that function runs on it too. The other steps
list, head and record; they keep the core layer only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.assets import workflow
from stacks.functions import MIN_EPHEMERAL_MB, Placement, TidemarkFunction, spool_mb
from stacks.grants import ArchiveAccess, Keys, grant_ledger
from stacks.layer import needs_format_layer
from stacks.paths import ProjectSources
from tidemark.config import TidemarkConfig
from tidemark.exceptions import ConfigError

#: handler function name in functions/sweeper/handler.py for each step
STEPS = {
    "ListPartitions": "list_partitions",
    "SweepPartition": "sweep_partition",
    "Reconcile": "reconcile",
    "CompleteHours": "complete_hours",
}

#: What each step reads and writes of every stream's ledger items, by key family: (reads, writes).
SWEEPER_KEYS: dict[str, tuple[tuple[Keys, ...], tuple[Keys, ...]]] = {
    # the partitions seen (staging directories), registered
    "ListPartitions": ((Keys.REGISTRY,), (Keys.REGISTRY,)),
    # the writer's seal / commit transitions (a resumed flush checks its commit); a queue's
    # dedupe index rebuilt from the committed objects of its window
    "SweepPartition": ((Keys.PARTITIONS, Keys.OBJECTS), (Keys.PARTITIONS, Keys.OBJECTS, Keys.HOUR_MARKS)),
    # hour marks and committed objects against S3, sealed flushes (in flight) from the states of
    # the partitions it finds (registering new ones, as ListPartitions does); records reconciled hours
    "Reconcile": (
        (Keys.HOUR_MARKS, Keys.OBJECTS, Keys.PARTITIONS, Keys.REGISTRY),
        (Keys.HOUR_MARKS, Keys.REGISTRY),
    ),
    # pending hour marks, the partitions (registering new ones, as ListPartitions does) and their
    # watermarks, the hour's objects for its manifest; records manifests
    "CompleteHours": (
        (Keys.HOUR_MARKS, Keys.OBJECTS, Keys.PARTITIONS, Keys.REGISTRY),
        (Keys.HOUR_MARKS, Keys.REGISTRY),
    ),
}

#: ListPartitions' function timeout; also the slack an execution gets for what runs past the
#: steps' deadlines besides one unit of work (retry waits, each step's fixed reads)
LIST_TIMEOUT = Duration.minutes(1)

#: the execution's start, in the payload of every step with a time budget: its budget's origin
EXECUTION_STARTED = {"execution_started": sfn.JsonPath.string_at("$$.Execution.StartTime")}


def step_timeout(interval_s: int) -> int:
    """SweepPartition's, Reconcile's and CompleteHours' function timeout, in seconds: well within
    one interval (and Lambda's 15 minutes)."""
    return int(min(interval_s - 30, 900))


def execution_timeout(interval_s: int) -> int:
    """The state machine's ``TimeoutSeconds``: above what an execution can take once every step
    respects its deadline. The last deadline is at 95 % of the interval; a unit of work started
    just before it can run to its function's timeout; a retry of a timed-out step starts past its
    deadline and does only its fixed reads; ``LIST_TIMEOUT`` covers those and the retry waits.
    Longer than the interval, so executions can overlap (safe: see the module docstring)."""
    return interval_s + step_timeout(interval_s) + int(LIST_TIMEOUT.to_seconds())


@dataclass(frozen=True)
class SweeperFunctions:
    list_partitions: lambda_.Function
    sweep_partition: lambda_.Function
    reconcile: lambda_.Function
    complete_hours: lambda_.Function

    def __iter__(self) -> Iterator[lambda_.Function]:
        return iter((self.list_partitions, self.sweep_partition, self.reconcile, self.complete_hours))


class SweeperConstruct(Construct):
    """Sweeper functions, state machine and schedule.

    ``code_dir`` is the function code (``functions/sweeper`` of this checkout or of the installed
    package when not given), ``layer`` the core package,
    ``formats_layer`` the formats' libraries (required when a stream needs them);
    ``environment`` carries the settings every Tidemark function gets (bucket, ledger table,
    staging root, config); ``placement`` the VPC and the EFS staging mount.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: TidemarkConfig,
        code_dir: Path | None = None,
        layer: lambda_.ILayerVersion,
        access: ArchiveAccess,
        ledger_table: dynamodb.ITable,
        environment: Mapping[str, str],
        placement: Placement,
        formats_layer: lambda_.ILayerVersion | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        code_dir = code_dir if code_dir is not None else ProjectSources.locate().functions / "sweeper"
        if not (code_dir / "handler.py").is_file():
            raise ConfigError(f"sweeper code directory {code_dir} has no handler.py")
        rendering = [stream.name for stream in config.streams if needs_format_layer(stream)]
        if rendering and formats_layer is None:
            raise ConfigError(f"sweeper: streams {rendering} need the formats layer, and the sweeper was given none")
        interval = config.sweeper.interval
        code = lambda_.Code.from_asset(str(code_dir), exclude=["**/__pycache__"])

        # SweepPartition renders idle and resumed flushes of any stream.
        largest_object = max(int(stream.flush.max_bytes) for stream in config.streams)
        renders = [layer, formats_layer] if rendering and formats_layer is not None else [layer]

        def function(step: str, timeout: Duration) -> lambda_.Function:
            return TidemarkFunction(
                self,
                step,
                handler=f"handler.{STEPS[step]}",
                code=code,
                layers=renders if step == "SweepPartition" else [layer],
                environment={**environment, "POWERTOOLS_SERVICE_NAME": "tidemark-sweeper"},
                placement=placement,
                timeout=timeout,
                memory_mb=1024,
                description=f"sweeper step {step}",
                ephemeral_mb=spool_mb(largest_object) if step == "SweepPartition" else MIN_EPHEMERAL_MB,
            ).function

        # A step must end well within one interval (and Lambda's 15 minutes).
        sweep_timeout = Duration.seconds(step_timeout(int(interval.total_seconds())))
        self.functions = SweeperFunctions(
            list_partitions=function("ListPartitions", LIST_TIMEOUT),
            sweep_partition=function("SweepPartition", sweep_timeout),
            reconcile=function("Reconcile", sweep_timeout),
            complete_hours=function("CompleteHours", sweep_timeout),
        )
        streams = [stream.name for stream in config.streams]
        for step, fn in (
            ("ListPartitions", self.functions.list_partitions),
            ("SweepPartition", self.functions.sweep_partition),
            ("Reconcile", self.functions.reconcile),
            ("CompleteHours", self.functions.complete_hours),
        ):
            reads, writes = SWEEPER_KEYS[step]
            grant_ledger(ledger_table, fn, streams, reads=reads, writes=writes)
        archive = config.archive
        every_stream = [f"{archive.raw_prefix}/{stream.name}" for stream in config.streams]
        dead_letters = [f"{archive.errors_prefix}/{stream.name}" for stream in config.streams]
        # Idle and resumed flushes upload objects and dead letters; never deletes.
        access.put(self.functions.sweep_partition, every_stream + dead_letters)
        # Lists and heads (the checksum is in the object's metadata); never writes or deletes.
        access.read(self.functions.reconcile, every_stream + dead_letters, list_objects=True)
        # Manifests: one key per version of an hour, written with If-None-Match: * (a 412 is taken
        # as done; the bucket policy refuses an unconditional write), so PutObject alone.
        access.put(self.functions.complete_hours, [config.sweeper.manifests_prefix], conditional=False)
        # Shard lineage of Kinesis streams (tidemark.sweeper.lineage): ListShards on those streams only.
        kinesis_arns = [stream.source.stream_arn for stream in config.streams if stream.source.stream_arn]
        if kinesis_arns:
            self.functions.complete_hours.add_to_role_policy(
                iam.PolicyStatement(actions=["kinesis:ListShards"], resources=kinesis_arns)
            )

        self.state_machine = workflow(
            self,
            self._definition(config),
            timeout=Duration.seconds(execution_timeout(int(interval.total_seconds()))),
            comment="Tidemark sweeper: idle flushes, crash recovery, orphan cleanup, reconciliation, hour completeness",
        )
        self.schedule = events.Rule(
            self,
            "Schedule",
            schedule=events.Schedule.rate(Duration.minutes(int(interval.total_seconds() // 60))),
            targets=[targets.SfnStateMachine(self.state_machine)],
            description="Runs the Tidemark sweeper every sweeper.interval",
        )

    def _task(
        self, step: str, fn: lambda_.Function, result_path: str | None, *, payload: sfn.TaskInput | None = None
    ) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self,
            f"{step}Task",
            state_name=step,
            lambda_function=fn,
            payload=payload,  # None: the state's input
            payload_response_only=True,
            result_path=result_path,
            retry_on_service_exceptions=True,
        )
        task.add_retry(errors=["States.TaskFailed"], max_attempts=2, interval=Duration.seconds(2), backoff_rate=2)
        return task

    def _definition(self, config: TidemarkConfig) -> sfn.IChainable:
        fns = self.functions
        # Each iteration ends in ``false`` (swept) or ``true`` (failed after its retries): the
        # other partitions and the later steps run either way, and the execution then fails,
        # so a partition that cannot be swept is an execution failure (and its alarm), never a
        # success with an error buried in its output.
        sweep_each = sfn.Map(
            self,
            "SweepEachPartition",
            state_name="SweepEachPartition",
            items_path="$.partitions",
            # each partition's sweep gets the execution's start, the origin of its time budget
            item_selector={
                "stream": sfn.JsonPath.string_at("$$.Map.Item.Value.stream"),
                "partition": sfn.JsonPath.string_at("$$.Map.Item.Value.partition"),
                **EXECUTION_STARTED,
            },
            max_concurrency=config.sweeper.max_concurrency,
            result_path="$.sweep_failed",
        )
        sweep = self._task("SweepPartition", fns.sweep_partition, sfn.JsonPath.DISCARD)
        sweep.add_catch(
            sfn.Pass(self, "SweepFailed", state_name="SweepFailed", result=sfn.Result.from_boolean(True)),
            result_path="$.error",
        )
        sweep_each.item_processor(
            sweep.next(sfn.Pass(self, "Swept", state_name="Swept", result=sfn.Result.from_boolean(False)))
        )
        # their payload: the execution's start only (not the state, with every partition in it)
        started = sfn.TaskInput.from_object(EXECUTION_STARTED)
        complete = self._task("CompleteHours", fns.complete_hours, "$.completeness", payload=started)
        reconcile = self._task("Reconcile", fns.reconcile, "$.reconcile", payload=started)
        reconcile.add_catch(complete, result_path="$.reconcile_error")
        verdict = (
            sfn.Choice(self, "AnySweepFailed", state_name="AnySweepFailed")
            .when(
                sfn.Condition.boolean_equals("$.sweeps_failed.any", True),
                sfn.Fail(
                    self,
                    "PartitionSweepFailed",
                    state_name="PartitionSweepFailed",
                    error="PartitionSweepFailed",
                    cause="a partition's sweep failed after its retries (the sweep_partition function's logs name it)",
                ),
            )
            .otherwise(sfn.Succeed(self, "SweptEveryPartition", state_name="SweptEveryPartition"))
        )
        tally = sfn.Pass(
            self,
            "TallySweeps",
            state_name="TallySweeps",
            parameters={"any.$": "States.ArrayContains($.sweep_failed, true)"},
            result_path="$.sweeps_failed",
        )
        return (
            self._task("ListPartitions", fns.list_partitions, None)
            .next(sweep_each)
            .next(reconcile)
            .next(complete)
            .next(tally)
            .next(verdict)
        )
