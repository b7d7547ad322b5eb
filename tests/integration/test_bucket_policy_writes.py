"""Every write the archive makes, evaluated against the bucket policy the stack synthesizes.

The archive bucket's policy (``stacks.storage.archive_protection_statements``) denies an object
creation under ``raw/``, ``errors/`` and ``manifests/`` without ``If-None-Match``, and any delete
there (and under ``aws/lambda/``) but the break-glass role's. moto evaluates no bucket policy, so
a code path that writes without the header would pass every moto test and be refused by the
deployed stack. This module stands in for AWS's evaluation of that policy:

1. **The policy as deployed.** The stack is synthesized and the archive bucket's
   ``AWS::S3::BucketPolicy`` statements are taken from the template, resolved to this test's
   bucket (``tests.support.iam.TemplateGrants``).
2. **Each request as sent.** The real code paths run against the session's moto server on S3
   clients that record every request at ``before-sign`` -- after botocore and our own hooks have
   built it (``If-None-Match`` is added by ``tidemark.objects.writer``'s hook), as it goes on the
   wire: operation, bucket, key, headers and the role it runs as.
3. **A small evaluator of our own** (``denials``): for each request, the IAM actions and resources
   S3 authorizes it as (PutObject, CopyObject and every multipart step are ``s3:PutObject``,
   DeleteObjects is ``s3:DeleteObject`` per key, a delete naming a version
   ``s3:DeleteObjectVersion``), its request context (``s3:if-none-match`` and ``s3:if-match`` from
   the headers, ``s3:ObjectCreationOperation`` true for PutObject, CompleteMultipartUpload and
   CopyObject and false for CreateMultipartUpload, UploadPart and UploadPartCopy -- "Enforce
   conditional writes on Amazon S3 buckets", S3 User Guide --, ``aws:PrincipalArn``, and
   ``aws:SecureTransport`` true as boto3 reaches S3 over HTTPS), and every ``Deny`` statement
   whose action, resource and conditions match. It knows the condition operators the policy uses
   (``Null``, ``Bool``, ``String*``, ``Arn*``) and fails on any other, on ``NotAction``,
   ``NotResource``, ``NotPrincipal`` or a principal other than everyone: never a silent pass.
   It evaluates explicit denies only (allows are the roles' IAM policies, which
   ``test_iam_production.py`` runs under).

The evaluator is not AWS: ARN conditions are matched as whole-string wildcards (IAM matches each
of an ARN's six parts; the same for the full ARNs used here), and what S3 does with a request the
policy allows (a 412, a 501 for a conditional CopyObject) is moto's. The negative controls at the
end show it refuses what the policy must refuse, through the same recording clients.

The code paths: the archiver's flushes, dead letters and late hours, a flush resumed after its
upload landed (412, then HeadObject) by the archiver and by the sweeper, a multipart upload with a
failed part (aborted) and its resume in parts, the sweeper's idle flushes, reconciliation and
manifests -- an hour completed, re-dirtied by a late record and completed again, and a completion
whose ledger write failed after its manifest landed, rerun (412) --, ``rearchive`` and
``recover`` (each also rerun after a crash that followed its upload). Every upload also carries
a checksum header, which S3 requires of uploads to a bucket with Object Lock retention
(``archive.protection: object_lock``).
"""

from __future__ import annotations

import fnmatch
import json
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import orjson
import pytest
import yaml

from tests.conftest import Archive
from tests.support.cdk import logical_id, synth_stack
from tests.support.events import msk_event
from tests.support.harness import EsmModel, damage_first_segment, example_config_data, small_config_data
from tests.support.iam import TemplateGrants
from tests.support.workload import BASE_MS, HOUR_MS, make_orders
from tidemark.archiver import Archiver
from tidemark.config import TidemarkConfig, parse_config
from tidemark.exceptions import NotRetainedError
from tidemark.faults import AFTER_UPLOAD, CrashAt, SimulatedCrash
from tidemark.rearchive import Rearchiver
from tidemark.records.model import Record
from tidemark.recover import Recoverer
from tidemark.sources import PartitionId
from tidemark.sweeper.completeness import CompletenessTracker, manifest_key
from tidemark.sweeper.discovery import discover_all
from tidemark.sweeper.reconcile import Reconciler
from tidemark.sweeper.sweep import sweep_partition

