"""The operator commands' real code paths under the operator policy the synthesized template grants.

The stack's ``OperatorAccess`` managed policy (``OperatorPolicyArn``) is taken from the template,
resolved to this test's bucket, ledger and key (``tests.support.iam``), and held -- exactly its
statements -- by an ``operator`` role on a moto server of this module's own with IAM enforced.
The archiver's role archives two partitions of a topic on the session's broker; one partition's
main raw flush and its dead-letter flush are quarantined (damaged segments), and the other's
mapping never delivered a few records (``WITHHELD``). Then the operator, through the CLI itself
(``tidemark.cli.app``, every boto3 client it makes holding the operator's credentials) with
``--stack-name`` as the README shows it, runs ``status``, ``rearchive`` (after a rearchive that
died after its upload: the rerun meets its own object, 412, and reads it), ``recover`` (after a
recovery that died after its first upload: the same), ``audit``, ``replay`` into a new topic,
``epoch start`` and ``epoch list``.

A grant a command needs and the policy lacks fails its step with AccessDenied, as in AWS; a grant
no command used fails ``test_every_operator_grant_is_used_or_has_a_reason`` unless
``ALLOWED_UNUSED`` gives a reason. Kafka is reached with the operator's own client settings, not
IAM: nothing here grants it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from typer.testing import CliRunner, Result

from tests.support.cdk import logical_id, synth_stack
from tests.support.events import msk_event
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
    Use,
    allowed_reason,
    covers,
    granted,
    unused_grants,
    unused_leading_keys,
)
from tests.support.kafka import new_topic, produce_records
from tests.support.workload import Workload, make_orders
from tidemark.archiver import Archiver
from tidemark.cli.app import app
from tidemark.config import TidemarkConfig, parse_config
from tidemark.faults import AFTER_UPLOAD, CrashAt, SimulatedCrash
from tidemark.kafka_log import KafkaLog
from tidemark.ledger.model import QuarantinedFlush
from tidemark.rearchive import Rearchiver
from tidemark.recover import Recoverer

pytestmark = pytest.mark.xdist_group("iam")

STACK = "Tidemark"  # synth_stack's stack: the policy's DescribeStacks names it
STREAM = "orders"
#: partition 1's records the event source mapping never delivered (``recover`` archives them)
WITHHELD = {5, 6, 40}


@dataclass
class Deployment:
    """The synthesized stack's template and the logical ids the test resolves."""

    config: TidemarkConfig
    config_file: Path
    template: dict[str, Any]
    bucket: str
    table: str
    key: str
    policy: str
    archiver_role: str

    def grants(self, archive: IamArchive) -> TemplateGrants:
        key_arn = f"arn:{PARTITION}:kms:{REGION}:{ACCOUNT}:key/{archive.bucket}"
        return TemplateGrants(self.template, archive.physical(self.bucket, self.table, {self.key: (key_arn, key_arn)}))

    def operator_statements(self, archive: IamArchive) -> list[dict[str, Any]]:
        """The managed policy's statements, as the template writes them, resolved."""
        resource = self.template["Resources"][self.policy]
        assert resource["Type"] == "AWS::IAM::ManagedPolicy"
        return list(self.grants(archive).resolve(resource["Properties"]["PolicyDocument"]["Statement"]))


@dataclass
class Operations:
    deployment: Deployment
    archive: IamArchive
    workload: Workload
    topic: str
    quarantined: list[QuarantinedFlush]
    steps: dict[str, Step] = field(default_factory=dict)
    #: the operator's recorded authorizations once each step had run
    used_by: dict[str, set[Use]] = field(default_factory=dict)

    @property
    def operator(self) -> RoleSession:
        return self.archive.roles["operator"]

    def uses(self) -> set[Use]:
        """The operator's recorded authorizations."""
        return set(self.operator.uses)

    def run(self, name: str, action: Callable[[], Any]) -> Step:
        step = self.steps[name] = Step.run(action)
        self.used_by[name] = set(self.operator.uses)
        return step

    def tidemark(self, *args: object, role: str = "operator", code: int = 0) -> Result:
        """``tidemark <args>`` in this process, every boto3 client it makes holding ``role``'s
        credentials (on this module's server, recording what it does). A result other than exit
        ``code`` raises, naming what the command printed and raised (AccessDenied, ...)."""
        session = self.archive.roles[role]

        def client(service: str, *_: Any, **__: Any) -> Any:
            return session.client(service)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(boto3, "client", client)
            result = CliRunner().invoke(app, [str(arg) for arg in args])
        if result.exit_code != code:
            raise AssertionError(
                f"tidemark {' '.join(map(str, args[:2]))}: exit {result.exit_code}, wanted {code}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}\nraised: {result.exception!r}"
            )
        return result


