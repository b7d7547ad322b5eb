"""Running a function's real code under the IAM policy the synthesized template grants its role.

A simulator is not AWS: moto evaluates no IAM unless asked, and then only roughly. This fixture
closes that gap for the archive's own functions:

1. **The template's grants.** The stack (or a construct in a bare stack) is synthesized; each
   function role's statements are taken from the template (the role's inline policies and every
   ``AWS::IAM::Policy`` attached to it), and their ``Ref``/``Fn::GetAtt``/``Fn::Join``/``Fn::Sub``
   are resolved to the names of this test's bucket, tables and key (:class:`TemplateGrants`).
2. **A moto server of its own, with IAM enforced.** moto's switch is server-wide, so never the
   session's server. Setup runs before the switch; afterwards an admin user (``Allow * *``) sets
   up and checks, and each role is assumed with STS (:class:`IamServer`). The server is
   ``tidemark.embedded.moto_server``, whose patches make moto authorize like AWS where our code
   depends on it (table ARNs, transactions per item, 403 for a missing key without ListBucket,
   CloudWatch's ``cloudwatch:`` actions and PutMetricData's ``cloudwatch:namespace``).
3. **What each role used.** Every client made for a role records its calls, translated to the IAM
   actions AWS authorizes (:func:`iam_actions`); a test compares them with the role's grants, so a
   grant no code path uses is reported against :data:`ALLOWED_UNUSED` and its reasons.

4. **What moto cannot evaluate, evaluated here.** ``dynamodb:LeadingKeys`` (every ledger and
   aggregates grant carries one): moto ignores a ``ForAllValues:StringLike`` condition, so every
   DynamoDB call a role's clients make is checked in the client, before it is sent, by
   :class:`LeadingKeysEvaluator` -- a stand-in for AWS's evaluation of that condition key, not
   AWS itself -- against the role's statements: the items the call reaches (:func:`item_requests`)
   are its leading keys, a request no statement allows is refused as AWS refuses it (a 400
   ``AccessDeniedException``), and every request is recorded (``RoleSession.requests``), so a
   test can also show each pattern used (:func:`unused_leading_keys`).

What moto cannot evaluate, and is asserted on the template instead (``CANNOT_EVALUATE``).
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, cast

import boto3
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.config import Config

from tests.conftest import Archive, make_archive
from tidemark.config import TidemarkConfig
from tidemark.faults import CrashPoints
from tidemark.ledger.dynamodb import pk_sk_table_schema
from tidemark.runtime import Runtime

ACCOUNT = "123456789012"
REGION = "us-east-1"
PARTITION = "aws"

#: Grants the template gives a role that the suite's code paths do not exercise, each with its
#: reason: AWS services use them on the function's behalf, or a library does on a failure the
#: lifecycle does not provoke. (action, resource, reason), with ``*`` wildcards.
ALLOWED_UNUSED: tuple[tuple[str, str, str], ...] = (
    ("logs:*", "*", "Lambda writes the function's logs to its log group"),
    ("ec2:*", "*", "Lambda manages a VPC function's network interfaces; the MSK mapping describes the VPC"),
    ("elasticfilesystem:*", "*", "Lambda mounts the EFS access point (staging is a local directory here)"),
    ("xray:*", "*", "the Lambda runtime's X-Ray daemon sends the traces"),
    ("kms:*", "*", "S3 uses the archive key for SSE-KMS on the caller's behalf (moto checks no KMS use)"),
    ("kafka-cluster:*", "*", "the event source mapping reads the topic as the function's role (IAM auth)"),
    ("kafka:*", "*", "the event source mapping finds the cluster's brokers"),
    ("kinesis:*", "*", "the event source mapping reads the shards (the sweeper's ListShards is ours)"),
    ("mq:*", "*", "the event source mapping finds the Amazon MQ broker"),
    ("secretsmanager:*", "*", "the event source mapping reads the broker's or registry's credentials"),
    ("glue:*", "*", "the event source mapping reads the Glue schema registry"),
    ("s3:*", "*/aws/lambda/*", "the event source mapping writes a batch it gave up on (its on-failure destination)"),
    ("s3:ListBucket", "arn:aws:s3:::*", "the event source mapping checks its on-failure destination bucket"),
    (
        "s3:AbortMultipartUpload",
        "*",
        "boto3's transfer manager aborts a multipart upload whose part failed "
        "(test_a_multipart_upload_under_the_archivers_role provokes it)",
    ),
)

#: Conditions in the template that moto evaluates not at all (only ``StringEquals`` is compared,
#: and then without request values) and that tests assert on the template instead.
CANNOT_EVALUATE = (
    "StringLike s3:prefix on s3:ListBucket (ListObjectsV2 is allowed here whatever its prefix)",
    "StringEquals elasticfilesystem:AccessPointArn (no EFS here)",
    "the EFS file system policy (no mount without an access point, TLS only, no root access)",
    "bucket policy conditions: aws:SecureTransport asserted on the template; s3:if-none-match,"
    " s3:ObjectCreationOperation and aws:PrincipalArn of the overwrite and delete denies evaluated per request"
    " by test_bucket_policy_writes.py's evaluator (a stand-in for AWS's)",
    "KMS key policies and grants (moto does not authorize KMS use by S3)",
    "ForAllValues:StringLike dynamodb:LeadingKeys: asserted on the template, and evaluated in the role's"
    " clients by LeadingKeysEvaluator (a stand-in for AWS's evaluation; moto ignores the condition)",
)

_S3_ACTIONS = {
    "HeadObject": "s3:GetObject",
    "GetObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "ListMultipartUploads": "s3:ListBucketMultipartUploads",
    "DeleteObject": "s3:DeleteObject",
}
#: DynamoDB authorizes each item of a transaction as its own action (Using IAM with DynamoDB
#: transactions: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html)
_TRANSACT_ITEMS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


@dataclass(frozen=True, order=True)
class Use:
    """One authorization AWS makes for a call: an action on a resource."""

    action: str
    resource: str


def iam_actions(service: str, operation: str, params: Mapping[str, Any]) -> list[Use]:
    """The IAM actions and resources AWS authorizes for one API call."""
    if service == "s3":
        bucket, key = params.get("Bucket", ""), params.get("Key")
        action = _S3_ACTIONS.get(operation, f"s3:{operation}")
        resource = f"arn:{PARTITION}:s3:::{bucket}/{key}" if key is not None else f"arn:{PARTITION}:s3:::{bucket}"
        if action == "s3:ListBucket" and params.get("Prefix"):
            resource += f"?prefix={params['Prefix']}"
        return [Use(action, resource)]
    if service == "dynamodb":
        table = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/"
        if operation == "TransactWriteItems":
            return [
                Use(f"dynamodb:{_TRANSACT_ITEMS[kind]}", table + body["TableName"])
                for item in params["TransactItems"]
                for kind, body in item.items()
            ]
        if operation == "BatchWriteItem":
            return [Use("dynamodb:BatchWriteItem", table + name) for name in params["RequestItems"]]
        name = params.get("TableName", "*")
        if params.get("IndexName"):
            name += f"/index/{params['IndexName']}"
        return [Use(f"dynamodb:{operation}", table + name)]
    if service == "cloudformation" and params.get("StackName"):
        # one stack, by ARN or by name (its id, the ARN's last part, is the stack's own)
        name = str(params["StackName"])
        stack = name if name.startswith("arn:") else f"arn:{PARTITION}:cloudformation:{REGION}:{ACCOUNT}:stack/{name}/*"
        return [Use(f"cloudformation:{operation}", stack)]
    return [Use(f"{service}:{operation}", "*")]


class TemplateGrants:
    """The statements each role of a synthesized template holds, resolved to physical names.

    ``physical`` maps a logical id to its ``(Ref, Arn)``; a logical id it lacks resolves to a name
    that matches nothing, so a grant on a resource this test did not create never allows a call."""

    def __init__(self, template: Mapping[str, Any], physical: Mapping[str, tuple[str, str]]) -> None:
        self.resources: Mapping[str, Any] = template["Resources"]
        self.physical = dict(physical)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((name, arg),) = value.items()
            if name == "Ref":
                return self._ref(arg)
            if name == "Fn::GetAtt":
                logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self._attribute(logical, attribute)
            if name == "Fn::Join":
                separator, parts = arg
                return separator.join(str(self.resolve(part)) for part in parts)
            if name == "Fn::Sub":
                text = arg if isinstance(arg, str) else arg[0]
                return re.sub(r"\$\{([^}]+)\}", lambda m: str(self._sub(m.group(1))), text)
        return {key: self.resolve(item) for key, item in value.items()}

    def _ref(self, logical: str) -> str:
        pseudo = {
            "AWS::Partition": PARTITION,
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::URLSuffix": "amazonaws.com",
        }
        if logical in pseudo:
            return pseudo[logical]
        return self.physical.get(logical, (f"unresolved-{logical}", ""))[0]

    def _attribute(self, logical: str, attribute: str) -> str:
        if attribute == "Arn" and logical in self.physical:
            return self.physical[logical][1]
        return f"arn:{PARTITION}:unresolved:{REGION}:{ACCOUNT}:{logical}/{attribute}"

    def _sub(self, name: str) -> str:
        logical, _, attribute = name.partition(".")
        return self._attribute(logical, attribute) if attribute else self._ref(logical)

    def role_of(self, function_logical_id: str) -> str:
        role = self.resources[function_logical_id]["Properties"]["Role"]
        return str(role["Fn::GetAtt"][0])

    def statements(self, role_logical_id: str) -> list[dict[str, Any]]:
        """Every statement of the role's inline policies and attached ``AWS::IAM::Policy``s."""
        found: list[dict[str, Any]] = []
        role = self.resources[role_logical_id]["Properties"]
        for policy in role.get("Policies", []):
            found.extend(policy["PolicyDocument"]["Statement"])
        for resource in self.resources.values():
            if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role_logical_id} in resource["Properties"]["Roles"]:
                found.extend(resource["Properties"]["PolicyDocument"]["Statement"])
        return [self.resolve(statement) for statement in found]

    def environment(self, function_logical_id: str) -> dict[str, str]:
        variables = self.resources[function_logical_id]["Properties"]["Environment"]["Variables"]
        return {name: str(self.resolve(value)) for name, value in variables.items()}