ACCOUNT = "123456789012"
ARCHIVER = f"arn:aws:iam::{ACCOUNT}:role/Tidemark-ArchiverOrders"
SWEEPER = f"arn:aws:iam::{ACCOUNT}:role/Tidemark-SweeperSweepPartition"
COMPLETE_HOURS = f"arn:aws:iam::{ACCOUNT}:role/Tidemark-SweeperCompleteHours"
OPERATOR = f"arn:aws:iam::{ACCOUNT}:role/operators"
BREAK_GLASS = f"arn:aws:iam::{ACCOUNT}:role/ops/tidemark-break-glass"
OVERWRITE_SID = "DenyObjectCreationWithoutIfNoneMatch"
DELETE_SID = "DenyDeletingArchivedObjects"


# -- recording: each S3 request as it is sent ---------------------------------------------------


@dataclass(frozen=True)
class S3Request:
    """One S3 request as botocore signs it (the last step before the wire)."""

    operation: str
    bucket: str
    key: str | None
    headers: Mapping[str, str]  # names lower-cased
    principal: str  # the role the client runs as (aws:PrincipalArn)
    version_id: str | None = None
    deleted: tuple[tuple[str, str | None], ...] = ()  # DeleteObjects: (key, version id)

    def describe(self) -> str:
        return f"{self.operation} s3://{self.bucket}/{self.key or ''} as {self.principal.rsplit('/', 1)[-1]}"


@dataclass
class Recorder:
    endpoint: str
    requests: list[S3Request] = field(default_factory=list)

    def client(self, principal: str) -> Any:
        """An S3 client on the moto server that records every request it sends as ``principal``."""
        client = boto3.client("s3", endpoint_url=self.endpoint)
        client.meta.events.register("before-sign.s3", partial(self._signing, principal))
        return client

    def _signing(self, principal: str, request: Any, operation_name: str, **_: Any) -> None:
        params = request.context.get("input_params", {})
        query = parse_qs(urlsplit(request.url).query)
        deleted = tuple((item["Key"], item.get("VersionId")) for item in params.get("Delete", {}).get("Objects", []))
        headers = {name.lower(): str(value) for name, value in request.headers.items()}
        self.requests.append(
            S3Request(
                operation_name,
                params.get("Bucket", ""),
                params.get("Key"),
                headers,
                principal,
                (query.get("versionId") or [None])[0],
                deleted,
            )
        )

    def since(self, start: int) -> list[S3Request]:
        return self.requests[start:]


# -- evaluating: the bucket policy's explicit denies against one request --------------------------

#: the operations S3 authorizes as s3:PutObject, and their s3:ObjectCreationOperation ("Enforce
#: conditional writes on Amazon S3 buckets": the multipart steps that take no conditional header
#: are not object creations)
OBJECT_CREATION = {
    "PutObject": True,
    "CompleteMultipartUpload": True,
    "CopyObject": True,
    "CreateMultipartUpload": False,
    "UploadPart": False,
    "UploadPartCopy": False,
}
READS = {"GetObject": "s3:GetObject", "HeadObject": "s3:GetObject"}
LISTS = {
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "ListObjectVersions": "s3:ListBucketVersions",
}
NEGATED = ("StringNotEquals", "StringNotLike", "ArnNotEquals", "ArnNotLike")
#: the condition operators the evaluator knows (no ...IfExists, no numbers, dates or addresses)
OPERATORS = (
    "Null",
    "Bool",
    "StringEquals",
    "StringLike",
    "ArnEquals",
    "ArnLike",
    *NEGATED,
)


def authorizations(request: S3Request) -> list[tuple[str, str]]:
    """The (action, resource) pairs S3 authorizes ``request`` as."""
    bucket = f"arn:aws:s3:::{request.bucket}"
    obj = f"{bucket}/{request.key}"
    if request.operation in OBJECT_CREATION:
        return [("s3:PutObject", obj)]
    if request.operation == "DeleteObject":
        return [("s3:DeleteObjectVersion" if request.version_id else "s3:DeleteObject", obj)]
    if request.operation == "DeleteObjects":
        return [
            ("s3:DeleteObjectVersion" if version else "s3:DeleteObject", f"{bucket}/{key}")
            for key, version in request.deleted
        ]
    if request.operation in READS:
        return [(READS[request.operation], obj)]
    if request.operation in LISTS:
        return [(LISTS[request.operation], bucket)]
    return [(f"s3:{request.operation}", obj if request.key is not None else bucket)]


