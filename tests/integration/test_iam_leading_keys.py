"""Each stream's ledger items belong to its functions: ``dynamodb:LeadingKeys``, evaluated.

Every ledger and aggregates grant of the template carries a ``ForAllValues:StringLike`` condition
on ``dynamodb:LeadingKeys`` (``stacks.grants``). moto ignores it (it compares ``StringEquals``
only), so the roles' clients evaluate it before a call is sent (``tests.support.iam``,
:class:`LeadingKeysEvaluator`: a stand-in for AWS's evaluation, not AWS) and refuse what AWS would
refuse with its ``AccessDeniedException``; moto still checks the actions and the table.

A deployment of two streams, ``orders`` (with aggregations) and ``payments`` (without), on a moto
server of this module's own with IAM enforced: each archiver archives its stream; the sweeper's
steps list, flush, reconcile (with a stranger object, so it reads the partitions' states) and
complete hours; each archiver and SweepPartition resume a flush whose object item exists although
the state was restored behind the ledger's back (the ``_commit_recorded`` path: a read of the
committed object); the job's driver-side ledger and sink calls (``run_aggregation`` itself runs
in ``test_iam_spark_job.py``); the operator's reads. Every request is allowed and names its own
stream's keys. Then requests planted on each role -- another stream's items, the job raising a
partition's staged offset or forging a committed object, a sweeper step writing a state -- are
refused, and the same requests under the statements without their conditions are allowed: the
refusal is the condition's doing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ClientError

from jobs.aggregation.sink import AggregateSink, aggregates_table_schema
from tests.support.cdk import logical_id, synth_stack
from tests.support.harness import EsmModel, small_config_data
from tests.support.iam import (
    ACCOUNT,
    PARTITION,
    REGION,
    IamArchive,
    IamServer,
    RoleSession,
    Step,
    TemplateGrants,
    unused_leading_keys,
)
from tests.support.workload import make_orders
from tidemark.config import TidemarkConfig, parse_config
from tidemark.faults import AFTER_COMMIT, AFTER_UPLOAD, CrashAt, SimulatedCrash
from tidemark.ledger.dynamodb import DynamoDBLedger
from tidemark.sweeper.completeness import CompletenessTracker
from tidemark.sweeper.discovery import discover_all
from tidemark.sweeper.reconcile import UNKNOWN, Reconciler
from tidemark.sweeper.sweep import sweep_partition

pytestmark = pytest.mark.xdist_group("iam")

HOUR_MS = 3_600_000
STREAMS = ("orders", "payments")
SWEEPER_STEPS = ("list_partitions", "sweep_partition", "reconcile", "complete_hours")


def two_streams() -> TidemarkConfig:
    """``orders`` (the example's, with its aggregations) and ``payments`` (its copy, on its own
    topic, without aggregations: the job serves ``orders`` only)."""
    data = small_config_data(max_records=50)
    payments = json.loads(json.dumps(data["streams"][0]))
    payments.update(name="payments", aggregations=[])
    payments["source"]["topic"] = "payments"
    data["streams"].append(payments)
    return parse_config(data)


@dataclass
class Deployment:
    config: TidemarkConfig
    template: dict[str, Any]
    bucket: str
    table: str
    aggregates: str
    roles: dict[str, str]  # name -> the role's logical id
    operator_policy: str

    def grants(self, archive: IamArchive, aggregates_table: str) -> TemplateGrants:
        arn = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{aggregates_table}"
        return TemplateGrants(
            self.template, archive.physical(self.bucket, self.table, {self.aggregates: (aggregates_table, arn)})
        )


@pytest.fixture(scope="module")
def deployment() -> Deployment:
    config = two_streams()
    stack, template = synth_stack(config, nag=False)
    sweeper = stack.sweeper.functions
    roles = {
        **{f"archiver-{name}": stack.archiver.functions[name].role for name in STREAMS},
        "list_partitions": sweeper.list_partitions.role,
        "sweep_partition": sweeper.sweep_partition.role,
        "reconcile": sweeper.reconcile.role,
        "complete_hours": sweeper.complete_hours.role,
        "job": stack.pipeline.job_role,
    }
    return Deployment(
        config,
        template.to_json(),
        logical_id(stack.storage.bucket),
        logical_id(stack.storage.ledger_table),
        logical_id(stack.storage.aggregates_table),
        {name: logical_id(role) for name, role in roles.items() if role is not None},
        logical_id(stack.operators.policy),
    )


@dataclass
class Scenario:
    deployment: Deployment
    archive: IamArchive
    aggregates_table: str
    statements: dict[str, list[dict[str, Any]]]
    steps: dict[str, Step] = field(default_factory=dict)

    def run(self, name: str, action: Callable[[], Any]) -> Step:
        step = self.steps[name] = Step.run(action)
        return step

    def role(self, name: str) -> RoleSession:
        return self.archive.roles[name]


def state_item(archive: IamArchive, stream: str, partition: int) -> dict[str, Any]:
    item = archive.dynamodb.get_item(
        TableName=archive.table, Key={"pk": {"S": f"PART#{stream}#{partition}"}, "sk": {"S": "STATE"}}
    )["Item"]
    return dict(item)


@pytest.fixture(scope="module")
def scenario(iam_server: IamServer, deployment: Deployment, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    archive = IamArchive.create(iam_server, tmp_path_factory.mktemp("leading-keys"))
    aggregates_table = f"{archive.table}-aggregates"
    archive.dynamodb.create_table(**aggregates_table_schema(aggregates_table))
    grants = deployment.grants(archive, aggregates_table)
    statements = {name: grants.statements(role) for name, role in deployment.roles.items()}
    policy = deployment.template["Resources"][deployment.operator_policy]["Properties"]["PolicyDocument"]
    statements["operator"] = list(grants.resolve(policy["Statement"]))
    for name, held in statements.items():
        archive.assume(name, held)
    config = deployment.config
    run = Scenario(deployment, archive, aggregates_table, statements)
    workloads = {
        stream: make_orders(
            partitions=2, per_partition=90, hours=1, late_share=0.0, bad_share=0.0, seed=31 + i, topic=stream
        )
        for i, stream in enumerate(STREAMS)
    }
    esms = {
        stream: EsmModel(workloads[stream], archive.runtimes(config, role=f"archiver-{stream}")) for stream in STREAMS
    }

    def restored_behind_the_ledgers_back(partition: int, role: str, resume: Callable[..., object]) -> None:
        """A flush whose object landed (a crash after the upload), its state saved, the flush
        resumed and committed (and a crash before its segments were deleted), then the saved
        state put back: resuming it again finds the object item already there and reads it
        (``PartitionWriter._commit_recorded``), under ``role``."""
        esm = esms["orders"]
        assert not esm.deliver(esm.batch(partition, 90), CrashAt(AFTER_UPLOAD))
        saved = state_item(archive, "orders", partition)
        resume(CrashAt(AFTER_COMMIT))
        archive.dynamodb.put_item(TableName=archive.table, Item=saved)
        before = len(run.role(role).requests)
        resume(None)
        read = [r for r in run.role(role).requests[before:] if r.action == "dynamodb:GetItem"]
        assert any(key.startswith("HOUR#orders#") for r in read for key in r.leading_keys), read

    def archiver_meets_its_recorded_commit() -> None:
        esm = esms["orders"]  # the same records again: the mapping's redelivery resumes the flush
        restored_behind_the_ledgers_back(
            0, "archiver-orders", lambda crash: esm.deliver(esm.workload.records[0][:90], crash)
        )

    def sweeper_meets_its_recorded_commit() -> None:
        def sweep(crash: CrashAt | None) -> object:
            try:
                return sweep_partition(archive.runtime(config, crash, role="sweep_partition"), "orders", 1)
            except SimulatedCrash:
                return None

        restored_behind_the_ledgers_back(1, "sweep_partition", sweep)

    run.run("archiver_recorded_commit", archiver_meets_its_recorded_commit)
    run.run("sweeper_recorded_commit", sweeper_meets_its_recorded_commit)

    def archivers() -> None:
        for esm in esms.values():
            esm.drain(30)

    run.run("archivers", archivers)
    run.run("list_partitions", lambda: discover_all(archive.runtime(config, role="list_partitions")))

    def idle_flushes() -> list[Any]:
        archive.clock.advance(minutes=16)
        sweeper = archive.runtime(config, role="sweep_partition")
        return [sweep_partition(sweeper, stream, partition) for stream in STREAMS for partition in (0, 1)]

    run.run("sweep_partition", idle_flushes)

    def reconcile_a_stranger() -> tuple[str, Any]:
        admin = DynamoDBLedger(archive.table, client=archive.dynamodb)
        hour = admin.hour_marks("orders")[0].hour
        key = admin.committed_objects("orders", hour)[0].key.rsplit("/", 1)[0] + "/stranger.jsonl.zst"
        archive.s3.put_object(Bucket=archive.bucket, Key=key, Body=b"not ours")
        return key, Reconciler(archive.runtime(config, role="reconcile")).run(archive.clock.now_ms())

    run.run("reconcile", reconcile_a_stranger)

    def complete() -> Any:
        archive.clock.advance(ms=4 * HOUR_MS)
        return CompletenessTracker(archive.runtime(config, role="complete_hours")).run(archive.clock.now_ms())

    run.run("complete_hours", complete)

    def job_driver() -> int:
        """What ``run_aggregation`` asks of the ledger and the sink, with the job role's clients."""
        job = run.role("job")
        ledger = DynamoDBLedger(archive.table, client=job.client("dynamodb"))
        marks = ledger.hour_marks("orders")
        objects = [item for mark in marks for item in ledger.committed_objects("orders", mark.hour)]
        ledger.mark_dirty(marks[0])
        for mark in ledger.hour_marks("orders"):
            ledger.record_aggregated(mark)
        ledger.record_run("orders", "run-1", archive.clock.now_ms(), {"hours": [mark.hour for mark in marks]})
        resource: Any = job.session.resource("dynamodb", endpoint_url=job.endpoint)
        sink = AggregateSink(aggregates_table, resource=resource)
        sink.replace_hour("orders", "orders_by_product", marks[0].hour, [({"product_id": "p-1"}, {"n": 1})], "run-1")
        return len(objects)

    run.run("job", job_driver)

    def operator_reads() -> None:
        ledger = DynamoDBLedger(archive.table, client=run.role("operator").client("dynamodb"))
        for stream in STREAMS:
            for partition in ledger.partitions(stream):
                ledger.load(stream, partition)
                ledger.epochs(stream, partition)
                ledger.recovery(stream, partition)
            for mark in ledger.hour_marks(stream):
                ledger.committed_objects(stream, mark.hour)

    run.run("operator", operator_reads)
    return run


