"""moto in server mode (real HTTP on loopback), with DynamoDB's write atomicity.

DynamoDB applies a conditional write atomically: the condition and the write happen as one
step per item. moto's server handles requests on several threads and evaluates conditions
without a lock, so two concurrent conditional puts can both "succeed" -- a race real DynamoDB
never lets happen and one that the exactly-once ledger depends on. This launcher serves the
same moto application with one lock around each request, restoring that atomicity.

Run: ``python -m tidemark.embedded.moto_server --port 0`` (0 picks a free port; the chosen
endpoint is printed as the first line on stdout).

For the sweeper's state machine test, ``--execute-state-machines`` makes moto's Step Functions
interpreter run executions, and ``--lambda-proxy URL`` routes every Lambda invocation to
``URL/<function name>`` (an HTTP endpoint that runs the real handlers), since moto would
otherwise need Docker to run a function.

Kinesis resharding is made to behave like Kinesis (moto's SplitShard and MergeShards are
incomplete), always:

- New records go to the open shard whose hash key range holds the record's hash key (the MD5
  of the partition key, or ExplicitHashKey). moto routed over every shard, closed ones included
  (so after a split, records kept landing in the closed parent, listed first) and treated
  EndingHashKey as exclusive (a key equal to it matched no shard and failed the put).
- A closed parent keeps its records at their sequence numbers. moto's SplitShard re-put them
  (back into the parent, renumbered, delivered again to any event source mapping); its
  MergeShards copied them into the child, so they were read twice.
- A child's sequence numbers are greater than every sequence number of its parents, as in
  Kinesis: moto numbers each shard from 1, so a child's first record came out as 1.
- GetRecords on a closed shard, once a read has reached its last record, returns ChildShards
  and no NextShardIterator (moto's iterator never ended and it never returned ChildShards).
- MergeShards refuses a shard already closed by a split or merge (moto merged it again).
  SplitShard and MergeShards also keep OpenShardCount current.

moto can enforce IAM server-wide (POST ``/moto-api/reset-auth`` with body ``0``; it is off by
default). Where its authorization differs from AWS in what we use, it is patched to authorize as
AWS does, always; the patches act only while enforcement is on, and change nothing when it is off:

- DynamoDB authorizes an operation against the table's ARN, or the index's for Query and Scan
  with IndexName (moto used "*", so a statement scoped to a table never matched).
- A DynamoDB transaction is authorized item by item, each item as its own action (PutItem,
  UpdateItem, DeleteItem, ConditionCheckItem; GetItem in TransactGetItems) on its table, and a
  batch as BatchWriteItem or BatchGetItem on each of its tables (moto checked the operation's
  own name, dynamodb:TransactWriteItems, once, against "*").
- A DynamoDB denial is DynamoDB's AccessDeniedException (HTTP 400, JSON) naming the resource;
  moto answered 403 with an XML body that botocore reads as error code "403".
- S3 HeadObject or GetObject of a missing key answers 403 AccessDenied unless the caller may
  s3:ListBucket the bucket (moto answered 404 whenever s3:GetObject was allowed). A ListBucket
  Allow conditioned on s3:prefix does not count: HeadObject supplies no prefix.
- A CloudFormation operation on one stack (DescribeStacks with a StackName, ...) is authorized
  against the stack's ARN (moto used "*", so a statement scoped to a stack never matched).
- A CloudWatch operation is authorized as ``cloudwatch:<Operation>`` (moto asked for
  ``monitoring:<Operation>``, after CloudWatch's signing name, which no policy grants), and
  PutMetricData with its namespace as ``cloudwatch:namespace``: a statement whose StringEquals on
  that key is false does not apply (moto gave conditions no request values, so an Allow
  conditioned on one namespace allowed every namespace). A denial is AccessDenied, HTTP 403, in
  the request's protocol (moto's XML body reached a CBOR client as error code "403").
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from tidemark.embedded.children import die_with_parent
from tidemark.exceptions import TidemarkError

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Serialised:
    """WSGI middleware: one request at a time (responses are fully read inside the lock).

    Lambda invocations are not serialised: a proxied function calls back into this server
    (S3, DynamoDB) while its invocation request is still open."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        if path.startswith("/2015-03-31/functions/") and path.rstrip("/").endswith("/invocations"):
            return list(self._app(environ, start_response))
        with self._lock:
            return list(self._app(environ, start_response))