def deploy(config_data: dict[str, Any], root: Path) -> Deployment:
    config = parse_config(config_data)
    config_file = root / "tidemark.yaml"
    config_file.write_text(yaml.safe_dump(config_data))
    stack, template = synth_stack(config, nag=False)
    role = stack.archiver.functions[STREAM].role
    assert role is not None
    return Deployment(
        config,
        config_file,
        template.to_json(),
        logical_id(stack.storage.bucket),
        logical_id(stack.storage.ledger_table),
        logical_id(stack.storage.encryption_key),
        logical_id(stack.operators.policy),
        logical_id(role),
    )


def damage(archive: IamArchive, partition: int, segment: str) -> None:
    """Storage damage: flip a byte of a staged segment (its flush must quarantine)."""
    path = archive.staging_root / STREAM / f"p{partition}" / segment
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def operations(iam_server: IamServer, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Operations:
    root = tmp_path_factory.mktemp("operators")
    topic = new_topic(kafka_bootstrap, 2, prefix="operators")
    deployment = deploy(small_config_data(max_records=10_000, topic=topic), root)
    config = deployment.config
    archive = IamArchive.create(iam_server, root)
    grants = deployment.grants(archive)
    archive.assume("archiver", grants.statements(deployment.archiver_role))
    archive.assume("operator", deployment.operator_statements(archive))
    outputs = {"ArchiveBucketName": {"Value": archive.bucket}, "LedgerTableName": {"Value": archive.table}}
    archive.server.admin_client("cloudformation").create_stack(
        StackName=STACK,
        TemplateBody=json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}, "Outputs": outputs}),
    )

    # The archiver archives both partitions (the records are in Kafka too: rearchive and recover
    # read them again). Partition 0's main raw flush and its dead letters' flush are quarantined;
    # partition 1's mapping moved past the records at WITHHELD without delivering them.
    workload = make_orders(partitions=2, per_partition=60, hours=1, bad_share=0.1, seed=27, topic=topic)
    for partition in (0, 1):
        produced = produce_records(kafka_bootstrap, workload.records[partition])
        assert produced == [record.offset for record in workload.records[partition]]
    esm = EsmModel(workload, archive.runtimes(config))
    for start in (0, 30):  # two accepts per partition: buffers of two segments
        assert esm.deliver([r for r in workload.records[1][start : start + 30] if r.offset not in WITHHELD])
    esm.drain(30)
    runtime = archive.runtime(config)
    buffers = runtime.ledger.load(STREAM, 0).buffers.values()
    main = max((buffer for buffer in buffers if buffer.key.kind == "raw"), key=lambda buffer: buffer.records)
    (errors,) = [buffer for buffer in buffers if buffer.key.kind == "errors"]
    for buffer in (main, errors):
        damage(archive, 0, buffer.segments[0].name)
    archive.clock.advance(minutes=31)
    for partition in (0, 1):
        runtime.writer(config.streams[0], partition).maintain()
    quarantined = sorted(runtime.ledger.load(STREAM, 0).quarantined.values(), key=lambda held: held.flush.buffer.first)
    assert len(quarantined) == 2

    run = Operations(deployment, archive, workload, topic, quarantined)
    where = ("--config", deployment.config_file, "--stack-name", STACK)
    run.run(
        "status",
        lambda: json.loads(
            run.tidemark(
                "status", "--stream", STREAM, *where, "--bootstrap-servers", kafka_bootstrap, "--json", code=1
            ).stdout
        ),
    )

    def rearchive_dies_after_its_upload() -> bool:
        with KafkaLog(kafka_bootstrap, topic) as log:
            operator = archive.runtime(config, CrashAt(AFTER_UPLOAD), role="operator")
            try:
                Rearchiver(operator.writer(config.streams[0], 0), operator.ledger, log).run(0, 59)
            except SimulatedCrash:
                return True
        return False

    span = ("--from-offset", 0, "--to-offset", 59, "--bootstrap-servers", kafka_bootstrap)
    # Abandon reads the records as a rearchive would, and refuses: Kafka still holds them. (Its
    # write -- the state and a record item in one transaction -- is epoch start's, granted below.)
    run.run(
        "abandon",
        lambda: run.tidemark("abandon", "--stream", STREAM, "-p", 0, *span, "--reason", "test", *where, code=2),
    )
    run.run("rearchive_crashed", rearchive_dies_after_its_upload)
    run.run(
        "rearchive",
        lambda: json.loads(run.tidemark("rearchive", "--stream", STREAM, "-p", 0, *span, *where, "--json").stdout),
    )

    def recover_dies_after_its_first_upload() -> bool:
        with KafkaLog(kafka_bootstrap, topic) as log:
            operator = archive.runtime(config, CrashAt(AFTER_UPLOAD), role="operator")
            writer = operator.writer(config.streams[0], 1)
            s3 = run.operator.client("s3")
            try:
                Recoverer(writer, operator.ledger, s3, archive.bucket, log, clock=archive.clock).run()
            except SimulatedCrash:
                return True
        return False

    run.run("recover_crashed", recover_dies_after_its_first_upload)
    run.run(
        "recover",
        lambda: json.loads(
            run.tidemark("recover", "--stream", STREAM, *where, "--bootstrap-servers", kafka_bootstrap, "--json").stdout
        ),
    )
    run.run(
        "audit",
        lambda: json.loads(
            run.tidemark("audit", "--stream", STREAM, *where, "--bootstrap-servers", kafka_bootstrap, "--json").stdout
        ),
    )

    def replay() -> tuple[str, dict[str, Any]]:
        # the test's own read (the admin's): the archiver's role may not query hour marks
        marks = archive.runtime(config, role=None).ledger.hour_marks(STREAM)
        target = new_topic(kafka_bootstrap, 2, prefix="replayed")
        hours = ("--from", marks[0].hour, "--to", marks[-1].hour)
        args = ("--stream", STREAM, *hours, "--topic", target, "--bootstrap-servers", kafka_bootstrap)
        return target, json.loads(run.tidemark("replay", *args, *where, "--json").stdout)

    run.run("replay", replay)

    def epoch_start() -> tuple[dict[str, Any], Any, int]:
        # Partition 1's next records open buffers; the new epoch seals them under the old one.
        more = make_orders(
            partitions=2, per_partition=10, hours=1, bad_share=0.0, seed=28, topic=topic, start_offset=60
        )
        Archiver(archive.runtime(config)).handle(msk_event(more.records[1]))
        opened = len(archive.runtime(config).ledger.load(STREAM, 1).buffers)
        ledger = ("--ledger-table", archive.table, "--config", deployment.config_file)
        started = run.tidemark(
            "epoch", "start", "--stream", STREAM, "-p", 1, "--from-offset", 0, "--reason", "test", *ledger, "--json"
        )
        listed = run.tidemark("epoch", "list", "--stream", STREAM, "-p", 1, *ledger, "--json")
        return json.loads(started.stdout), json.loads(listed.stdout), opened

    run.run("epoch", epoch_start)
    return run