def request_context(request: S3Request) -> dict[str, str]:
    context = {"aws:PrincipalArn": request.principal, "aws:SecureTransport": "true"}
    if request.operation in OBJECT_CREATION:
        context["s3:ObjectCreationOperation"] = str(OBJECT_CREATION[request.operation]).lower()
    for header in ("if-none-match", "if-match"):
        if header in request.headers:
            context[f"s3:{header}"] = request.headers[header]
    return context


def listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def condition_holds(operator: str, key: str, wanted: str | list[str], context: Mapping[str, str]) -> bool:
    """One condition key of one operator: any of the policy's values matches (OR); a negated
    operator holds when no value matches, and when the key is absent (IAM's rule)."""
    if operator not in OPERATORS:
        raise NotImplementedError(f"the evaluator does not know the condition operator {operator}")
    values = listed(wanted)
    present = key in context
    if operator == "Null":
        return all((value == "true") == (not present) for value in values)
    if not present:
        return operator in NEGATED
    actual = context[key]
    if operator == "Bool":
        return any(actual == value.lower() for value in values)
    if operator in ("StringEquals", "StringNotEquals"):
        hit = any(actual == value for value in values)
    else:  # String(Not)Like, Arn*: ArnEquals takes wildcards too
        hit = any(fnmatch.fnmatchcase(actual, value) for value in values)
    return not hit if operator in NEGATED else hit


def statement_denies(statement: Mapping[str, Any], action: str, resource: str, context: Mapping[str, str]) -> bool:
    unknown = {"NotAction", "NotResource", "NotPrincipal"} & set(statement)
    if unknown:
        raise NotImplementedError(f"the evaluator does not know {sorted(unknown)}")
    if statement["Effect"] != "Deny":
        return False
    if statement["Principal"] not in ("*", {"AWS": "*"}):
        raise NotImplementedError(f"the evaluator knows only deny-to-everyone statements, got {statement['Principal']}")
    if not any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in listed(statement["Action"])):
        return False
    if not any(fnmatch.fnmatchcase(resource, pattern) for pattern in listed(statement["Resource"])):
        return False
    return all(
        condition_holds(operator, key, wanted, context)
        for operator, keys in statement.get("Condition", {}).items()
        for key, wanted in keys.items()
    )


def denials(statements: list[dict[str, Any]], request: S3Request) -> list[str]:
    """The Sids (or positions) of the statements that explicitly deny ``request``."""
    context = request_context(request)
    return [
        statement.get("Sid", f"#{index}")
        for index, statement in enumerate(statements)
        for action, resource in authorizations(request)
        if statement_denies(statement, action, resource, context)
    ]


# -- the policy the stack synthesizes ----------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    template: dict[str, Any]
    bucket_id: str

    def statements(self, bucket: str) -> list[dict[str, Any]]:
        """The archive bucket policy's statements, resolved to ``bucket``."""
        (policy,) = [
            resource
            for resource in self.template["Resources"].values()
            if resource["Type"] == "AWS::S3::BucketPolicy"
            and resource["Properties"]["Bucket"] == {"Ref": self.bucket_id}
        ]
        grants = TemplateGrants(self.template, {self.bucket_id: (bucket, f"arn:aws:s3:::{bucket}")})
        statements: list[dict[str, Any]] = grants.resolve(policy["Properties"]["PolicyDocument"]["Statement"])
        assert "unresolved" not in json.dumps(statements)
        return statements


@pytest.fixture(scope="module")
def policy() -> Policy:
    data = small_config_data(max_records=50)
    data["archive"]["break_glass_role_arn"] = BREAK_GLASS
    stack, template = synth_stack(parse_config(data), nag=False)
    return Policy(template.to_json(), logical_id(stack.storage.bucket))


@pytest.fixture
def recorder(moto_endpoint: str) -> Recorder:
    return Recorder(moto_endpoint)