def _route_lambda_invocations(proxy: str) -> None:
    """Invoke functions by POSTing the payload to ``proxy/<function name>`` instead of Docker."""
    from moto.awslambda.models import LambdaBackend

    def invoke(
        self: LambdaBackend, function_name: str, qualifier: str | None, body: Any, headers: Any, response_headers: Any
    ) -> bytes:
        name = function_name.rsplit(":function:", 1)[-1].split(":", 1)[0]
        data = body if isinstance(body, bytes) else str(body or "").encode()
        request = urllib.request.Request(f"{proxy}/{name}", data=data, method="POST")
        with urllib.request.urlopen(request, timeout=900) as reply:
            payload: bytes = reply.read()
            error = reply.headers.get("X-Amz-Function-Error")
        if error:
            response_headers["x-amz-function-error"] = error
        response_headers["Content-Length"] = str(len(payload))
        return payload

    LambdaBackend.invoke = invoke  # type: ignore[method-assign]


def _reshard_kinesis_like_kinesis() -> None:
    """Patch moto's Kinesis models so SplitShard and MergeShards behave as Kinesis does."""
    from moto.core.responses import ActionResult
    from moto.kinesis.exceptions import InvalidArgumentError
    from moto.kinesis.models import Record, Shard, Stream
    from moto.kinesis.responses import KinesisResponse
    from moto.kinesis.utils import decompose_shard_iterator

    # A child's StartingSequenceNumber: one above its parents' last sequence numbers. A shard
    # without it (one the stream was created with) keeps moto's numbering, from 1.
    start_attribute = "_tidemark_starting_sequence_number"

    def start(shard: Shard) -> int:
        return int(getattr(shard, start_attribute, 0))

    def get_max_sequence_number(self: Shard) -> int:
        # The last record's, or a child's start while it has none: so the next record is numbered
        # above the start, a closed empty child ends where it starts, and its children after that.
        return max(next(reversed(self.records), 0), start(self))

    def get_min_sequence_number(self: Shard) -> int:
        return start(self) or next(iter(self.records), 0)

    def put_record(self: Shard, partition_key: str, data: str, explicit_hash_key: str) -> str:
        # As moto's, but numbered by get_max_sequence_number: moto numbers an empty shard's first record 1.
        sequence_number = self.get_max_sequence_number() + 1
        self.records[sequence_number] = Record(partition_key, data, sequence_number, explicit_hash_key)
        return str(sequence_number)

    def reshard(stream: Stream, parents: list[Shard], apply: Callable[[], None]) -> None:
        """Run moto's split or merge with the parents' records set aside (so it neither re-puts
        nor copies them), give them back, and number the new children above the parents."""
        before = set(stream.shards)
        kept = [parent.records for parent in parents]
        empty: dict[int, Record] = {}
        for parent in parents:
            parent.records = empty
        try:
            apply()
        finally:
            for parent, records in zip(parents, kept, strict=True):
                parent.records = records
        end = max(parent.get_max_sequence_number() for parent in parents)  # their EndingSequenceNumber
        for shard_id, shard in stream.shards.items():
            if shard_id not in before:
                setattr(shard, start_attribute, end + 1)
        stream.shard_count = sum(shard.is_open for shard in stream.shards.values())

    moto_split_shard = Stream.split_shard
    moto_merge_shards = Stream.merge_shards
    moto_get_shard_for_key = Stream.get_shard_for_key
    moto_get_records = KinesisResponse.get_records

    def split_shard(self: Stream, shard_to_split: str, new_starting_hash_key: str) -> None:
        parent = self.shards[shard_to_split]
        reshard(self, [parent], lambda: moto_split_shard(self, shard_to_split, new_starting_hash_key))

    def merge_shards(self: Stream, shard_to_merge: str, adjacent_shard_to_merge: str) -> None:
        parents = [self.shards[shard_to_merge], self.shards[adjacent_shard_to_merge]]
        for parent in parents:
            if not parent.is_open:
                raise InvalidArgumentError(
                    message=f"Shard {parent.shard_id} in stream {self.stream_name} under account {self.account_id} "
                    "has already been merged or split, and thus is not eligible for merging or splitting."
                )
        reshard(self, parents, lambda: moto_merge_shards(self, shard_to_merge, adjacent_shard_to_merge))

    def get_shard_for_key(self: Stream, partition_key: str, explicit_hash_key: str) -> Shard | None:
        moto_get_shard_for_key(self, partition_key, explicit_hash_key)  # only for its argument checks
        if explicit_hash_key:
            key = int(explicit_hash_key)
        else:
            key = int(hashlib.md5(partition_key.encode("utf-8"), usedforsecurity=False).hexdigest(), 16)
        return next(
            (s for s in self.shards.values() if s.is_open and s.starting_hash <= key <= s.ending_hash),
            None,
        )

    def get_records(self: KinesisResponse) -> ActionResult:
        action = moto_get_records(self)
        body = action.result
        assert isinstance(body, dict)
        stream_name, shard_id, position = decompose_shard_iterator(body["NextShardIterator"])
        stream = self.kinesis_backend.describe_stream(self._get_param("StreamARN"), stream_name)
        shard = stream.get_shard(shard_id)
        # A closed shard takes no new records, so its end is reached once its last one is read.
        if not shard.is_open and int(position) >= next(reversed(shard.records), 0):
            body["NextShardIterator"] = None  # the serialiser omits it: null, as Kinesis sends
            body["ChildShards"] = [
                {
                    "ShardId": child.shard_id,
                    "ParentShards": [parent for parent in (child.parent, child.adjacent_parent) if parent],
                    "HashKeyRange": child.to_json()["HashKeyRange"],
                }
                for child in stream.shards.values()
                if shard.shard_id in (child.parent, child.adjacent_parent)
            ]
        return action

    Shard.get_max_sequence_number = get_max_sequence_number  # type: ignore[method-assign]
    Shard.get_min_sequence_number = get_min_sequence_number  # type: ignore[method-assign]
    Shard.put_record = put_record  # type: ignore[method-assign]
    Stream.split_shard = split_shard  # type: ignore[method-assign]
    Stream.merge_shards = merge_shards  # type: ignore[method-assign]
    Stream.get_shard_for_key = get_shard_for_key  # type: ignore[method-assign]
    KinesisResponse.get_records = get_records  # type: ignore[method-assign]