@pytest.mark.parametrize(
    "step",
    [
        "archiver_recorded_commit",
        "sweeper_recorded_commit",
        "archivers",
        "list_partitions",
        "sweep_partition",
        "reconcile",
        "complete_hours",
        "job",
        "operator",
    ],
)
def test_each_roles_code_paths_run_within_its_leading_keys(scenario: Scenario, step: str) -> None:
    scenario.steps[step].ok()


def test_reconcile_read_the_states_for_its_stranger(scenario: Scenario) -> None:
    key, report = scenario.steps["reconcile"].ok()
    assert (UNKNOWN, key) in [(finding.kind, finding.key) for finding in report.findings]


def test_every_request_was_allowed_and_named_only_the_roles_streams(scenario: Scenario) -> None:
    served = {
        **{f"archiver-{stream}": {stream} for stream in STREAMS},
        **{step: set(STREAMS) for step in SWEEPER_STEPS},
        "job": {"orders"},
        "operator": set(STREAMS),
    }
    for name, streams in served.items():
        role = scenario.role(name)
        assert role.requests and role.denied == [], (name, role.denied)
        named = {key.split("#")[1] for request in role.requests for key in request.leading_keys}
        assert named == streams, (name, named)


#: patterns a role of this scenario holds and never used, and why
UNUSED: dict[str, set[tuple[str, str]]] = {
    # registering a partition first seen by Reconcile or CompleteHours (ListPartitions registered
    # them all here, as it does every interval before those steps run)
    # (and only orders' folders held a stranger, whose in-flight check reads the states)
    "reconcile": {("write", "STREAM#orders"), ("write", "STREAM#payments"), ("read", "PART#payments#*")},
    "complete_hours": {("write", "STREAM#orders"), ("write", "STREAM#payments")},
    # a queue's dedupe index rebuilt from the committed objects (test_iam_production.py's queue test)
    # needs the sweeper's reads of payments' objects as it does of orders'
    "sweep_partition": {("read", "HOUR#payments#*")},
    # only orders' flush was restored behind the ledger's back
    "archiver-payments": {("read", "HOUR#payments#*")},
}


