"""IAM on the moto server that ``tidemark.embedded.moto_server`` launches, once enforced: DynamoDB
authorizes on table and index ARNs, transactions item by item and batches table by table, and
denies with DynamoDB's AccessDeniedException; S3 answers a missing key 403 unless the caller may
list the bucket (a ListBucket grant conditioned on s3:prefix does not count); CloudWatch
authorizes ``cloudwatch:<Operation>`` and PutMetricData's ``cloudwatch:namespace``. With IAM not
enforced (the default) nothing changes.

Enforcement is server-wide, so this module starts a server of its own. Each test sets up as the
admin with enforcement off (an IAM role with an inline policy, ``sts.assume_role``), turns it on,
and acts with the role's credentials; the ``iam`` fixture turns it off again.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tidemark.embedded.moto_server import moto_server

ACCOUNT = "123456789012"
REGION = "us-east-1"
LEDGER, OTHER, INDEX = "Ledger", "Other", "by_owner"
LEDGER_ARN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{LEDGER}"
OTHER_ARN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{OTHER}"
BUCKET = "tidemark-iam-archive"
BUCKET_ARN = f"arn:aws:s3:::{BUCKET}"
PRESENT = "raw/present.txt"

Statement = dict[str, Any]


def allow(actions: str | list[str], resources: str | list[str], **condition: Any) -> Statement:
    statement: Statement = {"Effect": "Allow", "Action": actions, "Resource": resources}
    if condition:
        statement["Condition"] = condition
    return statement


@dataclass
class Server:
    endpoint: str

    def enforce(self, on: bool) -> None:
        """POST /moto-api/reset-auth: "0" enforces IAM from the next request on, "inf" never."""
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=b"0" if on else b"inf",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()

    def client(self, service: str, credentials: dict[str, str] | None = None) -> Any:
        keys = {}
        if credentials is not None:
            keys = {
                "aws_access_key_id": credentials["AccessKeyId"],
                "aws_secret_access_key": credentials["SecretAccessKey"],
                "aws_session_token": credentials["SessionToken"],
            }
        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION, **keys)

    def assume_role(self, statements: list[Statement]) -> dict[str, Any]:
        """A fresh role allowed ``statements`` (an inline policy): AssumeRole's reply for it."""
        iam = self.client("iam")
        name = f"role-{uuid.uuid4().hex[:12]}"
        trust = {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "sts:AssumeRole"}
        iam.create_role(
            RoleName=name, AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [trust]})
        )
        policy = {"Version": "2012-10-17", "Statement": statements}
        iam.put_role_policy(RoleName=name, PolicyName="inline", PolicyDocument=json.dumps(policy))
        reply: dict[str, Any] = self.client("sts").assume_role(
            RoleArn=f"arn:aws:iam::{ACCOUNT}:role/{name}", RoleSessionName="tests"
        )
        return reply


@dataclass
class Role:
    arn: str  # the session's: arn:aws:sts::ACCOUNT:assumed-role/NAME/tests
    dynamodb: Any
    s3: Any


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with moto_server() as endpoint:
        aws = Server(endpoint)
        dynamodb = aws.client("dynamodb")
        dynamodb.create_table(
            TableName=LEDGER,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "owner", "AttributeType": "S"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": INDEX,
                    "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        dynamodb.create_table(
            TableName=OTHER,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        s3 = aws.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key=PRESENT, Body=b"here")
        yield aws


@pytest.fixture
def iam(server: Server) -> Iterator[Callable[[list[Statement]], Role]]:
    """``iam(statements)``: clients acting as a role allowed ``statements``, IAM enforced from then
    on (until the test ends)."""

    def as_role(statements: list[Statement]) -> Role:
        server.enforce(False)
        reply = server.assume_role(statements)
        server.enforce(True)
        credentials = reply["Credentials"]
        return Role(
            reply["AssumedRoleUser"]["Arn"], server.client("dynamodb", credentials), server.client("s3", credentials)
        )

    try:
        yield as_role
    finally:
        server.enforce(False)


def key() -> dict[str, Any]:
    return {"pk": {"S": uuid.uuid4().hex}}