def _iam_enforced() -> bool:
    """Whether moto is enforcing IAM for the request being handled (as moto decides it)."""
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin

    return bool(ActionAuthenticatorMixin.request_count >= settings.INITIAL_NO_AUTH_ACTION_COUNT)


def _dynamodb_table_arn(handler: Any, table: str) -> str:
    """The ARN of ``table`` (a name, or already an ARN, which DynamoDB also accepts)."""
    if table.startswith("arn:"):
        return table
    return f"arn:{handler.partition}:dynamodb:{handler.region}:{handler.current_account}:table/{table}"


def _deny_dynamodb_like_dynamodb() -> None:
    """Answer a denied DynamoDB request as DynamoDB does.

    moto raised its generic AccessDenied: HTTP 403 with an XML body, which botocore (DynamoDB
    speaks JSON) reads as error code "403" with the XML as message. DynamoDB answers HTTP 400
    with ``{"__type": "...#AccessDeniedException", "message": ...}`` naming the action and the
    resource ("Error handling with DynamoDB", AccessDeniedException under HTTP status code 400:
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html).
    """
    from moto.core.exceptions import AccessDeniedError, JsonRESTError
    from moto.dynamodb.responses import DynamoHandler

    class AccessDeniedException(JsonRESTError):
        def __init__(self, message: str) -> None:
            super().__init__("com.amazonaws.dynamodb.v20120810#AccessDeniedException", message)

    moto_authorize = DynamoHandler._authenticate_and_authorize_action

    def authorize(self: DynamoHandler, iam_request_cls: type, resource: str = "*") -> None:
        try:
            moto_authorize(self, iam_request_cls, resource)
        except AccessDeniedError as denied:
            raise AccessDeniedException(f"{denied.message} on resource: {resource}") from None

    DynamoHandler._authenticate_and_authorize_action = authorize  # type: ignore[method-assign, assignment]