def granted(statements: list[dict[str, Any]]) -> set[Use]:
    """The (action, resource) pairs the Allow statements name, as written (wildcards kept)."""
    pairs: set[Use] = set()
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement.get("Resource", "*")
        for action in actions:
            for resource in resources if isinstance(resources, list) else [resources]:
                pairs.add(Use(action, resource))
    return pairs


def _matches(pattern: str, value: str) -> bool:
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), value) is not None


def covers(grant: Use, use: Use) -> bool:
    """Does the grant allow the use (wildcards in the grant's action and resource)?"""
    resource = use.resource.split("?prefix=", 1)[0]
    return _matches(grant.action, use.action) and _matches(grant.resource, resource)


def unused_grants(grants: set[Use], uses: set[Use]) -> set[Use]:
    """The grants no recorded use needed."""
    return {grant for grant in grants if not any(covers(grant, use) for use in uses)}


def allowed_reason(grant: Use) -> str | None:
    """Why a grant the code paths did not use is there (:data:`ALLOWED_UNUSED`), or ``None``."""
    return next(
        (
            reason
            for action, resource, reason in ALLOWED_UNUSED
            if _matches(action, grant.action) and _matches(resource, grant.resource)
        ),
        None,
    )


# --- dynamodb:LeadingKeys, evaluated as AWS would ----------------------------------------------