def dynamodb_denied(call: Callable[[], Any], resource: str, action: str) -> None:
    """The call is refused as DynamoDB refuses it: HTTP 400 AccessDeniedException, naming both."""
    with pytest.raises(ClientError) as caught:
        call()
    error, status = caught.value.response["Error"], caught.value.response["ResponseMetadata"]["HTTPStatusCode"]
    assert (error["Code"], status) == ("AccessDeniedException", 400), caught.value.response
    assert f"dynamodb:{action} on resource: {resource}" in error["Message"]


def s3_status(call: Callable[[], Any]) -> int:
    try:
        call()
    except ClientError as error:
        status: int = error.response["ResponseMetadata"]["HTTPStatusCode"]
        return status
    return 200


def exists(server: Server, table: str, item_key: dict[str, Any]) -> bool:
    """Whether ``table`` holds the item, asked as the admin (so this turns enforcement off)."""
    server.enforce(False)
    return "Item" in server.client("dynamodb").get_item(TableName=table, Key=item_key, ConsistentRead=True)


# -- IAM not enforced ---------------------------------------------------------------------------


def test_without_enforcement_nothing_changes(server: Server) -> None:
    """Enforcement off (the default): a role allowed nothing, and the admin, do everything, and a
    missing key is 404 without any ListBucket grant."""
    server.enforce(False)
    credentials = server.assume_role([allow("sqs:ListQueues", "*")])["Credentials"]
    for who in (credentials, None):
        dynamodb, s3 = server.client("dynamodb", who), server.client("s3", who)
        item = key()
        dynamodb.put_item(TableName=OTHER, Item=item)
        dynamodb.query(
            TableName=LEDGER,
            IndexName=INDEX,
            KeyConditionExpression="#o = :o",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues={":o": {"S": "x"}},
        )
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": LEDGER, "Item": key()}},
                {
                    "Update": {
                        "TableName": OTHER,
                        "Key": item,
                        "UpdateExpression": "SET n = :n",
                        "ExpressionAttributeValues": {":n": {"N": "1"}},
                    }
                },
            ]
        )
        dynamodb.batch_write_item(RequestItems={OTHER: [{"PutRequest": {"Item": key()}}]})
        assert s3_status(lambda s3=s3: s3.head_object(Bucket=BUCKET, Key="raw/missing")) == 404
        with pytest.raises(ClientError) as caught:
            s3.get_object(Bucket=BUCKET, Key="raw/missing")
        assert caught.value.response["Error"]["Code"] == "NoSuchKey"


# -- DynamoDB: table and index ARNs -------------------------------------------------------------


def test_statement_scoped_to_a_table_allows_its_table(iam: Callable[[list[Statement]], Role]) -> None:
    role = iam([allow(["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query"], LEDGER_ARN)])
    item = {**key(), "owner": {"S": "archiver"}}
    role.dynamodb.put_item(TableName=LEDGER, Item=item)
    assert role.dynamodb.get_item(TableName=LEDGER, Key={"pk": item["pk"]})["Item"] == item
    found = role.dynamodb.query(
        TableName=LEDGER, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": item["pk"]}
    )
    assert found["Items"] == [item]


def test_statement_scoped_to_a_table_denies_other_tables_and_actions(
    iam: Callable[[list[Statement]], Role], server: Server
) -> None:
    role = iam([allow(["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query"], LEDGER_ARN)])
    item = key()
    dynamodb_denied(lambda: role.dynamodb.put_item(TableName=OTHER, Item=item), OTHER_ARN, "PutItem")
    dynamodb_denied(lambda: role.dynamodb.delete_item(TableName=LEDGER, Key=key()), LEDGER_ARN, "DeleteItem")
    assert not exists(server, OTHER, item)


def test_table_given_by_arn_is_authorized_on_that_arn(iam: Callable[[list[Statement]], Role]) -> None:
    role = iam([allow("dynamodb:PutItem", LEDGER_ARN)])
    role.dynamodb.put_item(TableName=LEDGER_ARN, Item=key())
    dynamodb_denied(lambda: role.dynamodb.put_item(TableName=OTHER_ARN, Item=key()), OTHER_ARN, "PutItem")