def _authorize_dynamodb_on_table_arns() -> None:
    """Authorize a DynamoDB operation against the ARN of the table it names.

    moto authorized every DynamoDB request against resource "*", so a statement scoped to a
    table (``arn:aws:dynamodb:us-east-1:123456789012:table/Ledger``) never matched: everything it
    granted was denied, and only ``"Resource": "*"`` worked. DynamoDB authorizes item and table
    actions on the table, ``arn:${Partition}:dynamodb:${Region}:${Account}:table/${TableName}``,
    and Query and Scan of an index on ``.../table/${TableName}/index/${IndexName}`` (Service
    Authorization Reference, "Actions, resources, and condition keys for Amazon DynamoDB":
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html).
    moto's ``call_action`` asks a handler's ``_determine_resource`` for the resource (SQS and
    IAM define one); this gives DynamoDB one. An operation naming a ResourceArn or TableArn
    (tagging, exports) is authorized on it; one naming no table (ListTables) keeps "*".
    Operations over several tables are the business of ``_authorize_dynamodb_items_like_aws``.
    """
    from moto.dynamodb.responses import DynamoHandler

    def determine_resource(self: DynamoHandler) -> str:
        params = getattr(self, "params", None)
        if not isinstance(params, dict):
            return "*"
        table = params.get("TableName")
        if isinstance(table, str) and table:
            arn = _dynamodb_table_arn(self, table)
            index = params.get("IndexName")
            if self._get_action() in ("Query", "Scan") and isinstance(index, str) and index:
                return f"{arn}/index/{index}"
            return arn
        for name in ("ResourceArn", "TableArn"):
            if isinstance(params.get(name), str) and params[name]:
                return str(params[name])
        return "*"

    # setattr: DynamoHandler has no _determine_resource of its own to replace.
    setattr(DynamoHandler, "_determine_resource", determine_resource)  # noqa: B010