def test_every_pattern_a_role_holds_is_used_or_explained(scenario: Scenario) -> None:
    unused = {}
    for name in [*(f"archiver-{stream}" for stream in STREAMS), *SWEEPER_STEPS, "job"]:
        role = scenario.role(name)
        unused[name] = {
            ("read" if set(actions) <= {"dynamodb:GetItem", "dynamodb:Query"} else "write", pattern)
            for actions, pattern in unused_leading_keys(role.statements, role.requests)
        }
    assert unused == {name: UNUSED.get(name, set()) for name in unused}


# --- planted requests ---------------------------------------------------------------------------

STATE_KEY = {"pk": {"S": "PART#orders#0"}, "sk": {"S": "STATE"}}


def raise_staged_offset(client: Any, table: str, key: dict[str, Any] = STATE_KEY) -> object:
    """What would make the archiver drop the partition's next records as duplicates."""
    return client.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET staged_offset = :far",
        ConditionExpression="attribute_not_exists(pk)",  # never applied even if allowed: the item exists
        ExpressionAttributeValues={":far": {"N": "999999999"}},
    )


def planted(scenario: Scenario) -> dict[str, tuple[str, Callable[[Any], object]]]:
    """(role, request) pairs AWS refuses by the role's LeadingKeys and moto alone would allow."""
    table, aggregates = scenario.archive.table, scenario.aggregates_table
    payments_state = {"pk": {"S": "PART#payments#0"}, "sk": {"S": "STATE"}}
    forged = {
        "pk": {"S": "HOUR#orders#2026-11-21T08"},
        "sk": {"S": "OBJ#raw#00000#00000000000000999999"},
        "key": {"S": "raw/orders/forged"},
    }
    return {
        "an archiver reads another stream's state": (
            "archiver-orders",
            lambda c: c.get_item(TableName=table, Key=payments_state),
        ),
        "an archiver raises another stream's staged offset": (
            "archiver-orders",
            lambda c: raise_staged_offset(c, table, payments_state),
        ),
        "an archiver queries another stream's hour marks": (
            "archiver-orders",
            lambda c: c.query(
                TableName=table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": "HOURS#payments"}},
            ),
        ),
        "an archiver's transaction with one item of another stream": (
            "archiver-orders",
            lambda c: c.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": table,
                            "Item": {"pk": {"S": "PART#orders#7"}, "sk": {"S": "PLANTED"}},
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {
                        "Update": {
                            "TableName": table,
                            "Key": {"pk": {"S": "HOURS#payments"}, "sk": {"S": "2026-11-21T08"}},
                            "UpdateExpression": "ADD commits :one",
                            "ExpressionAttributeValues": {":one": {"N": "1"}},
                        }
                    },
                ]
            ),
        ),
        "an archiver writes the partition registry": (
            "archiver-orders",
            lambda c: c.put_item(TableName=table, Item={"pk": {"S": "STREAM#orders"}, "sk": {"S": "PLANTED"}}),
        ),
        "the job raises a partition's staged offset": ("job", lambda c: raise_staged_offset(c, table)),
        "the job forges a committed object": (
            "job",
            lambda c: c.put_item(TableName=table, Item=forged, ConditionExpression="attribute_not_exists(pk)"),
        ),
        "the job records a run of a stream it does not aggregate": (
            "job",
            lambda c: c.put_item(TableName=table, Item={"pk": {"S": "RUNS#payments"}, "sk": {"S": "run-x"}}),
        ),
        "the job writes another stream's aggregates": (
            "job",
            lambda c: c.batch_write_item(
                RequestItems={
                    aggregates: [
                        {"PutRequest": {"Item": {"pk": {"S": "AGG#orders#a#h"}, "sk": {"S": "{}"}}}},
                        {"PutRequest": {"Item": {"pk": {"S": "AGG#payments#a#h"}, "sk": {"S": "{}"}}}},
                    ]
                }
            ),
        ),
        "reconcile writes a partition's state": ("reconcile", lambda c: raise_staged_offset(c, table)),
        "complete_hours writes a partition's state": ("complete_hours", lambda c: raise_staged_offset(c, table)),
        "list_partitions reads a partition's state": (
            "list_partitions",
            lambda c: c.get_item(TableName=table, Key=STATE_KEY),
        ),
        "an operator writes the partition registry": (
            "operator",
            lambda c: c.put_item(TableName=table, Item={"pk": {"S": "STREAM#orders"}, "sk": {"S": "PLANTED"}}),
        ),
        "an operator reads a stream the policy does not serve": (
            "operator",
            lambda c: c.get_item(TableName=table, Key={"pk": {"S": "PART#refunds#0"}, "sk": {"S": "STATE"}}),
        ),
    }