def test_status_names_the_quarantined_flushes_under_the_operator_policy(operations: Operations) -> None:
    (stream,) = operations.steps["status"].ok()
    rows = {row["partition"]: row for row in stream["partitions"]}
    assert sorted(rows) == [0, 1] and stream["stale_partitions"] == [0]
    held = [(row["first"], row["last"]) for row in rows[0]["buffers"] if row["state"] == "quarantined"]
    assert sorted(held) == sorted((item.flush.buffer.first, item.flush.buffer.last) for item in operations.quarantined)
    assert rows[1]["end_offset"] == 60  # the topic's, read with the operator's own Kafka client


def test_abandon_refuses_a_flush_kafka_still_holds_under_the_operator_policy(operations: Operations) -> None:
    result = operations.steps["abandon"].ok()
    assert "rearchive" in result.stderr and result.stderr.count("\n") == 1
    assert len(operations.archive.runtime(operations.deployment.config).ledger.abandoned(STREAM, 0)) == 0


def test_rearchive_uploads_commits_and_finds_its_own_upload_under_the_operator_policy(
    operations: Operations,
) -> None:
    """Both flushes, raw and dead letters; the first one's object was uploaded by the run that
    died, so the rerun's conditional upload met it (412) and read it (s3:GetObject)."""
    assert operations.steps["rearchive_crashed"].ok() is True  # died after its first upload
    report = operations.steps["rearchive"].ok()
    flushes = [(flush["flush_id"], flush["key"]) for flush in report["flushes"]]
    assert flushes == [(item.flush.flush_id, item.flush.object_key) for item in operations.quarantined]
    assert report["records"] == sum(item.flush.buffer.records for item in operations.quarantined)
    keys = [key for _, key in flushes]
    assert {key.split("/", 1)[0] for key in keys} == {"raw", "errors"}
    bucket = f"arn:aws:s3:::{operations.archive.bucket}"
    # before the audit and the replay read every object: the rearchive's own uses
    on_first = {use.action for use in operations.used_by["rearchive"] if use.resource == f"{bucket}/{keys[0]}"}
    assert on_first == {"s3:PutObject", "s3:GetObject"}
    assert operations.archive.runtime(operations.deployment.config).ledger.load(STREAM, 0).quarantined == {}