def assert_allowed(policy: Policy, archive: Archive, requests: list[S3Request]) -> None:
    """No request denied; every upload conditional where the policy demands it, and checksummed."""
    statements = policy.statements(archive.bucket)
    denied = [f"{request.describe()}: {denials(statements, request)}" for request in requests]
    assert [line for line in denied if not line.endswith(": []")] == []
    for request in requests:
        if request.operation in ("PutObject", "UploadPart"):
            # S3 Object Lock: an upload to a bucket with a default retention needs Content-MD5 or
            # a checksum (boto3 sends a CRC32 unless told not to)
            assert {"content-md5", "x-amz-sdk-checksum-algorithm"} & set(request.headers) or any(
                name.startswith("x-amz-checksum-") for name in request.headers
            ), request.describe()


def operations(requests: list[S3Request]) -> set[str]:
    return {request.operation for request in requests}


def conditional_creations(requests: list[S3Request]) -> set[tuple[str, str]]:
    return {
        (request.operation, request.headers.get("if-none-match", "-"))
        for request in requests
        if OBJECT_CREATION.get(request.operation)
    }


# -- the archiver ---------------------------------------------------------------------------------


def test_the_archivers_flushes_dead_letters_and_resumed_flushes_are_allowed(
    policy: Policy, archive: Archive, recorder: Recorder
) -> None:
    config = parse_config(small_config_data(max_records=50))
    s3 = recorder.client(ARCHIVER)
    workload = make_orders(partitions=2, per_partition=120, hours=2, late_share=0.1, bad_share=0.05, seed=31)
    esm = EsmModel(workload, lambda crash: archive.runtime(config, crash, s3=s3))
    # The process dies after its object landed and before the commit: the redelivery's upload
    # of the same flush meets the object (412) and heads it.
    assert not esm.deliver(esm.batch(0, 120), CrashAt(AFTER_UPLOAD))
    assert esm.deliver(esm.batch(0, 120))
    assert archive.runtime(config).ledger.load("orders", 0).sealed == {}
    esm.drain(40)
    # Enough dead letters for a flush of their own (max_records), by the archiver
    at = workload.records[1][0].timestamp_ms
    bad = [Record("orders", 1, 20_000 + offset, at, b"{not json", b"k") for offset in range(60)]
    Archiver(archive.runtime(config, s3=s3)).handle(msk_event(bad))

    requests = recorder.requests
    assert_allowed(policy, archive, requests)
    assert conditional_creations(requests) == {("PutObject", "*")}
    assert "HeadObject" in operations(requests)  # the 412 path ran
    keys = {request.key or "" for request in requests if request.operation == "PutObject"}
    assert any(key.startswith("raw/orders/") for key in keys) and any(key.startswith("errors/orders/") for key in keys)


def multipart_config() -> TidemarkConfig:
    """Objects of 400 records of 16 KiB: above a 5 MiB multipart threshold (two parts)."""
    data = example_config_data()
    data["archive"].update({"multipart_threshold": "5MiB", "multipart_chunksize": "5MiB"})
    stream = data["streams"][0]
    stream.update(
        event_time={"source": "record_timestamp"},
        encoding={"value": "bytes", "key": "text", "headers": "text"},
        aggregations=[],
        format={"type": "jsonl", "compression": "none"},
        flush={"max_records": 400, "max_bytes": "64MiB", "max_age": "15m"},
        dead_letter={"max_record_bytes": "1MiB"},
    )
    return parse_config(yaml.safe_load(yaml.safe_dump(data)))


def test_multipart_uploads_their_abort_and_their_resume_are_allowed(
    policy: Policy, archive: Archive, recorder: Recorder
) -> None:
    config = multipart_config()
    rng = random.Random(31)
    records = [
        Record("orders", 0, offset, BASE_MS + offset, rng.randbytes(16 * 1024), f"k{offset}".encode())
        for offset in range(400)
    ]
    runtime = archive.runtime(config, s3=recorder.client(ARCHIVER))
    failures = iter([True])

    def part_lost(**_: Any) -> None:
        if next(failures, False):
            raise ConnectionResetError("the connection dropped during an UploadPart")

    # The first upload loses a part: the transfer manager aborts it and the flush stays sealed;
    # the sweeper's resume uploads it in parts.
    runtime.objects.client.meta.events.register("before-call.s3.UploadPart", part_lost)
    (outcome,) = Archiver(runtime).handle(msk_event(records)).values()
    assert outcome.flush_errors == 1
    sweeper = archive.runtime(config, s3=recorder.client(SWEEPER))
    assert sweep_partition(sweeper, "orders", 0).resumed == 1

    requests = recorder.requests
    assert_allowed(policy, archive, requests)
    assert {"CreateMultipartUpload", "UploadPart", "AbortMultipartUpload", "CompleteMultipartUpload"} <= operations(
        requests
    )
    assert conditional_creations(requests) == {("CompleteMultipartUpload", "*")}
    assert all("if-none-match" not in r.headers for r in requests if r.operation == "CreateMultipartUpload")
    (key,) = [item["Key"] for item in archive.s3.list_objects_v2(Bucket=archive.bucket, Prefix="raw/")["Contents"]]
    assert archive.s3.head_object(Bucket=archive.bucket, Key=key)["ETag"].strip('"').endswith("-2")