#: the partition key of every Tidemark table (the ledger's and the aggregates', ``pk_sk_table_schema``)
(HASH_KEY,) = [key["AttributeName"] for key in pk_sk_table_schema("any")["KeySchema"] if key["KeyType"] == "HASH"]
LEADING_KEYS = "dynamodb:LeadingKeys"
#: the condition operators :class:`LeadingKeysEvaluator` evaluates on ``dynamodb:LeadingKeys``
_SET_OPERATORS = {
    "ForAllValues:StringLike",
    "ForAllValues:StringEquals",
    "ForAnyValue:StringLike",
    "ForAnyValue:StringEquals",
}


class CannotEvaluate(Exception):
    """A request or a statement the evaluator does not know how to judge: a test error, never an
    answer either way (an index's keys, a condition on another key, a policy variable)."""


@dataclass(frozen=True, order=True)
class ItemRequest:
    """One authorization DynamoDB makes for a call: an action on a table, with the partition keys
    (``dynamodb:LeadingKeys``) of the items it reaches -- none for a Scan."""

    action: str
    resource: str
    leading_keys: tuple[str, ...]


def _hash_key_value(key: Mapping[str, Any], where: str) -> str:
    value = key.get(HASH_KEY)
    if not isinstance(value, Mapping) or not isinstance(value.get("S"), str):
        raise CannotEvaluate(f"{where}: no string {HASH_KEY!r} in {dict(key)!r}")
    return str(value["S"])