def _authorize_dynamodb_items_like_aws() -> None:
    """Authorize DynamoDB transactions item by item and batches table by table, as DynamoDB does.

    moto checked the operation's own name once, against "*": ``dynamodb:TransactWriteItems``,
    which a policy granting the item actions lacks (denied), and which a policy granting only it
    has (allowed, whatever the items do). DynamoDB authorizes each item of a transaction as the
    action it performs, on the item's table: Put as PutItem, Update as UpdateItem, Delete as
    DeleteItem, ConditionCheck as ConditionCheckItem, and TransactGetItems' Get as GetItem ("Using
    IAM with DynamoDB transactions": "Permissions for Put, Update, Delete, and Get actions are
    governed by the permissions used for the underlying PutItem, UpdateItem, DeleteItem, and
    GetItem operations. For the ConditionCheck action, you can use the dynamodb:ConditionCheckItem
    permission",
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html).
    A batch is not split that way: BatchWriteItem authorizes ``dynamodb:BatchWriteItem`` and
    BatchGetItem ``dynamodb:BatchGetItem``, on each table it names (Service Authorization
    Reference, "API operations defined by Amazon DynamoDB":
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_dynamodb.html).
    Every check must pass; one denial is an AccessDeniedException for the whole request, and
    nothing is written. While IAM is not enforced, moto's single check (which counts the
    request towards reset-auth's allowance) runs unchanged.
    """
    from moto.dynamodb.responses import DynamoHandler
    from moto.iam.access_control import IAMRequest

    item_actions = {
        "TransactWriteItems": {
            "Put": "PutItem",
            "Update": "UpdateItem",
            "Delete": "DeleteItem",
            "ConditionCheck": "ConditionCheckItem",
        },
        "TransactGetItems": {"Get": "GetItem"},
    }
    batches = ("BatchWriteItem", "BatchGetItem")

    def checks(handler: DynamoHandler) -> list[tuple[str, str]]:
        """(action, resource) for every item or table of a transaction or batch; [] otherwise."""
        params = getattr(handler, "params", None)
        operation = handler._get_action()
        found: list[tuple[str, str]] = []
        if not isinstance(params, dict):
            return found
        if operation in item_actions:
            for item in params.get("TransactItems") or []:
                for kind, request in item.items():
                    action = item_actions[operation].get(kind)
                    if action and isinstance(request, dict) and request.get("TableName"):
                        found.append((action, _dynamodb_table_arn(handler, str(request["TableName"]))))
        elif operation in batches:
            found = [
                (operation, _dynamodb_table_arn(handler, str(table))) for table in params.get("RequestItems") or {}
            ]
        return list(dict.fromkeys(found))

    def request_as(action: str) -> Callable[..., IAMRequest]:
        """moto's IAMRequest, for ``action`` rather than the operation's name."""

        def make(**kwargs: Any) -> IAMRequest:
            return IAMRequest(**{**kwargs, "action": action})

        return make

    moto_authorize = DynamoHandler._authenticate_and_authorize_normal_action

    def authorize(self: DynamoHandler, resource: str = "*") -> None:
        items = checks(self) if _iam_enforced() else []
        if not items:
            moto_authorize(self, resource)
            return
        for action, arn in items:
            self._authenticate_and_authorize_action(request_as(action), arn)  # type: ignore[arg-type]

    DynamoHandler._authenticate_and_authorize_normal_action = authorize  # type: ignore[method-assign, assignment]