def test_recover_claims_uploads_and_commits_under_the_operator_policy(operations: Operations) -> None:
    """Partition 1's withheld records; the unit was claimed by the run that died after its first
    upload, so the CLI finished it: its conditional upload met that object (412) and read it."""
    assert operations.steps["recover_crashed"].ok() is True
    report = operations.steps["recover"].ok()
    rows = {row["partition"]: row for row in report["partitions"]}
    assert sorted(rows) == [0, 1] and report["records"] == len(WITHHELD) and report["not_retained"] is False
    assert (rows[0]["records"], rows[0]["units"], rows[0]["unchecked"]) == (0, [], "")
    [unit] = rows[1]["units"]
    assert (unit["first"], unit["last"], unit["records"], unit["by_another_run"]) == (5, 40, len(WITHHELD), False)
    bucket = f"arn:aws:s3:::{operations.archive.bucket}"
    # before the audit and the replay read every object: the recoveries' own uses
    on_first = {use.action for use in operations.used_by["recover"] if use.resource == f"{bucket}/{unit['keys'][0]}"}
    assert on_first == {"s3:PutObject", "s3:GetObject"}
    table = {use.action for use in operations.used_by["recover"] if use.resource.endswith(operations.archive.table)}
    assert {"dynamodb:PutItem", "dynamodb:UpdateItem"} <= table  # the claim, the finishing transaction
    assert operations.archive.runtime(operations.deployment.config).ledger.recovery(STREAM, 1).pending is None


def test_audit_finds_the_archive_whole_under_the_operator_policy(operations: Operations) -> None:
    report = operations.steps["audit"].ok()
    assert report["clean"] is True and report["findings"] == []
    assert report["records"] == len(operations.workload.expected)
    assert report["gaps_against_source"] is True


def test_replay_produces_every_record_once_under_the_operator_policy(operations: Operations) -> None:
    target, report = operations.steps["replay"].ok()
    assert (report["topic"], report["produced"], report["skipped"]) == (target, len(operations.workload.expected), 0)
    assert sum(part["dead_letters"] for part in report["partitions"]) > 0  # errors/ objects read too


def test_epoch_start_seals_and_moves_the_partition_under_the_operator_policy(operations: Operations) -> None:
    [started], [listed], opened = operations.steps["epoch"].ok()
    assert (started["partition"], started["epoch"], started["previous_staged_offset"]) == (1, 1, 69)
    assert [(start["epoch"], start["reason"]) for start in listed["starts"]] == [(1, "test")]
    state = operations.archive.runtime(operations.deployment.config).ledger.load(STREAM, 1)
    assert opened > 0 and (state.epoch, len(state.sealed), state.buffers) == (1, opened, {})