def _query_partition_key(params: Mapping[str, Any]) -> str:
    """The partition key a Query names: the equality on the hash key in its key condition."""
    if params.get("IndexName"):
        # a query of an index reaches the index's partition key, which LeadingKeys then names
        raise CannotEvaluate(f"Query of index {params['IndexName']}: its leading keys are the index's (none here)")
    if "KeyConditions" in params:  # the legacy form
        condition = params["KeyConditions"].get(HASH_KEY, {})
        (value,) = condition.get("AttributeValueList", [None])
        return _hash_key_value({HASH_KEY: value}, "Query KeyConditions")
    expression = str(params.get("KeyConditionExpression", ""))
    names = params.get("ExpressionAttributeNames", {})
    values = params.get("ExpressionAttributeValues", {})
    found = []
    for left, right in re.findall(r"([#:]?\w+)\s*=\s*([#:]?\w+)", expression):
        name, placeholder = (left, right) if right.startswith(":") else (right, left)
        if names.get(name, name) == HASH_KEY and placeholder.startswith(":"):
            found.append(_hash_key_value({HASH_KEY: values.get(placeholder)}, f"Query {expression!r}"))
    if len(found) != 1:
        raise CannotEvaluate(f"Query {expression!r}: no single equality on {HASH_KEY!r}")
    return found[0]


def item_requests(operation: str, params: Mapping[str, Any]) -> list[ItemRequest]:
    """The authorizations DynamoDB makes for one call (wire-format ``params``, typed values), each
    with its leading keys: a transaction's items one by one, as their own actions (Using IAM with
    DynamoDB transactions); a batch per table, with every item's key; a Query its partition key;
    a Scan none."""
    table = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/"
    if operation in ("GetItem", "UpdateItem", "DeleteItem"):
        key = _hash_key_value(params.get("Key", {}), operation)
        return [ItemRequest(f"dynamodb:{operation}", table + params["TableName"], (key,))]
    if operation == "PutItem":
        key = _hash_key_value(params.get("Item", {}), operation)
        return [ItemRequest("dynamodb:PutItem", table + params["TableName"], (key,))]
    if operation == "Query":
        return [ItemRequest("dynamodb:Query", table + params["TableName"], (_query_partition_key(params),))]
    if operation == "TransactWriteItems":
        requests = []
        for item in params["TransactItems"]:
            ((kind, body),) = item.items()
            action = _TRANSACT_ITEMS[kind]
            key = _hash_key_value(body["Item"] if kind == "Put" else body["Key"], f"TransactWriteItems {kind}")
            requests.append(ItemRequest(f"dynamodb:{action}", table + body["TableName"], (key,)))
        return requests
    if operation == "TransactGetItems":
        return [
            ItemRequest(
                "dynamodb:GetItem",
                table + item["Get"]["TableName"],
                (_hash_key_value(item["Get"]["Key"], "TransactGetItems"),),
            )
            for item in params["TransactItems"]
        ]
    if operation == "BatchWriteItem":
        requests = []
        for name, writes in params["RequestItems"].items():
            keys = [
                _hash_key_value(
                    write["PutRequest"]["Item"] if "PutRequest" in write else write["DeleteRequest"]["Key"], operation
                )
                for write in writes
            ]
            requests.append(ItemRequest("dynamodb:BatchWriteItem", table + name, tuple(keys)))
        return requests
    if operation == "BatchGetItem":
        return [
            ItemRequest(
                "dynamodb:BatchGetItem",
                table + name,
                tuple(_hash_key_value(key, operation) for key in reads["Keys"]),
            )
            for name, reads in params["RequestItems"].items()
        ]
    # Scan, and the calls that name no item (DescribeTable, ...): no leading keys at all
    return [ItemRequest(f"dynamodb:{operation}", table + str(params.get("TableName", "*")), ())]