def _answer_missing_s3_keys_like_aws() -> None:
    """Answer HeadObject and GetObject of a missing key 403 unless the caller may list the bucket.

    moto answered 404 (NoSuchKey) whenever s3:GetObject was allowed. S3 answers 404 only to a
    caller that also has s3:ListBucket on the bucket, and 403 AccessDenied to any other (HeadObject
    API reference, "Permissions": "If the object you request doesn't exist, the error that Amazon
    S3 returns depends on whether you also have the s3:ListBucket permission",
    https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadObject.html; GetObject says the same,
    https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html). So once moto has allowed
    s3:GetObject on a key the bucket does not hold (no versionId asked for; a delete marker
    counts as missing, as S3 treats it), the caller's policies are asked for s3:ListBucket on
    ``arn:aws:s3:::{bucket}``.

    Conditions: moto evaluates none but StringEquals, and supplies no request values to those
    either, so it would count a ListBucket Allow conditioned on ``"StringLike": {"s3:prefix":
    ...}`` as unconditional. S3 supplies s3:prefix only to a listing, not to this check, so on AWS
    that condition is false and the statement does not apply. Here an Allow statement whose
    Condition names s3:prefix (any operator) does not count. A Deny statement that names it is
    kept, its condition ignored as moto ignores it (so it applies): on AWS a negated operator
    (StringNotLike) on the absent key makes such a Deny apply, and of the two possible mistakes
    this keeps the one that answers 403 where AWS might answer 404, never 404 where AWS answers
    403 (code that treats 404 as "absent" must not pass here and fail on AWS).
    """
    from moto.iam.access_control import IAMPolicy, PermissionResult, S3IAMRequest
    from moto.s3.exceptions import S3AccessDeniedError, S3ClientError
    from moto.s3.models import FakeKey
    from moto.s3.responses import S3Response

    def names_prefix(statement: Any) -> bool:
        conditions = statement.get("Condition") if isinstance(statement, dict) else None
        return isinstance(conditions, dict) and any(
            isinstance(keys, dict) and any(str(key).lower() == "s3:prefix" for key in keys)
            for keys in conditions.values()
        )

    def may_list(request: S3IAMRequest, bucket_arn: str) -> bool:
        permitted = False
        for policy in request._access_key.collect_policies():
            iam_policy = IAMPolicy(policy)
            statements = iam_policy._policy_json["Statement"]
            statements = statements if isinstance(statements, list) else [statements]
            kept = [s for s in statements if not (s.get("Effect") == "Allow" and names_prefix(s))]
            iam_policy._policy_json = {**iam_policy._policy_json, "Statement": kept}
            result = iam_policy.is_action_permitted("s3:ListBucket", bucket_arn)
            if result == PermissionResult.DENIED:
                return False
            permitted = permitted or result == PermissionResult.PERMITTED
        return permitted

    moto_authorize = S3Response._authenticate_and_authorize_s3_action

    def authorize(self: S3Response, bucket_name: str | None = None, key_name: str | None = None) -> None:
        enforced = _iam_enforced()
        moto_authorize(self, bucket_name=bucket_name, key_name=key_name)
        if not (enforced and bucket_name and key_name and self.method in ("GET", "HEAD")):
            return
        if self.data.get("Action") != "GetObject" or "versionId" in self.querystring:
            return
        try:
            bucket = self.backend.get_bucket(bucket_name)
        except S3ClientError:
            return  # no such bucket: moto's answer stands
        if isinstance(bucket.keys.get(key_name), FakeKey):
            return
        request = S3IAMRequest(
            account_id=self.current_account,
            method=self.method,
            path=self.raw_path,
            data=self.data,
            body=self.raw_body,
            headers=self.headers,
            action="ListBucket",
        )
        if not may_list(request, f"arn:{self.partition}:s3:::{bucket_name}"):
            raise S3AccessDeniedError()

    S3Response._authenticate_and_authorize_s3_action = authorize  # type: ignore[method-assign, assignment]


def _authorize_cloudformation_on_stack_arns() -> None:
    """Authorize a CloudFormation operation that names a stack against the stack's ARN.

    moto authorized every CloudFormation request against resource "*", so a statement scoped to a
    stack (``arn:aws:cloudformation:us-east-1:123456789012:stack/Tidemark/*``, what the operator
    policy grants DescribeStacks on) never matched. CloudFormation authorizes DescribeStacks and
    the other operations on one stack on
    ``arn:${Partition}:cloudformation:${Region}:${Account}:stack/${StackName}/${Id}`` (Service
    Authorization Reference, "Actions, resources, and condition keys for AWS CloudFormation":
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_awscloudformation.html).
    A ``StackName`` that is an ARN is that ARN; a name is the ARN of the live stack of that name,
    or ``.../stack/<name>/*`` when there is none (CreateStack, a stack that does not exist). An
    operation naming no stack (DescribeStacks of every stack, ListStacks) keeps "*", as in AWS.
    """
    from moto.cloudformation.responses import CloudFormationResponse

    def determine_resource(self: CloudFormationResponse) -> str:
        try:
            name = self._get_param("StackName")
        except Exception:  # noqa: BLE001 -- a request moto cannot read: its own answer stands
            return "*"
        if not isinstance(name, str) or not name:
            return "*"
        if name.startswith("arn:"):
            return name
        for stack in self.cloudformation_backend.stacks.values():
            if stack.name == name:
                return str(stack.stack_id)
        return f"arn:{self.partition}:cloudformation:{self.region}:{self.current_account}:stack/{name}/*"

    # setattr: CloudFormationResponse has no _determine_resource of its own to replace.
    setattr(CloudFormationResponse, "_determine_resource", determine_resource)  # noqa: B010


