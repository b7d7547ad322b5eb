"""Every function's real code paths under the IAM policy the synthesized template grants its role.

A moto server of its own enforces IAM (``tests.support.iam``): the archiver stages, flushes,
dead-letters, uploads in parts and resumes a flush whose object is already in S3 (the 412 path,
which heads the object); the sweeper's steps sweep (resuming a sealed flush, quarantining a
damaged one), reconcile (also an object gone from S3) and complete hours (manifests). Each role
runs under its own assumed credentials, and a grant the code needs and the template lacks fails
here, as AccessDenied would fail the function in AWS. The grants no code path used are reported
against ``ALLOWED_UNUSED``: an unused grant without a reason fails.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cdk import REPO, logical_id, synth_stack
from tests.support.events import event_of, msk_event
from tests.support.harness import (
    EsmModel,
    assert_exactly_once,
    damage_first_segment,
    example_config_data,
    small_config,
    small_config_data,
)
from tests.support.iam import (
    IamArchive,
    IamServer,
    RoleSession,
    Step,
    TemplateGrants,
    Use,
    allowed_reason,
    granted,
    unused_grants,
    unused_leading_keys,
)
from tests.support.queue_model import QueueModel, publish_orders, rabbitmq_source
from tests.support.workload import make_orders
from tidemark.archiver import Archiver
from tidemark.config import TidemarkConfig, parse_config
from tidemark.faults import AFTER_UPLOAD, CrashAt, SimulatedCrash
from tidemark.records.model import Record
from tidemark.sources import KAFKA, KINESIS
from tidemark.sweeper.completeness import CompletenessTracker
from tidemark.sweeper.discovery import discover_all
from tidemark.sweeper.reconcile import MISSING, Reconciler
from tidemark.sweeper.sweep import sweep_partition
from tidemark.verify import ExpectedRecord, verify_archive, verify_messages

pytestmark = pytest.mark.xdist_group("iam")

HOUR_MS = 3_600_000


@dataclass
class Deployment:
    """A synthesized stack and the logical ids of its roles, by the name tests use."""

    config: TidemarkConfig
    template: dict[str, Any]
    bucket: str
    table: str
    roles: dict[str, str]

    def grants(self, archive: IamArchive) -> TemplateGrants:
        return TemplateGrants(self.template, archive.physical(self.bucket, self.table))

    def assume_all(self, archive: IamArchive) -> None:
        grants = self.grants(archive)
        for name, role in self.roles.items():
            archive.assume(name, grants.statements(role))


def deploy(config: TidemarkConfig) -> Deployment:
    stack, template = synth_stack(config, nag=False)
    sweeper = stack.sweeper.functions
    roles = {
        "archiver": stack.archiver.functions[config.streams[0].name].role,
        "list_partitions": sweeper.list_partitions.role,
        "sweep_partition": sweeper.sweep_partition.role,
        "reconcile": sweeper.reconcile.role,
        "complete_hours": sweeper.complete_hours.role,
    }
    return Deployment(
        config,
        template.to_json(),
        logical_id(stack.storage.bucket),
        logical_id(stack.storage.ledger_table),
        {name: logical_id(role) for name, role in roles.items() if role is not None},
    )


def multipart_config() -> TidemarkConfig:
    """Objects of 400 records of 16 KiB: above a 5 MiB multipart threshold (two parts)."""
    data = example_config_data()
    data["archive"].update({"multipart_threshold": "5MiB", "multipart_chunksize": "5MiB"})
    stream = data["streams"][0]
    stream["event_time"] = {"source": "record_timestamp"}
    stream["encoding"] = {"value": "bytes", "key": "text", "headers": "text"}
    stream["aggregations"] = []
    stream["format"] = {"type": "jsonl", "compression": "none"}
    stream["flush"] = {"max_records": 400, "max_bytes": "64MiB", "max_age": "15m"}
    stream["dead_letter"] = {"max_record_bytes": "1MiB"}
    return parse_config(yaml.safe_load(yaml.safe_dump(data)))


@dataclass
class Lifecycle:
    """The default configuration's whole path, each step under its function's role."""

    deployment: Deployment
    archive: IamArchive
    steps: dict[str, Step] = field(default_factory=dict)

    def run(self, name: str, action: Callable[[], Any]) -> Step:
        step = self.steps[name] = Step.run(action)
        return step


def crashes(action: Callable[[], object]) -> bool:
    """Did ``action`` die at its crash point? (A lifecycle step records failures, never raises.)"""
    try:
        action()
    except SimulatedCrash:
        return True
    return False


@pytest.fixture(scope="module")
def default_deployment() -> Deployment:
    return deploy(small_config(max_records=50))


@pytest.fixture(scope="module")
def lifecycle(
    iam_server: IamServer, default_deployment: Deployment, tmp_path_factory: pytest.TempPathFactory
) -> Lifecycle:
    archive = IamArchive.create(iam_server, tmp_path_factory.mktemp("iam"))
    default_deployment.assume_all(archive)
    config = default_deployment.config
    run = Lifecycle(default_deployment, archive)
    workload = make_orders(partitions=2, per_partition=120, hours=2, late_share=0.1, bad_share=0.05, seed=27)
    esm = EsmModel(workload, archive.runtimes(config))

    def resumed_by_the_archiver() -> int:
        # The process dies after its object landed in S3 and before the ledger's commit: the
        # redelivery resumes the sealed flush, whose upload meets the object (412) and heads it.
        assert not esm.deliver(esm.batch(0, 120), CrashAt(AFTER_UPLOAD))
        assert esm.deliver(esm.batch(0, 120))
        # The batch is accepted either way; the resumed flush must have committed, not stayed sealed.
        return esm.crashes, archive.runtime(config).ledger.load("orders", 0).sealed

    run.run("list_partitions", lambda: discover_all(archive.runtime(config, role="list_partitions")))
    run.run("archiver_resumes_a_flush", resumed_by_the_archiver)

    def resumed_by_the_sweeper() -> Any:
        assert not esm.deliver(esm.batch(1, 120), CrashAt(AFTER_UPLOAD))
        return sweep_partition(archive.runtime(config, role="sweep_partition"), "orders", 1)

    run.run("sweeper_resumes_a_flush", resumed_by_the_sweeper)
    run.run("archiver_stages_and_flushes", lambda: esm.drain(40))

    def idle_flushes() -> list[Any]:
        archive.clock.advance(minutes=16)
        runtime = archive.runtime(config, role="sweep_partition")
        return [sweep_partition(runtime, "orders", partition) for partition in (0, 1)]

    run.run("sweeper_flushes_idle_buffers", idle_flushes)
    run.run("archive_is_exactly_once", lambda: assert_exactly_once(archive, config, esm))
    run.run(
        "reconcile_clean", lambda: Reconciler(archive.runtime(config, role="reconcile")).run(archive.clock.now_ms())
    )

    def complete() -> Any:
        archive.clock.advance(ms=4 * HOUR_MS)
        return CompletenessTracker(archive.runtime(config, role="complete_hours")).run(archive.clock.now_ms())

    run.run("complete_hours", complete)

    def reconcile_missing() -> Any:
        runtime = archive.runtime(config, role="reconcile")
        (hour, *_) = sorted(mark.hour for mark in runtime.ledger.hour_marks("orders"))
        (first, *_) = runtime.ledger.committed_objects("orders", hour)
        archive.s3.delete_object(Bucket=archive.bucket, Key=first.key)  # the admin; no function may delete
        return first.key, Reconciler(runtime).run(archive.clock.now_ms())

    run.run("reconcile_missing_object", reconcile_missing)

    def quarantine() -> Any:
        late = make_orders(partitions=1, per_partition=20, hours=1, late_share=0.0, bad_share=0.0, seed=3)
        records = [record._replace(offset=10_000 + index) for index, record in enumerate(late.all_records())]
        runtime = archive.runtime(config)
        Archiver(runtime).handle(msk_event(records))  # below max_records: stays OPEN
        hour = next(key for key in runtime.ledger.load("orders", 0).buffers).split("/", 1)[1]
        damage_first_segment(archive, runtime, 0, hour)
        archive.clock.advance(minutes=16)
        return sweep_partition(archive.runtime(config, role="sweep_partition"), "orders", 0)

    run.run("sweeper_quarantines", quarantine)

    def dead_letters_resumed() -> tuple[int, int]:
        # Dead letters are objects too: a flush of them resumed by the archiver and by the sweeper.
        bad = [
            Record("orders", 1, 20_000 + index, workload.records[1][0].timestamp_ms, b"{not json", b"k")
            for index in range(60)
        ]
        assert crashes(lambda: Archiver(archive.runtime(config, CrashAt(AFTER_UPLOAD))).handle(msk_event(bad)))
        Archiver(archive.runtime(config)).handle(msk_event(bad))
        few = [record._replace(offset=record.offset + 100) for record in bad[:20]]  # below max_records
        Archiver(archive.runtime(config)).handle(msk_event(few))
        archive.clock.advance(minutes=16)
        runtime = archive.runtime(config, CrashAt(AFTER_UPLOAD), role="sweep_partition")
        assert crashes(lambda: sweep_partition(runtime, "orders", 1))
        outcome = sweep_partition(archive.runtime(config, role="sweep_partition"), "orders", 1)
        listing = archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="errors/orders/")
        return outcome.resumed, listing.get("KeyCount", 0)

    run.run("dead_letters_resumed", dead_letters_resumed)
    return run


def test_the_archiver_resumes_a_flush_whose_object_is_already_in_s3(lifecycle: Lifecycle) -> None:
    """Finding 1: on a 412 the writer heads the object, which needs s3:GetObject."""
    crashes, sealed = lifecycle.steps["archiver_resumes_a_flush"].ok()
    assert crashes == 1 and sealed == {}


def test_the_sweeper_resumes_a_flush_whose_object_is_already_in_s3(lifecycle: Lifecycle) -> None:
    outcome = lifecycle.steps["sweeper_resumes_a_flush"].ok()
    assert outcome.resumed >= 1 and outcome.flush_errors == 0


def test_the_archiver_stages_flushes_and_dead_letters_under_its_role(lifecycle: Lifecycle) -> None:
    lifecycle.steps["archiver_stages_and_flushes"].ok()
    lifecycle.steps["archive_is_exactly_once"].ok()
    listing = lifecycle.archive.s3.list_objects_v2(Bucket=lifecycle.archive.bucket, Prefix="errors/orders/")
    assert listing.get("KeyCount", 0) > 0  # dead letters written under the archiver's role


def test_the_sweeper_flushes_idle_buffers_under_its_role(lifecycle: Lifecycle) -> None:
    outcomes = lifecycle.steps["sweeper_flushes_idle_buffers"].ok()
    assert any(outcome.flushed for outcome in outcomes)


def test_reconcile_reads_the_archive_under_its_role(lifecycle: Lifecycle) -> None:
    report = lifecycle.steps["reconcile_clean"].ok()
    assert report.objects_checked > 0 and report.checksums_checked > 0
    assert report.findings == []


def test_reconcile_reports_an_object_gone_from_s3_instead_of_failing(lifecycle: Lifecycle) -> None:
    """Finding 2: without an unconditioned s3:ListBucket, S3 answers a HeadObject of a missing
    key with 403, not 404 (HeadObject, Permissions)."""
    key, report = lifecycle.steps["reconcile_missing_object"].ok()
    assert [(finding.kind, finding.key) for finding in report.findings] == [(MISSING, key)]


def test_complete_hours_writes_manifests_under_its_role(lifecycle: Lifecycle) -> None:
    report = lifecycle.steps["complete_hours"].ok()
    assert report.manifests
    archive = lifecycle.archive
    for key in report.manifests:
        assert archive.s3.head_object(Bucket=archive.bucket, Key=key)["ContentLength"] > 0


def test_dead_letter_flushes_resume_under_the_archivers_and_the_sweepers_roles(lifecycle: Lifecycle) -> None:
    resumed, objects = lifecycle.steps["dead_letters_resumed"].ok()
    assert resumed == 1 and objects >= 2


def test_the_sweeper_quarantines_a_damaged_flush_under_its_role(lifecycle: Lifecycle) -> None:
    outcome = lifecycle.steps["sweeper_quarantines"].ok()
    assert outcome.quarantined == 1


def test_a_multipart_upload_under_the_archivers_role(iam_server: IamServer, tmp_path: Path) -> None:
    config = multipart_config()
    deployment = deploy(config)
    archive = IamArchive.create(iam_server, tmp_path)
    deployment.assume_all(archive)
    rng = random.Random(27)
    records = [
        Record("orders", 0, offset, 1_795_248_000_000 + offset, rng.randbytes(16 * 1024), f"k{offset}".encode())
        for offset in range(400)
    ]
    runtime = archive.runtime(config)
    failures = iter([True])

    def part_lost(**_: Any) -> None:
        if next(failures, False):
            raise ConnectionResetError("the connection dropped during an UploadPart")

    # The first upload fails in its parts: the transfer manager aborts it (AbortMultipartUpload),
    # the flush stays sealed, and the sweeper's resume uploads it whole.
    runtime.objects.client.meta.events.register("before-call.s3.UploadPart", part_lost)
    (outcome,) = Archiver(runtime).handle(msk_event(records)).values()
    assert outcome.flush_errors == 1
    assert not archive.s3.list_multipart_uploads(Bucket=archive.bucket).get("Uploads")
    assert sweep_partition(archive.runtime(config, role="sweep_partition"), "orders", 0).resumed == 1

    (key,) = [item["Key"] for item in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"]]
    assert archive.s3.head_object(Bucket=archive.bucket, Key=key)["ETag"].strip('"').endswith("-2")
    aborted = {use.action for use in archive.roles["archiver"].uses if use.resource.endswith(key)}
    assert aborted == {"s3:PutObject", "s3:AbortMultipartUpload"}
    resumed = {use.action for use in archive.roles["sweep_partition"].uses if use.resource.endswith(key)}
    assert resumed == {"s3:PutObject"}  # in two parts, each authorized as s3:PutObject
    expected = [ExpectedRecord(0, record.offset, record.value, "2026-11-21T08") for record in records]
    report = verify_archive(archive.s3, archive.bucket, "orders", expected, config=config.streams[0])
    assert report.ok, report.summary()


def test_every_grant_is_used_by_our_code_or_by_aws_with_a_reason(lifecycle: Lifecycle) -> None:
    """The unused-grant report: a grant no code path used and no AWS service needs fails."""
    archive = lifecycle.archive
    grants = lifecycle.deployment.grants(archive)
    # The ledger is one grant (LEDGER_ACTIONS) on every function that holds a ledger: checked
    # against what the ledger's code did under any role, so an action no ledger path uses fails.
    ledger = f"arn:aws:dynamodb:us-east-1:123456789012:table/{archive.table}"
    ledger_uses = {use for role in archive.roles.values() for use in role.uses if use.resource == ledger}
    unexplained: dict[str, list[Use]] = {}
    for name, role in archive.roles.items():
        unused = unused_grants(granted(grants.statements(lifecycle.deployment.roles[name])), role.uses | ledger_uses)
        missing = sorted(use for use in unused if allowed_reason(use) is None)
        if missing:
            unexplained[name] = missing
    assert unexplained == {}, "\n".join(
        f"{name}: {use.action} on {use.resource}" for name, uses in unexplained.items() for use in uses
    )


def source_config(kind: str) -> TidemarkConfig:
    """A Kinesis stream, or self-managed Kafka as ``config/kafka.yaml`` reads it, with small flushes."""
    if kind == KINESIS:
        return small_config(kind=KINESIS, max_records=50)
    data = small_config_data(max_records=50)
    data["streams"][0]["source"] = yaml.safe_load((REPO / "config" / "kafka.yaml").read_text())["streams"][0]["source"]
    return parse_config(data)


@pytest.mark.parametrize("kind", [KINESIS, KAFKA])
def test_each_source_archives_and_resumes_flushes_under_the_templates_roles(
    iam_server: IamServer, tmp_path: Path, kind: str
) -> None:
    """The happy path and the 412 path of the archiver and of SweepPartition, per source kind."""
    config = source_config(kind)
    deployment = deploy(config)
    archive = IamArchive.create(iam_server, tmp_path)
    deployment.assume_all(archive)
    workload = make_orders(partitions=2, per_partition=100, hours=1, kind=kind, seed=11)

    def event(records: list[Record]) -> dict[str, Any]:
        return event_of(records, kind) if kind == KINESIS else msk_event(records, self_managed=True)

    (first, second) = workload.records
    head = workload.records[first][:60]
    with pytest.raises(SimulatedCrash):
        Archiver(archive.runtime(config, CrashAt(AFTER_UPLOAD))).handle(event(head))
    Archiver(archive.runtime(config)).handle(event(head))  # redelivered: its flush's object is there
    with pytest.raises(SimulatedCrash):
        Archiver(archive.runtime(config, CrashAt(AFTER_UPLOAD))).handle(event(workload.records[second][:60]))
    resumed = sweep_partition(archive.runtime(config, role="sweep_partition"), "orders", second)
    assert resumed.resumed == 1 and resumed.flush_errors == 0

    runtime = archive.runtime(config)
    Archiver(runtime).handle(event(workload.records[first][60:]))
    Archiver(runtime).handle(event(workload.records[second][60:]))
    archive.clock.advance(minutes=16)
    sweeper = archive.runtime(config, role="sweep_partition")
    for partition in workload.records:
        sweep_partition(sweeper, "orders", partition)
    report = verify_archive(archive.s3, archive.bucket, "orders", workload.expected, config=config.streams[0])
    assert report.ok and report.archived + report.dead_lettered == 200, report.summary()


def test_a_queue_archives_and_resumes_flushes_under_the_templates_roles(iam_server: IamServer, tmp_path: Path) -> None:
    data = small_config_data(max_records=40)
    data["streams"][0].update(source=rabbitmq_source(), aggregations=[])
    config = parse_config(data)
    deployment = deploy(config)
    archive = IamArchive.create(iam_server, tmp_path)
    deployment.assume_all(archive)
    published = publish_orders(150, seed=27, hours=1)
    model = QueueModel(published.messages, archive.runtimes(config))

    assert not model.deliver(45, CrashAt(AFTER_UPLOAD))
    assert model.deliver(45)  # redelivered: its flush's object is there (412, then a HEAD)
    assert not model.deliver(45, CrashAt(AFTER_UPLOAD))
    resumed = sweep_partition(archive.runtime(config, role="sweep_partition"), "orders", 0)
    assert resumed.resumed == 1 and resumed.flush_errors == 0
    model.drain(45)
    archive.clock.advance(minutes=16)
    sweep_partition(archive.runtime(config, role="sweep_partition"), "orders", 0)

    report = verify_messages(archive.s3, archive.bucket, "orders", published.expected, config=config.streams[0])
    assert (report.lost, report.duplicated, report.unexpected) == ([], [], []), report.summary()
    assert report.archived + report.dead_lettered == len(published.expected)

    # A damaged index is rebuilt by SweepPartition under its role: the ledger's objects of the
    # window read back from S3. Every message redelivered then is a duplicate.
    index = archive.staging_root / "orders" / "dedupe" / "p0.sqlite"
    index.write_bytes(b"not a database " * 512)
    sweep_partition(archive.runtime(config, role="sweep_partition"), "orders", 0)
    assert list(index.parent.glob("p0.sqlite.damaged-*"))  # set aside: the rebuild went through
    model.ready.extend(published.messages)
    model.drain(45)
    again = verify_messages(archive.s3, archive.bucket, "orders", published.expected, config=config.streams[0])
    assert (again.lost, again.duplicated, again.unexpected) == ([], [], []), again.summary()


#: LeadingKeys patterns a role holds that the lifecycle does not use ("read" or "write", pattern),
#: and why each is there
UNUSED_LEADING_KEYS: dict[str, dict[tuple[str, str], str]] = {
    "sweep_partition": {
        ("read", "HOUR#orders#*"): "a flush whose object is recorded although its state says pending "
        "(PartitionWriter._commit_recorded), and a queue's dedupe index rebuilt from the committed objects "
        "(test_a_queue_archives_and_resumes_flushes_under_the_templates_roles); test_iam_leading_keys.py runs both",
    },
    "reconcile": {
        ("read", "PART#orders#*"): "the sealed flushes of the partitions it found, when an hour's folder holds an "
        "object the ledger does not (here none was registered); test_iam_leading_keys.py plants one",
        ("write", "STREAM#orders"): "registers a partition it finds first (discover), as ListPartitions does",
    },
    "complete_hours": {
        ("read", "PART#orders#*"): "the watermarks of the registered partitions (here ListPartitions ran before "
        "any partition had staged, so none was registered); test_iam_leading_keys.py reads them",
        ("write", "STREAM#orders"): "registers a partition it finds first (discover), as ListPartitions does",
    },
}


def unused_keys_of(role: RoleSession) -> set[tuple[str, str]]:
    """A role's LeadingKeys patterns no request of its used, by the statement's kind."""
    return {
        ("read" if set(actions) <= {"dynamodb:GetItem", "dynamodb:Query"} else "write", pattern)
        for actions, pattern in unused_leading_keys(role.statements, role.requests)
    }


def test_every_ledger_request_is_within_the_roles_leading_keys(lifecycle: Lifecycle) -> None:
    """moto ignores ``dynamodb:LeadingKeys``; each role's clients evaluate it before a call is sent
    (``tests.support.iam.LeadingKeysEvaluator``, a stand-in for AWS's evaluation), so a step whose
    request reached another family's or another stream's items failed above with
    AccessDeniedException. Here: the lifecycle's requests, every one allowed, named only this
    stream's keys; and each pattern a role holds was used, or has a reason. (The suite's harness
    helpers run as the archiver: its patterns' use is not all its own code's.)"""
    archive = lifecycle.archive
    unused: dict[str, set[tuple[str, str]]] = {}
    for name, role in archive.roles.items():
        assert role.denied == [], f"{name}: {role.denied}"
        keys = {key for request in role.requests for key in request.leading_keys}
        assert keys and all("#orders" in key for key in keys), (name, keys)
        unused[name] = unused_keys_of(role)
    assert unused == {name: set(UNUSED_LEADING_KEYS.get(name, {})) for name in archive.roles}