def _like(pattern: str, value: str) -> bool:
    """IAM's ``StringLike``: ``*`` any run of characters, ``?`` any one, case-sensitive."""
    if "${" in pattern:
        raise CannotEvaluate(f"policy variable in {pattern!r}")
    translated = "".join(".*" if char == "*" else "." if char == "?" else re.escape(char) for char in pattern)
    return re.fullmatch(translated, value, flags=re.DOTALL) is not None


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


class LeadingKeysEvaluator:
    """Stands in for AWS's evaluation of a role's identity policy on DynamoDB requests, for what
    moto does not evaluate: the ``dynamodb:LeadingKeys`` condition. Not AWS: it knows the
    statements' ``Action``, ``Resource`` (with ``*`` wildcards), ``Effect`` and the ``ForAllValues``
    and ``ForAnyValue`` forms of ``StringLike`` and ``StringEquals`` on ``dynamodb:LeadingKeys``,
    and refuses to judge (:class:`CannotEvaluate`) a statement that applies to a request with any
    other condition, ``NotAction`` or ``NotResource``.

    As in AWS: a request is allowed when an Allow statement applies to it and none of the Deny
    statements does; ``ForAllValues`` is true of a request with no leading keys (a Scan), so a
    Scan granted with such a condition reads every item; ``ForAnyValue`` is false of it."""

    def __init__(self, statements: Sequence[Mapping[str, Any]]) -> None:
        self.statements = [statement for statement in statements if self._dynamodb(statement)]

    @staticmethod
    def _dynamodb(statement: Mapping[str, Any]) -> bool:
        if "NotAction" in statement or "NotResource" in statement:
            raise CannotEvaluate(f"NotAction/NotResource in {dict(statement)!r}")
        return any(_matches(action.split(":", 1)[0], "dynamodb") for action in _listed(statement["Action"]))

    def applies(self, statement: Mapping[str, Any], request: ItemRequest) -> bool:
        """Do the statement's action, resource and conditions all hold for the request?"""
        if not any(_matches(action, request.action) for action in _listed(statement["Action"])):
            return False
        if not any(_matches(resource, request.resource) for resource in _listed(statement.get("Resource", "*"))):
            return False
        for operator, keys in statement.get("Condition", {}).items():
            for key, patterns in keys.items():
                if key != LEADING_KEYS or operator not in _SET_OPERATORS:
                    raise CannotEvaluate(f"condition {operator} {key} on {request.action}")
                if not self._holds(operator, _listed(patterns), request.leading_keys):
                    return False
        return True

    @staticmethod
    def _holds(operator: str, patterns: list[str], values: tuple[str, ...]) -> bool:
        def one(value: str) -> bool:
            if operator.endswith("StringLike"):
                return any(_like(pattern, value) for pattern in patterns)
            return value in patterns

        if operator.startswith("ForAllValues:"):
            return all(one(value) for value in values)  # vacuously true without keys
        return any(one(value) for value in values)

    def allows(self, request: ItemRequest) -> bool:
        deny = any(s.get("Effect") == "Deny" and self.applies(s, request) for s in self.statements)
        return not deny and any(s.get("Effect") == "Allow" and self.applies(s, request) for s in self.statements)


def leading_keys_of(statement: Mapping[str, Any]) -> list[str]:
    """The ``dynamodb:LeadingKeys`` patterns of a statement's condition (any operator), or []."""
    return [
        pattern
        for keys in statement.get("Condition", {}).values()
        for key, patterns in keys.items()
        if key == LEADING_KEYS
        for pattern in _listed(patterns)
    ]