def _authorize_cloudwatch_like_aws() -> None:
    """Authorize CloudWatch requests as the ``cloudwatch`` service, PutMetricData with its namespace.

    moto names the action after the request's credential scope, which for CloudWatch is its
    signing name, ``monitoring``: it asked the caller's policies for ``monitoring:PutMetricData``,
    which none grants, so every call of a role was denied. CloudWatch's actions are
    ``cloudwatch:<Operation>`` (Service Authorization Reference, "Actions, resources, and condition
    keys for Amazon CloudWatch":
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html).

    Conditions: moto supplies no request values to an identity policy's conditions, so an Allow of
    PutMetricData conditioned on ``"StringEquals": {"cloudwatch:namespace": "Tidemark"}`` allowed
    any namespace. CloudWatch gives PutMetricData's namespace as ``cloudwatch:namespace`` ("Using
    condition keys to limit access to CloudWatch namespaces":
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/iam-cw-condition-keys-namespace.html).
    Here a statement whose condition names that key is evaluated with the request's namespace
    (moto compares StringEquals only; another operator on the key stays unevaluated, as moto leaves
    it) and, when false, does not apply -- Allow or Deny, as in AWS (moto would have answered a
    false condition with a denial whatever the statement's effect). Other keys, and operations
    without a namespace, are left as moto leaves them.

    A denial is answered as AccessDenied, HTTP 403, serialized in the request's protocol: moto's
    XML body reached botocore's CBOR client (CloudWatch's first protocol) as error code "403".
    While IAM is not enforced, moto's own handling (which counts the request towards reset-auth's
    allowance) runs unchanged.
    """
    from moto.cloudwatch.responses import CloudWatchResponse
    from moto.core.exceptions import AccessDeniedError, ServiceException
    from moto.core.responses import ActionResult
    from moto.iam.access_control import IAMPolicy, IAMPolicyStatement, IAMRequest, PermissionResult

    namespace_key = "cloudwatch:namespace"

    class Denied(Exception):
        """Raised past moto's handling of an HTTP error, to be answered in the request's protocol."""

    class AccessDenied(ServiceException):
        code = "AccessDenied"

    def namespace_keys(statement: Any) -> set[str]:
        """How the statement's conditions spell ``cloudwatch:namespace`` (keys are case-insensitive)."""
        conditions = statement.get("Condition") if isinstance(statement, dict) else None
        if not isinstance(conditions, dict):
            return set()
        return {
            str(key)
            for keys in conditions.values()
            if isinstance(keys, dict)
            for key in keys
            if str(key).lower() == namespace_key
        }

    def applies(statement: Any, namespace: str | None) -> bool:
        """False for a statement whose condition on the namespace is false for this request."""
        keys = namespace_keys(statement)
        if namespace is None or not keys:
            return True  # as moto evaluates it
        return bool(IAMPolicyStatement(statement)._check_conditions(dict.fromkeys(keys, namespace)))

    class CloudWatchRequest(IAMRequest):
        namespace: str | None = None

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._action = "cloudwatch:" + self._action.split(":", 1)[1]

        def check_action_permitted(self, resource: str) -> None:
            permitted = False
            for policy in self._access_key.collect_policies():
                iam_policy = IAMPolicy(policy)
                statements = iam_policy._policy_json["Statement"]
                statements = statements if isinstance(statements, list) else [statements]
                applying = [statement for statement in statements if applies(statement, self.namespace)]
                iam_policy._policy_json = {**iam_policy._policy_json, "Statement": applying}
                result = iam_policy.is_action_permitted(self._action, resource)
                if result == PermissionResult.DENIED:
                    self._raise_access_denied()
                permitted = permitted or result == PermissionResult.PERMITTED
            if not permitted:
                self._raise_access_denied()

    def authorize(self: CloudWatchResponse, resource: str = "*") -> None:
        namespace = None
        if self._get_action() == "PutMetricData":
            found = self._get_param("Namespace")
            namespace = found if isinstance(found, str) else None

        def request(**kwargs: Any) -> CloudWatchRequest:
            made = CloudWatchRequest(**kwargs)
            made.namespace = namespace
            return made

        try:
            self._authenticate_and_authorize_action(request, resource)  # type: ignore[arg-type]
        except AccessDeniedError as denied:
            raise Denied(denied.message) from None

    moto_call = CloudWatchResponse.call_action

    def call_action(self: CloudWatchResponse) -> Any:
        try:
            return moto_call(self)
        except Denied as denied:
            _status, headers, body = self.serialized(ActionResult(AccessDenied(str(denied))))
            headers["status"] = "403"
            return 403, headers, body

    CloudWatchResponse._authenticate_and_authorize_normal_action = authorize  # type: ignore[method-assign, assignment]
    CloudWatchResponse.call_action = call_action  # type: ignore[method-assign, assignment]