PLANTED = [
    "an archiver reads another stream's state",
    "an archiver raises another stream's staged offset",
    "an archiver queries another stream's hour marks",
    "an archiver's transaction with one item of another stream",
    "an archiver writes the partition registry",
    "the job raises a partition's staged offset",
    "the job forges a committed object",
    "the job records a run of a stream it does not aggregate",
    "the job writes another stream's aggregates",
    "reconcile writes a partition's state",
    "complete_hours writes a partition's state",
    "list_partitions reads a partition's state",
    "an operator writes the partition registry",
    "an operator reads a stream the policy does not serve",
]


def unconditioned(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in s.items() if key != "Condition"} for s in statements]


@pytest.mark.parametrize("what", PLANTED)
def test_a_planted_request_is_refused_by_its_leading_keys(scenario: Scenario, what: str) -> None:
    name, request = planted(scenario)[what]
    role = scenario.role(name)
    before = len(role.denied)
    with pytest.raises(ClientError) as denied:
        request(role.client("dynamodb"))
    assert denied.value.response["Error"]["Code"] == "AccessDeniedException"
    assert "its dynamodb:LeadingKeys condition does not hold" in denied.value.response["Error"]["Message"]
    assert len(role.denied) > before
    # The same request under the same statements without their conditions reaches the server:
    # moto authorizes it (or refuses it for the item's own reasons), so the refusal above is the
    # LeadingKeys condition's doing, not a missing action.
    free = scenario.archive.server.assume(f"{name}-unconditioned", unconditioned(role.statements))
    try:
        request(free.client("dynamodb"))
    except ClientError as error:
        assert error.response["Error"]["Code"] in ("ConditionalCheckFailedException", "TransactionCanceledException")
    assert free.denied == []


def test_no_role_can_scan(scenario: Scenario) -> None:
    """A Scan names no item: a ``ForAllValues`` condition would be true of it, so no grant holds
    the action at all (stacks.grants.KEYLESS_ACTIONS; tests/unit/test_stack_leading_keys.py)."""
    for name in scenario.statements:
        with pytest.raises(ClientError) as denied:
            scenario.role(name).client("dynamodb").scan(TableName=scenario.archive.table, Limit=1)
        assert denied.value.response["Error"]["Code"] == "AccessDeniedException", name
        assert "no statement allows" in denied.value.response["Error"]["Message"], name