def unused_leading_keys(
    statements: Sequence[Mapping[str, Any]], requests: Iterable[ItemRequest]
) -> set[tuple[tuple[str, ...], str]]:
    """The (actions, pattern) pairs of the Allow statements' LeadingKeys no allowed request used:
    a pattern is used when a request the statement applies to has a leading key it matches."""
    evaluator = LeadingKeysEvaluator(statements)
    made = [request for request in requests if evaluator.allows(request)]
    unused = set()
    for statement in evaluator.statements:
        if statement.get("Effect") != "Allow":
            continue
        applying = [request for request in made if evaluator.applies(statement, request)]
        for pattern in leading_keys_of(statement):
            if not any(_like(pattern, key) for request in applying for key in request.leading_keys):
                unused.add((tuple(_listed(statement["Action"])), pattern))
    return unused


def access_denied(
    request: ItemRequest, role: str, evaluator: LeadingKeysEvaluator
) -> tuple[AWSResponse, dict[str, Any]]:
    """DynamoDB's refusal (a 400 ``AccessDeniedException``), as the client would parse it; the
    message says whether a statement would allow the action but for its LeadingKeys condition."""
    unconditioned = [{k: v for k, v in s.items() if k != "Condition"} for s in evaluator.statements]
    why = (
        "its dynamodb:LeadingKeys condition does not hold"
        if LeadingKeysEvaluator(unconditioned).allows(request)
        else "no statement allows the action on the table"
    )
    message = (
        f"User: arn:{PARTITION}:sts::{ACCOUNT}:assumed-role/{role} is not authorized to perform: "
        f"{request.action} on resource: {request.resource}: {why} (leading keys {list(request.leading_keys)}; "
        "judged by tests.support.iam.LeadingKeysEvaluator, standing in for AWS)"
    )
    parsed = {
        "Error": {"Code": "AccessDeniedException", "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": 400, "HTTPHeaders": {}},
    }
    return AWSResponse(f"https://dynamodb.{REGION}.amazonaws.com/", 400, HTTPHeaders(), None), parsed


@dataclass
class Step:
    """One code path run under a role: what it returned, or the error it raised (a test of that
    step asserts on it, so one denial fails its own test rather than the whole module)."""

    result: Any = None
    error: BaseException | None = None

    @classmethod
    def run(cls, action: Callable[[], Any]) -> Step:
        step = cls()
        try:
            step.result = action()
        except Exception as exc:  # noqa: BLE001 -- recorded, and asserted on by the test of that step
            step.error = exc
        return step

    def ok(self) -> Any:
        if self.error is not None:
            raise AssertionError(f"{type(self.error).__name__}: {self.error}") from self.error
        return self.result