def test_index_query_is_authorized_on_the_index_arn(iam: Callable[[list[Statement]], Role]) -> None:
    by_owner = {
        "KeyConditionExpression": "#o = :o",
        "ExpressionAttributeNames": {"#o": "owner"},
        "ExpressionAttributeValues": {":o": {"S": "sweeper"}},
    }
    table_only = iam([allow("dynamodb:Query", LEDGER_ARN)])
    dynamodb_denied(
        lambda: table_only.dynamodb.query(TableName=LEDGER, IndexName=INDEX, **by_owner),
        f"{LEDGER_ARN}/index/{INDEX}",
        "Query",
    )
    indexes_only = iam([allow("dynamodb:Query", f"{LEDGER_ARN}/index/*")])
    assert indexes_only.dynamodb.query(TableName=LEDGER, IndexName=INDEX, **by_owner)["Items"] == []
    dynamodb_denied(
        lambda: indexes_only.dynamodb.query(
            TableName=LEDGER, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "p"}}
        ),
        LEDGER_ARN,
        "Query",
    )


def test_denial_is_dynamodbs_access_denied_exception(iam: Callable[[list[Statement]], Role]) -> None:
    role = iam([allow("dynamodb:GetItem", "*")])
    with pytest.raises(ClientError) as caught:
        role.dynamodb.put_item(TableName=LEDGER, Item=key())
    reply = caught.value.response
    assert reply["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert reply["Error"]["Code"] == "AccessDeniedException"
    assert reply["Error"]["Message"] == (
        f"User: {role.arn} is not authorized to perform: dynamodb:PutItem on resource: {LEDGER_ARN}"
    )


# -- DynamoDB: transactions item by item, batches table by table ---------------------------------


def ledger_transaction(new: dict[str, Any], updated: dict[str, Any], checked: dict[str, Any]) -> list[dict[str, Any]]:
    """The ledger's shape of commit: put one item, update another, check a third."""
    return [
        {"Put": {"TableName": LEDGER, "Item": new, "ConditionExpression": "attribute_not_exists(pk)"}},
        {
            "Update": {
                "TableName": LEDGER,
                "Key": updated,
                "UpdateExpression": "SET n = :n",
                "ExpressionAttributeValues": {":n": {"N": "1"}},
            }
        },
        {"ConditionCheck": {"TableName": LEDGER, "Key": checked, "ConditionExpression": "attribute_not_exists(pk)"}},
    ]


def test_transaction_is_allowed_by_its_items_actions(iam: Callable[[list[Statement]], Role], server: Server) -> None:
    role = iam([allow(["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"], LEDGER_ARN)])
    new, updated = key(), key()
    role.dynamodb.transact_write_items(TransactItems=ledger_transaction(new, updated, key()))
    assert exists(server, LEDGER, new)
    assert exists(server, LEDGER, updated)


def test_transaction_is_denied_when_one_items_action_is_not_allowed(
    iam: Callable[[list[Statement]], Role], server: Server
) -> None:
    role = iam([allow(["dynamodb:PutItem", "dynamodb:ConditionCheckItem"], LEDGER_ARN)])
    new = key()
    dynamodb_denied(
        lambda: role.dynamodb.transact_write_items(TransactItems=ledger_transaction(new, key(), key())),
        LEDGER_ARN,
        "UpdateItem",
    )
    assert not exists(server, LEDGER, new)  # the whole request is refused


def test_transaction_is_denied_when_one_item_is_on_another_table(
    iam: Callable[[list[Statement]], Role], server: Server
) -> None:
    role = iam([allow("dynamodb:PutItem", LEDGER_ARN)])
    ours, theirs = key(), key()
    items = [{"Put": {"TableName": LEDGER, "Item": ours}}, {"Put": {"TableName": OTHER, "Item": theirs}}]
    dynamodb_denied(lambda: role.dynamodb.transact_write_items(TransactItems=items), OTHER_ARN, "PutItem")
    assert not exists(server, LEDGER, ours)


def test_transact_write_items_action_grants_no_item(iam: Callable[[list[Statement]], Role]) -> None:
    """There is no IAM action that grants a transaction's writes as a whole."""
    role = iam([allow("dynamodb:TransactWriteItems", "*")])
    dynamodb_denied(
        lambda: role.dynamodb.transact_write_items(TransactItems=[{"Put": {"TableName": LEDGER, "Item": key()}}]),
        LEDGER_ARN,
        "PutItem",
    )


def test_transact_get_items_needs_get_item(iam: Callable[[list[Statement]], Role]) -> None:
    gets = [{"Get": {"TableName": LEDGER, "Key": key()}}]
    assert iam([allow("dynamodb:GetItem", LEDGER_ARN)]).dynamodb.transact_get_items(TransactItems=gets)["Responses"]
    role = iam([allow("dynamodb:TransactGetItems", "*")])
    dynamodb_denied(lambda: role.dynamodb.transact_get_items(TransactItems=gets), LEDGER_ARN, "GetItem")


def test_batches_need_the_batch_action_on_every_table(iam: Callable[[list[Statement]], Role], server: Server) -> None:
    role = iam([allow(["dynamodb:BatchWriteItem", "dynamodb:BatchGetItem"], LEDGER_ARN)])
    item = key()
    role.dynamodb.batch_write_item(RequestItems={LEDGER: [{"PutRequest": {"Item": item}}]})
    got = role.dynamodb.batch_get_item(RequestItems={LEDGER: {"Keys": [item]}})
    assert got["Responses"][LEDGER] == [item]
    theirs = key()
    both = {LEDGER: [{"PutRequest": {"Item": key()}}], OTHER: [{"PutRequest": {"Item": theirs}}]}
    dynamodb_denied(lambda: role.dynamodb.batch_write_item(RequestItems=both), OTHER_ARN, "BatchWriteItem")
    dynamodb_denied(
        lambda: role.dynamodb.batch_get_item(RequestItems={LEDGER: {"Keys": [item]}, OTHER: {"Keys": [item]}}),
        OTHER_ARN,
        "BatchGetItem",
    )
    assert not exists(server, OTHER, theirs)
    # The item actions do not grant a batch: it is authorized as BatchWriteItem.
    items_only = iam([allow(["dynamodb:PutItem", "dynamodb:DeleteItem"], LEDGER_ARN)])
    dynamodb_denied(
        lambda: items_only.dynamodb.batch_write_item(RequestItems={LEDGER: [{"PutRequest": {"Item": key()}}]}),
        LEDGER_ARN,
        "BatchWriteItem",
    )


# -- S3: a missing key, and the existing action mapping ------------------------------------------

GET_OBJECTS = allow("s3:GetObject", f"{BUCKET_ARN}/*")


def missing_key_answers(role: Role) -> tuple[int, str]:
    """HeadObject's status and GetObject's error code for a key the bucket does not hold."""
    head = s3_status(lambda: role.s3.head_object(Bucket=BUCKET, Key="raw/missing"))
    with pytest.raises(ClientError) as caught:
        role.s3.get_object(Bucket=BUCKET, Key="raw/missing")
    return head, caught.value.response["Error"]["Code"]


def test_missing_key_is_403_without_list_bucket(iam: Callable[[list[Statement]], Role]) -> None:
    assert missing_key_answers(iam([GET_OBJECTS])) == (403, "AccessDenied")


def test_missing_key_is_404_with_list_bucket(iam: Callable[[list[Statement]], Role]) -> None:
    assert missing_key_answers(iam([GET_OBJECTS, allow("s3:ListBucket", BUCKET_ARN)])) == (404, "NoSuchKey")


def test_list_bucket_conditioned_on_a_prefix_does_not_count(iam: Callable[[list[Statement]], Role]) -> None:
    """HeadObject supplies no s3:prefix, so on AWS the condition is false: 403, even under it."""
    prefixed = allow("s3:ListBucket", BUCKET_ARN, StringLike={"s3:prefix": ["raw/*", "raw/"]})
    assert missing_key_answers(iam([GET_OBJECTS, prefixed])) == (403, "AccessDenied")


def test_list_bucket_on_objects_or_other_buckets_does_not_count(iam: Callable[[list[Statement]], Role]) -> None:
    elsewhere = allow("s3:ListBucket", [f"{BUCKET_ARN}/*", "arn:aws:s3:::another-bucket"])
    assert missing_key_answers(iam([GET_OBJECTS, elsewhere])) == (403, "AccessDenied")


def test_denied_list_bucket_wins_over_an_allowed_one(iam: Callable[[list[Statement]], Role]) -> None:
    deny = {"Effect": "Deny", "Action": "s3:ListBucket", "Resource": BUCKET_ARN}
    assert missing_key_answers(iam([GET_OBJECTS, allow("s3:*", BUCKET_ARN), deny])) == (403, "AccessDenied")


def test_list_bucket_deny_conditioned_on_a_prefix_still_applies(iam: Callable[[list[Statement]], Role]) -> None:
    """A Deny naming s3:prefix is kept (its condition ignored): on AWS a negated operator on the
    absent key applies it, and 403 where AWS might say 404 is the safe mistake, not the reverse."""
    deny = {
        "Effect": "Deny",
        "Action": "s3:ListBucket",
        "Resource": BUCKET_ARN,
        "Condition": {"StringNotLike": {"s3:prefix": "raw/*"}},
    }
    assert missing_key_answers(iam([GET_OBJECTS, allow("s3:ListBucket", BUCKET_ARN), deny])) == (403, "AccessDenied")


def test_head_object_needs_get_object(iam: Callable[[list[Statement]], Role]) -> None:
    """HEAD is authorized as s3:GetObject, before the key is looked up."""
    assert s3_status(lambda: iam([GET_OBJECTS]).s3.head_object(Bucket=BUCKET, Key=PRESENT)) == 200
    lister = iam([allow("s3:ListBucket", BUCKET_ARN), allow("s3:PutObject", f"{BUCKET_ARN}/*")])
    assert s3_status(lambda: lister.s3.head_object(Bucket=BUCKET, Key=PRESENT)) == 403
    assert s3_status(lambda: lister.s3.head_object(Bucket=BUCKET, Key="raw/missing")) == 403


def test_multipart_upload_needs_only_put_object(iam: Callable[[list[Statement]], Role], server: Server) -> None:
    role = iam([allow("s3:PutObject", f"{BUCKET_ARN}/raw/*")])
    target = f"raw/{uuid.uuid4().hex}"
    upload = role.s3.create_multipart_upload(Bucket=BUCKET, Key=target)["UploadId"]
    part = role.s3.upload_part(Bucket=BUCKET, Key=target, UploadId=upload, PartNumber=1, Body=b"x" * 1024)
    role.s3.complete_multipart_upload(
        Bucket=BUCKET,
        Key=target,
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    assert s3_status(lambda: role.s3.head_object(Bucket=BUCKET, Key=target)) == 403  # no s3:GetObject
    denied = s3_status(lambda: role.s3.create_multipart_upload(Bucket=BUCKET, Key="errors/elsewhere"))
    assert denied == 403
    server.enforce(False)
    assert server.client("s3").get_object(Bucket=BUCKET, Key=target)["Body"].read() == b"x" * 1024


# -- CloudFormation: stack ARNs -------------------------------------------------------------------


def test_describe_stacks_is_authorized_on_the_stacks_arn(server: Server) -> None:
    """``tidemark ... --stack-name`` reads the outputs with DescribeStacks: a statement scoped to
    the stack (``stack/<name>/*``, the operator policy's) allows it by name or id, and nothing else."""
    server.enforce(False)
    admin = server.client("cloudformation")
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}, "Outputs": {"Bucket": {"Value": BUCKET}}}
    for name in ("Tidemark", "Another"):
        admin.create_stack(StackName=name, TemplateBody=json.dumps(template))
    ours = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/Tidemark/*"
    credentials = server.assume_role([allow("cloudformation:DescribeStacks", ours)])["Credentials"]
    server.enforce(True)
    try:
        role = server.client("cloudformation", credentials)
        [stack] = role.describe_stacks(StackName="Tidemark")["Stacks"]
        assert stack["Outputs"] == [{"OutputKey": "Bucket", "OutputValue": BUCKET}]
        assert role.describe_stacks(StackName=stack["StackId"])["Stacks"][0]["StackName"] == "Tidemark"
        for denied in ({"StackName": "Another"}, {"StackName": "Missing"}, {}):  # {}: every stack, on "*"
            with pytest.raises(ClientError) as caught:
                role.describe_stacks(**denied)
            assert caught.value.response["Error"]["Code"] == "AccessDenied", denied
    finally:
        server.enforce(False)


# -- CloudWatch: the cloudwatch: prefix and the namespace condition ------------------------------

METRIC = [{"MetricName": "AggregationHoursFailed", "Value": 1.0, "Unit": "Count"}]
IN_TIDEMARK = {"StringEquals": {"cloudwatch:namespace": "Tidemark"}}


def cloudwatch_as_role(server: Server, statements: list[Statement]) -> Any:
    """A CloudWatch client acting as a role allowed ``statements``; enforcement on (the caller
    turns it off)."""
    server.enforce(False)
    credentials = server.assume_role(statements)["Credentials"]
    server.enforce(True)
    return server.client("cloudwatch", credentials)


def cloudwatch_denied(call: Callable[[], Any]) -> None:
    """Refused as AWS refuses it: AccessDenied, HTTP 403, naming the cloudwatch: action."""
    with pytest.raises(ClientError) as caught:
        call()
    error, status = caught.value.response["Error"], caught.value.response["ResponseMetadata"]["HTTPStatusCode"]
    assert (error["Code"], status) == ("AccessDenied", 403), caught.value.response
    assert "cloudwatch:PutMetricData" in error["Message"]


def namespaces(server: Server) -> set[str]:
    server.enforce(False)
    return {metric["Namespace"] for metric in server.client("cloudwatch").list_metrics()["Metrics"]}


def test_put_metric_data_is_authorized_as_cloudwatch_in_its_namespace(server: Server) -> None:
    """What the aggregation job's role holds: PutMetricData on "*", only in the Tidemark namespace.
    moto asked for monitoring:PutMetricData (CloudWatch's signing name), so the grant allowed
    nothing; and it evaluated the condition without the request's namespace, so it would have
    allowed every namespace."""
    try:
        cloudwatch = cloudwatch_as_role(server, [allow("cloudwatch:PutMetricData", "*", **IN_TIDEMARK)])
        cloudwatch.put_metric_data(Namespace="Tidemark", MetricData=METRIC)
        cloudwatch_denied(lambda: cloudwatch.put_metric_data(Namespace="Elsewhere", MetricData=METRIC))
        assert "Tidemark" in namespaces(server) and "Elsewhere" not in namespaces(server)
    finally:
        server.enforce(False)


def test_cloudwatch_needs_the_action_and_a_deny_on_the_namespace_applies_to_it_only(server: Server) -> None:
    try:
        nothing = cloudwatch_as_role(server, [allow("cloudwatch:ListMetrics", "*")])
        cloudwatch_denied(lambda: nothing.put_metric_data(Namespace="Tidemark", MetricData=METRIC))
        nothing.list_metrics()  # the operation's own action, cloudwatch:ListMetrics
        anywhere_but = cloudwatch_as_role(
            server,
            [
                allow("cloudwatch:PutMetricData", "*"),
                {
                    "Effect": "Deny",
                    "Action": "cloudwatch:PutMetricData",
                    "Resource": "*",
                    "Condition": {"StringEquals": {"cloudwatch:namespace": "Reserved"}},
                },
            ],
        )
        anywhere_but.put_metric_data(Namespace="Other", MetricData=METRIC)  # the Deny does not apply
        cloudwatch_denied(lambda: anywhere_but.put_metric_data(Namespace="Reserved", MetricData=METRIC))
    finally:
        server.enforce(False)