def _execute_state_machines() -> None:
    from moto.core.config import default_user_config

    default_user_config["stepfunctions"] = {"execute_state_machine": True}


def serve(host: str, port: int, *, lambda_proxy: str | None = None, execute_state_machines: bool = False) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    _reshard_kinesis_like_kinesis()
    _deny_dynamodb_like_dynamodb()
    _authorize_dynamodb_on_table_arns()
    _authorize_dynamodb_items_like_aws()
    _answer_missing_s3_keys_like_aws()
    _authorize_cloudformation_on_stack_arns()
    _authorize_cloudwatch_like_aws()
    if lambda_proxy:
        _route_lambda_invocations(lambda_proxy)
    if execute_state_machines:
        _execute_state_machines()
    app = _Serialised(DomainDispatcherApplication(create_backend_app))
    server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)
    # moto calls itself back (Step Functions -> Lambda) on this port: the one actually bound.
    os.environ["MOTO_PORT"] = str(server.server_port)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"http://{host}:{server.server_port}", flush=True)
    server.serve_forever()


@contextmanager
def moto_server(
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout: float = 60.0,
    *,
    lambda_proxy: str | None = None,
    execute_state_machines: bool = False,
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """Start the server in a child process (on a free port by default), yield its endpoint,
    always stop it. ``command`` replaces this module's entry point (a benchmark's instrumented
    server); it gets the same arguments and must print the endpoint first, as ``serve`` does."""
    extra = ["--lambda-proxy", lambda_proxy] if lambda_proxy else []
    extra += ["--execute-state-machines"] if execute_state_machines else []
    entry = list(command) if command else [sys.executable, "-m", "tidemark.embedded.moto_server"]
    process = subprocess.Popen(
        [*entry, "--host", host, "--port", str(port), *extra],
        env=None if env is None else {**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=die_with_parent(),
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip()
        if not endpoint.startswith("http://"):
            raise TidemarkError(f"moto server failed to start on {host}:{port} (exit code {process.wait()})")
        # Keep draining stdout so a chatty server can never block on a full pipe.
        threading.Thread(target=process.stdout.read, daemon=True).start()
        deadline = time.monotonic() + startup_timeout
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise TidemarkError(f"moto server at {endpoint} did not answer") from None
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    parser.add_argument("--lambda-proxy", help="route Lambda invocations to URL/<function name> (HTTP POST)")
    parser.add_argument("--execute-state-machines", action="store_true", help="run Step Functions executions")
    args = parser.parse_args(argv)
    serve(args.host, args.port, lambda_proxy=args.lambda_proxy, execute_state_machines=args.execute_state_machines)


if __name__ == "__main__":
    main()