@dataclass
class RoleSession:
    """A role's assumed credentials, and every IAM authorization its clients' calls needed.

    Every DynamoDB call made with ``session`` (a client of :meth:`client`, or any client or
    resource made from the session) is judged before it is sent by a :class:`LeadingKeysEvaluator`
    of ``statements``: refused as AWS would refuse it (``AccessDeniedException``) when no statement
    allows one of its item requests, and recorded either way (``requests``; the refused ones in
    ``denied`` too)."""

    name: str
    statements: list[dict[str, Any]]
    session: boto3.Session
    endpoint: str
    uses: set[Use] = field(default_factory=set)
    requests: list[ItemRequest] = field(default_factory=list)
    denied: list[ItemRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        evaluator = LeadingKeysEvaluator(self.statements)

        def judge(model: Any, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
            body = params.get("body") or b"{}"
            requests = item_requests(model.name, json.loads(body))
            self.requests.extend(requests)
            refused = [request for request in requests if not evaluator.allows(request)]
            self.denied.extend(refused)
            return access_denied(refused[0], self.name, evaluator) if refused else None

        # on the session: clients and resources made from it later (boto3 copies its handlers)
        # (a before-call handler's answer replaces the call: botocore's stubs type it as None)
        self.session.events.register("before-call.dynamodb", cast(Callable[..., None], judge))

    def client(self, service: str) -> Any:
        client = self.session.client(
            service, endpoint_url=self.endpoint, config=Config(retries={"mode": "standard", "max_attempts": 2})
        )

        def record(params: dict[str, Any], model: Any, **_: Any) -> None:
            self.uses.update(iam_actions(service, model.name, params))

        client.meta.events.register(f"provide-client-params.{service}", record)
        return client


class IamServer:
    """A moto server with IAM enforced; an admin for setup and checks; roles to assume."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        bootstrap = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
        iam = bootstrap.client("iam", endpoint_url=endpoint)
        iam.create_user(UserName="tidemark-admin")
        iam.put_user_policy(
            UserName="tidemark-admin",
            PolicyName="admin",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
            ),
        )
        key = iam.create_access_key(UserName="tidemark-admin")["AccessKey"]
        self.admin = boto3.Session(
            aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name=REGION
        )
        self._set_auth("0")  # from here on every request is authorized, the admin's too

    def _set_auth(self, count: str) -> None:
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=count.encode(),
            method="POST",
            headers={"Content-Type": "text/plain"},  # a form type would leave the body unread
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()

    def admin_client(self, service: str) -> Any:
        return self.admin.client(service, endpoint_url=self.endpoint)

    def assume(self, name: str, statements: list[dict[str, Any]]) -> RoleSession:
        """A role holding exactly ``statements`` (as one inline policy), assumed by the admin."""
        iam = self.admin_client("iam")
        role_name = f"{name}-{uuid.uuid4().hex[:8]}"[:64]
        trust = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}],
        }
        arn = iam.create_role(RoleName=role_name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        iam.put_role_policy(
            RoleName=role_name,
            PolicyName="template",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
        )
        credentials = self.admin_client("sts").assume_role(RoleArn=arn, RoleSessionName=name[:64])["Credentials"]
        session = boto3.Session(
            aws_access_key_id=credentials["AccessKeyId"],
            aws_secret_access_key=credentials["SecretAccessKey"],
            aws_session_token=credentials["SessionToken"],
            region_name=REGION,
        )
        return RoleSession(name, statements, session, self.endpoint)


@dataclass
class IamArchive(Archive):
    """One test's bucket, ledger and staging directory on an :class:`IamServer`, with the
    template's grants resolved to them. ``s3``/``dynamodb`` are the admin's (checks, as the
    ``Archive`` fixture's are); :meth:`runtime` builds a function's runtime under its role."""

    server: IamServer
    roles: dict[str, RoleSession] = field(default_factory=dict)

    @classmethod
    def create(cls, server: IamServer, root: Path) -> IamArchive:
        made = make_archive(server.endpoint, root, session=server.admin)
        return cls(**{f.name: getattr(made, f.name) for f in fields(Archive)}, server=server)

    def physical(
        self, bucket_id: str, table_id: str, extra: Mapping[str, tuple[str, str]] = {}
    ) -> dict[str, tuple[str, str]]:
        """The template's logical ids of the bucket and ledger table, mapped to this archive's."""
        return {
            bucket_id: (self.bucket, f"arn:{PARTITION}:s3:::{self.bucket}"),
            table_id: (self.table, f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{self.table}"),
            **extra,
        }

    def assume(self, name: str, statements: list[dict[str, Any]]) -> RoleSession:
        role = self.roles[name] = self.server.assume(name, statements)
        return role

    def runtime(  # type: ignore[override]
        self, config: TidemarkConfig, crash_points: CrashPoints | None = None, *, role: str | None = "archiver"
    ) -> Runtime:
        """A runtime whose S3 and DynamoDB clients hold ``role``'s credentials (the archiver's by
        default, so the suite's harness helpers run as the archiver; ``None``: the admin's)."""
        if role is None:
            return super().runtime(config, crash_points)
        session = self.roles[role]
        return super().runtime(config, crash_points, s3=session.client("s3"), dynamodb=session.client("dynamodb"))

    def runtimes(
        self, config: TidemarkConfig, role: str | None = "archiver"
    ) -> Callable[[CrashPoints | None], Runtime]:
        return lambda crash: self.runtime(config, crash, role=role)