# -- the sweeper: idle flushes, reconciliation, manifests ------------------------------------------


def late_order(offset: int, event_ms: int) -> Record:
    value = orjson.dumps({"order_id": f"late-{offset}", "price": 1, "quantity": 1, "created_at": event_ms})
    return Record("orders", 0, offset, event_ms, value, b"late")


def test_the_sweepers_flushes_reconciliation_and_manifests_are_allowed_also_for_a_redirtied_hour(
    policy: Policy, archive: Archive, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = parse_config(small_config_data(max_records=10_000))  # only the sweeper's max_age flushes
    orders = make_orders(partitions=2, per_partition=60, hours=2, late_share=0.0, bad_share=0.05, seed=5)
    archiver = Archiver(archive.runtime(config, s3=recorder.client(ARCHIVER)))
    for records in orders.records.values():
        archiver.handle(msk_event(records))
    sweeper = archive.runtime(config, s3=recorder.client(SWEEPER))
    complete_hours = archive.runtime(config, s3=recorder.client(COMPLETE_HOURS))

    def sweep() -> None:
        archive.clock.advance(minutes=16)
        for ref in discover_all(sweeper):
            sweep_partition(sweeper, ref.stream, ref.partition)

    sweep()
    archive.clock.advance(ms=4 * HOUR_MS)
    Reconciler(sweeper).run(archive.clock.now_ms())

    # The first completion writes the manifest, then its ledger write fails (the step dies):
    # the retried step meets the manifest (412) and records it.
    ledger = complete_hours.ledger
    record_manifest = ledger.record_manifest
    failed = iter([True])

    def dies_once(*args: Any, **kwargs: Any) -> bool:
        if next(failed, False):
            raise RuntimeError("the step died after its manifest landed")
        return record_manifest(*args, **kwargs)

    monkeypatch.setattr(ledger, "record_manifest", dies_once)
    with pytest.raises(RuntimeError, match="died after"):
        CompletenessTracker(complete_hours).run(archive.clock.now_ms())
    first = CompletenessTracker(complete_hours).run(archive.clock.now_ms())
    assert first.completed and first.manifests
    hour = "2026-11-21T08"
    mark = next(m for m in ledger.hour_marks("orders") if m.hour == hour)
    assert mark.complete

    # A late record re-dirties the hour; flushed, the hour completes again under a new key.
    late = late_order(10_000, BASE_MS + 30 * 60_000)
    Archiver(archive.runtime(config, s3=recorder.client(ARCHIVER))).handle(msk_event([late]))
    sweep()
    archive.clock.advance(ms=2 * HOUR_MS)  # the partition quiet again for allowed_lateness
    second = CompletenessTracker(complete_hours).run(archive.clock.now_ms())
    assert second.reopened == [f"orders/{hour}"]
    again = next(m for m in ledger.hour_marks("orders") if m.hour == hour)
    assert again.complete and again.manifest_commits == mark.commits + 1
    assert again.manifest_key == manifest_key("manifests", "orders", hour, mark.commits + 1) != mark.manifest_key
    for key in (mark.manifest_key, again.manifest_key):  # both versions kept, each under its own key
        assert archive.s3.head_object(Bucket=archive.bucket, Key=key)["ContentLength"] > 0

    requests = recorder.requests
    assert_allowed(policy, archive, requests)
    manifests = [r for r in requests if r.operation == "PutObject" and (r.key or "").startswith("manifests/")]
    assert {r.principal for r in manifests} == {COMPLETE_HOURS}
    # the one the dying step wrote, met again by its retry (412) and recorded
    (retried,) = {r.key for r in manifests if sum(1 for other in manifests if other.key == r.key) == 2}
    assert retried in {m.manifest_key for m in ledger.hour_marks("orders")}
    assert conditional_creations(requests) == {("PutObject", "*")}
    assert {"ListObjectsV2", "HeadObject"} <= operations(requests)  # reconciliation read, never wrote
    raw = {r.principal for r in requests if r.operation == "PutObject" and (r.key or "").startswith("raw/")}
    assert raw == {SWEEPER}  # max_records is never reached: every flush is the sweeper's


# -- the operator commands: rearchive, recover ------------------------------------------------------


class InMemoryLog:
    """A Kafka partition's records, read again (``LogSource``, ``Rearchiver``'s source)."""

    def __init__(self, records: list[Record]) -> None:
        self.held = records

    def records(self, partition: PartitionId, first: int, last: int) -> Iterator[Record]:
        if first < self.start_offset(partition):
            raise NotRetainedError(f"offset {first} is no longer held")
        return iter([record for record in self.held if first <= record.offset <= last])

    def start_offset(self, partition: PartitionId) -> int:
        return self.held[0].offset

    def end_offset(self, partition: PartitionId) -> int:
        return self.held[-1].offset + 1


def dies_after_upload(action: Callable[[], object]) -> None:
    with pytest.raises(SimulatedCrash):
        action()


def test_rearchive_and_recover_are_allowed_also_when_rerun_after_their_upload(
    policy: Policy, archive: Archive, recorder: Recorder
) -> None:
    config = parse_config(small_config_data(max_records=10_000))
    stream = config.streams[0]
    workload = make_orders(partitions=1, per_partition=90, hours=1, late_share=0.0, bad_share=0.0, seed=11)
    rows = workload.records[0]
    withheld = {7, 8, 61}  # the mapping never delivered these: recover archives them
    archiver_runtime = archive.runtime(config, s3=recorder.client(ARCHIVER))
    for start in range(0, 60, 30):  # a buffer of two segments, then damaged: quarantined
        Archiver(archiver_runtime).handle(msk_event([r for r in rows[start : start + 30] if r.offset not in withheld]))
    hour = next(iter(archiver_runtime.ledger.load("orders", 0).buffers)).split("/", 1)[1]
    damage_first_segment(archive, archiver_runtime, 0, hour)
    archive.clock.advance(minutes=31)
    archive.runtime(config, s3=recorder.client(SWEEPER)).writer(stream, 0).maintain()
    assert len(archive.runtime(config).ledger.load("orders", 0).quarantined) == 1
    Archiver(archiver_runtime).handle(msk_event([r for r in rows[60:] if r.offset not in withheld]))
    archive.clock.advance(minutes=31)
    archive.runtime(config, s3=recorder.client(SWEEPER)).writer(stream, 0).maintain()

    log = InMemoryLog(rows)
    operator = recorder.client(OPERATOR)

    def rearchive(crash: Any = None) -> Any:
        runtime = archive.runtime(config, crash, s3=operator)
        return Rearchiver(runtime.writer(stream, 0), runtime.ledger, log).run(0, 59)

    def recover(crash: Any = None) -> Any:
        runtime = archive.runtime(config, crash, s3=operator)
        return Recoverer(
            runtime.writer(stream, 0),
            runtime.ledger,
            operator,
            archive.bucket,
            log,
            clock=archive.clock,
            crash_points=crash,
        ).run()

    dies_after_upload(lambda: rearchive(CrashAt(AFTER_UPLOAD)))
    assert rearchive().flushes  # the rerun meets its own object (412) and commits it
    dies_after_upload(lambda: recover(CrashAt(AFTER_UPLOAD)))
    recover()
    assert archive.runtime(config).ledger.load("orders", 0).quarantined == {}

    ledger = archive.runtime(config).ledger
    archived: set[int] = set()
    for mark in ledger.hour_marks("orders"):
        for obj in ledger.committed_objects("orders", mark.hour):
            archived.update(range(obj.first, obj.last + 1))
    assert archived >= {record.offset for record in rows}  # every record, the withheld ones too

    operator_puts = [r for r in recorder.requests if r.principal == OPERATOR and r.operation == "PutObject"]
    assert len(operator_puts) >= 4  # rearchive twice, recover at least twice
    assert_allowed(policy, archive, recorder.requests)
    assert conditional_creations(recorder.requests) == {("PutObject", "*")}


# -- what the policy refuses (the evaluator's negative controls) ----------------------------------


def test_the_policy_refuses_unconditional_creation_copies_and_deletes_but_the_break_glass_roles(
    policy: Policy, archive: Archive, recorder: Recorder
) -> None:
    statements = policy.statements(archive.bucket)
    s3 = recorder.client(OPERATOR)
    glass = recorder.client(BREAK_GLASS)
    bucket = archive.bucket

    def denied(action: Callable[[], object]) -> list[list[str]]:
        start = len(recorder.requests)
        action()
        return [denials(statements, request) for request in recorder.since(start)]

    put = partial(s3.put_object, Bucket=bucket, Body=b"x")
    assert denied(lambda: put(Key="raw/orders/plain")) == [[OVERWRITE_SID]]
    assert denied(lambda: put(Key="errors/orders/plain")) == [[OVERWRITE_SID]]
    assert denied(lambda: put(Key="manifests/orders/plain")) == [[OVERWRITE_SID]]
    assert denied(lambda: put(Key="raw/orders/conditional", IfNoneMatch="*")) == [[]]
    etag = archive.s3.head_object(Bucket=bucket, Key="raw/orders/conditional")["ETag"]
    assert denied(lambda: put(Key="raw/orders/conditional", IfMatch=etag)) == [[OVERWRITE_SID]]  # a replacement
    assert denied(lambda: put(Key="aws/lambda/batch", Body=b"x")) == [[]]  # the mapping's own destination
    assert denied(lambda: put(Key="elsewhere/plain")) == [[]]
    # A copy into the archive is an object creation without If-None-Match (with it, S3 answers 501)
    source = {"Bucket": bucket, "Key": "elsewhere/plain"}
    assert denied(lambda: s3.copy_object(Bucket=bucket, Key="raw/orders/copied", CopySource=source)) == [
        [OVERWRITE_SID]
    ]

    # Multipart: the steps without a conditional header pass; the completion needs it.
    def multipart(key: str, **complete: Any) -> None:
        upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"x")
        parts = {"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload=parts, **complete)

    assert denied(lambda: multipart("raw/orders/parts-plain")) == [[], [], [OVERWRITE_SID]]
    assert denied(lambda: multipart("raw/orders/parts-conditional", IfNoneMatch="*")) == [[], [], []]

    # Deletes: refused under every protected prefix, a version or a batch alike, but for the
    # break-glass role; elsewhere the policy says nothing.
    for key in ("raw/orders/plain", "errors/orders/plain", "manifests/orders/plain", "aws/lambda/batch"):
        assert denied(partial(s3.delete_object, Bucket=bucket, Key=key)) == [[DELETE_SID]]
    assert denied(lambda: s3.delete_object(Bucket=bucket, Key="raw/orders/plain", VersionId="null")) == [[DELETE_SID]]
    batch = {"Objects": [{"Key": "raw/orders/plain"}, {"Key": "elsewhere/plain"}]}
    assert denied(lambda: s3.delete_objects(Bucket=bucket, Delete=batch)) == [[DELETE_SID]]
    assert denied(lambda: s3.delete_object(Bucket=bucket, Key="elsewhere/plain")) == [[]]
    assert denied(lambda: glass.delete_object(Bucket=bucket, Key="raw/orders/conditional")) == [[]]
    # ... which may not overwrite either
    assert denied(lambda: glass.put_object(Bucket=bucket, Key="raw/orders/again", Body=b"x")) == [[OVERWRITE_SID]]


def test_the_evaluator_fails_on_what_it_does_not_know() -> None:
    request = S3Request("PutObject", "bucket", "raw/x", {}, OPERATOR)
    unknown_operator = {
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:PutObject",
        "Resource": "arn:aws:s3:::bucket/*",
        "Condition": {"NumericLessThan": {"s3:max-keys": "1"}},
    }
    with pytest.raises(NotImplementedError, match="NumericLessThan"):
        denials([unknown_operator], request)
    with pytest.raises(NotImplementedError, match="NotResource"):
        denials([{**unknown_operator, "NotResource": "x"}], request)
    with pytest.raises(NotImplementedError, match="deny-to-everyone"):
        denials([{**unknown_operator, "Principal": {"AWS": ARCHIVER}}], request)