def test_a_grant_the_commands_need_and_the_policy_lacks_fails(operations: Operations) -> None:
    """Without ``WriteLedger``, ``epoch start`` is refused by DynamoDB and changes nothing."""
    archive = operations.archive
    statements = [s for s in operations.deployment.operator_statements(archive) if s.get("Sid") != "WriteLedger"]
    archive.assume("operator-without-writes", statements)
    ledger = ("--ledger-table", archive.table, "--config", operations.deployment.config_file)
    with pytest.raises(AssertionError, match=r"AccessDenied.*dynamodb:(PutItem|UpdateItem)"):
        operations.tidemark(
            "epoch", "start", "--stream", STREAM, "-p", 0, "--from-offset", 0, *ledger, role="operator-without-writes"
        )
    assert archive.runtime(operations.deployment.config).ledger.load(STREAM, 0).epoch == 0


def listing_allowed(statements: list[dict[str, Any]], use: Use) -> bool:
    """Does an s3:ListBucket Allow admit the listing's prefix, by its ``StringLike`` on
    ``s3:prefix``? (moto evaluates no such condition, ``CANNOT_EVALUATE``: this does, for the
    listings recorded.) An Allow without a condition admits any prefix."""
    resource, _, prefix = use.resource.partition("?prefix=")
    for statement in statements:
        if not any(covers(grant, Use(use.action, resource)) for grant in granted([statement])):
            continue
        conditions = statement.get("Condition")
        if not conditions:
            return True
        patterns = conditions.get("StringLike", {}).get("s3:prefix", [])
        for pattern in [patterns] if isinstance(patterns, str) else patterns:
            if re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), prefix):
                return True
    return False


def test_every_operator_call_is_granted_as_aws_would_grant_it(operations: Operations) -> None:
    """Each recorded authorization is covered by a grant of the policy -- a listing by its prefix
    condition too, which moto does not evaluate."""
    for step in ("status", "abandon", "rearchive", "recover", "audit", "replay", "epoch"):
        operations.steps[step].ok()
    statements = operations.deployment.operator_statements(operations.archive)
    grants = granted(statements)
    uncovered = sorted(use for use in operations.uses() if not any(covers(grant, use) for grant in grants))
    assert uncovered == []
    listings = [use for use in operations.uses() if use.action == "s3:ListBucket"]
    assert listings and [use for use in listings if not listing_allowed(statements, use)] == []


def test_every_operator_grant_is_used_or_has_a_reason(operations: Operations) -> None:
    """The unused-grant report: a grant no command used and no reason explains fails."""
    for step in ("status", "abandon", "rearchive", "recover", "audit", "replay", "epoch"):
        operations.steps[step].ok()
    grants = granted(operations.deployment.operator_statements(operations.archive))
    unused = unused_grants(grants, operations.uses())
    assert sorted(use for use in unused if allowed_reason(use) is None) == []
    # What is unused is what the archive's functions leave unused for the same reasons: KMS (S3
    # uses the key on the caller's behalf) and the transfer manager's abort of a failed part.
    assert {use.action for use in unused} == {"kms:Decrypt", "kms:GenerateDataKey", "s3:AbortMultipartUpload"}


def test_every_operator_ledger_request_is_within_the_policys_leading_keys(operations: Operations) -> None:
    """``ReadLedger`` and ``WriteLedger`` carry ``dynamodb:LeadingKeys`` conditions, which moto
    ignores: the operator's clients evaluate them before a call is sent
    (``tests.support.iam.LeadingKeysEvaluator``, standing in for AWS), so a command reaching
    another family's or stream's items failed its step above. Every request was allowed, named
    the configured stream only, and each pattern of the policy was used."""
    for step in ("status", "abandon", "rearchive", "recover", "audit", "replay", "epoch"):
        operations.steps[step].ok()
    operator = operations.operator
    assert operator.requests and operator.denied == []
    assert {key.split("#")[1] for request in operator.requests for key in request.leading_keys} == {STREAM}
    assert unused_leading_keys(operator.statements, operator.requests) == set()
