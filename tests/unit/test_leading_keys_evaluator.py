"""The ``dynamodb:LeadingKeys`` evaluator of the IAM fixture (``tests.support.iam``).

moto does not evaluate ``ForAllValues:StringLike`` on ``dynamodb:LeadingKeys`` (it compares
``StringEquals`` only, and ignores the operators it does not know), so the fixture judges every
DynamoDB call of a role's clients itself, standing in for AWS. These tests pin what it does: which
items a call reaches (its leading keys), how the condition is evaluated (as the IAM documentation
describes the set operators: ``ForAllValues`` is true of an empty set, which is why no grant holds
a Scan), and that what it cannot judge is an error, never an answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.iam import (
    ACCOUNT,
    PARTITION,
    REGION,
    CannotEvaluate,
    ItemRequest,
    LeadingKeysEvaluator,
    item_requests,
    unused_leading_keys,
)

TABLE = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/ledger"
OTHER = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/aggregates"


def s(value: str) -> dict[str, str]:
    return {"S": value}


def key(pk: str, sk: str = "STATE") -> dict[str, Any]:
    return {"pk": s(pk), "sk": s(sk)}


def grant(
    actions: list[str], patterns: list[str], *, resource: str = TABLE, operator: str = "ForAllValues:StringLike"
) -> dict[str, Any]:
    return {
        "Effect": "Allow",
        "Action": actions,
        "Resource": resource,
        "Condition": {operator: {"dynamodb:LeadingKeys": patterns}},
    }


ARCHIVER = [
    grant(["dynamodb:GetItem", "dynamodb:Query"], ["PART#orders#*", "HOUR#orders#*"]),
    grant(["dynamodb:PutItem", "dynamodb:UpdateItem"], ["PART#orders#*", "HOUR#orders#*", "HOURS#orders"]),
]


# --- the items a call reaches ---------------------------------------------------------------------


def test_an_item_call_reaches_its_keys_partition_key() -> None:
    assert item_requests("GetItem", {"TableName": "ledger", "Key": key("PART#orders#0")}) == [
        ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#0",))
    ]
    assert item_requests("PutItem", {"TableName": "ledger", "Item": {**key("RUNS#orders", "r"), "n": {"N": "1"}}}) == [
        ItemRequest("dynamodb:PutItem", TABLE, ("RUNS#orders",))
    ]
    for operation in ("UpdateItem", "DeleteItem"):
        (request,) = item_requests(operation, {"TableName": "ledger", "Key": key("HOURS#orders", "2026-11-21T08")})
        assert request == ItemRequest(f"dynamodb:{operation}", TABLE, ("HOURS#orders",))


def test_a_transaction_is_authorized_item_by_item_as_its_own_actions() -> None:
    params = {
        "TransactItems": [
            {"Put": {"TableName": "ledger", "Item": key("HOUR#orders#2026-11-21T08", "OBJ#raw#00000#0")}},
            {"Update": {"TableName": "ledger", "Key": key("HOURS#orders", "2026-11-21T08")}},
            {"Put": {"TableName": "ledger", "Item": key("PART#orders#0")}},
            {"Delete": {"TableName": "aggregates", "Key": key("AGG#orders#a#h", "{}")}},
            {"ConditionCheck": {"TableName": "ledger", "Key": key("STREAM#orders", "PARTITIONS")}},
        ]
    }
    assert item_requests("TransactWriteItems", params) == [
        ItemRequest("dynamodb:PutItem", TABLE, ("HOUR#orders#2026-11-21T08",)),
        ItemRequest("dynamodb:UpdateItem", TABLE, ("HOURS#orders",)),
        ItemRequest("dynamodb:PutItem", TABLE, ("PART#orders#0",)),
        ItemRequest("dynamodb:DeleteItem", OTHER, ("AGG#orders#a#h",)),
        ItemRequest("dynamodb:ConditionCheckItem", TABLE, ("STREAM#orders",)),
    ]
    gets = {"TransactItems": [{"Get": {"TableName": "ledger", "Key": key("PART#orders#1")}}]}
    assert item_requests("TransactGetItems", gets) == [ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#1",))]


def test_a_batch_reaches_every_items_key_per_table() -> None:
    params = {
        "RequestItems": {
            "aggregates": [
                {"PutRequest": {"Item": key("AGG#orders#a#h1", "{}")}},
                {"DeleteRequest": {"Key": key("AGG#orders#a#h2", "{}")}},
            ]
        }
    }
    assert item_requests("BatchWriteItem", params) == [
        ItemRequest("dynamodb:BatchWriteItem", OTHER, ("AGG#orders#a#h1", "AGG#orders#a#h2"))
    ]
    reads = {"RequestItems": {"ledger": {"Keys": [key("PART#orders#0"), key("PART#payments#0")]}}}
    assert item_requests("BatchGetItem", reads) == [
        ItemRequest("dynamodb:BatchGetItem", TABLE, ("PART#orders#0", "PART#payments#0"))
    ]


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("pk = :pk", {}),
        ("pk = :pk AND begins_with(sk, :prefix)", {}),
        ("pk = :pk AND sk BETWEEN :low AND :high", {}),
        ("#p = :pk AND sk >= :since", {"#p": "pk"}),
        ("sk > :since AND :pk = pk", {}),
    ],
)
def test_a_query_reaches_the_partition_key_its_condition_names(expression: str, names: dict[str, str]) -> None:
    params: dict[str, Any] = {
        "TableName": "ledger",
        "KeyConditionExpression": expression,
        "ExpressionAttributeValues": {
            ":pk": s("HOURS#orders"),
            ":prefix": s("E"),
            ":low": s("a"),
            ":high": s("b"),
            ":since": s("2026"),
        },
    }
    if names:
        params["ExpressionAttributeNames"] = names
    assert item_requests("Query", params) == [ItemRequest("dynamodb:Query", TABLE, ("HOURS#orders",))]


def test_a_query_of_an_index_or_without_a_partition_key_is_not_judged() -> None:
    """An index's partition key is another attribute: its leading keys would be the index's."""
    values = {":pk": s("HOURS#orders")}
    with pytest.raises(CannotEvaluate, match="index"):
        item_requests(
            "Query",
            {
                "TableName": "ledger",
                "IndexName": "by-x",
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": values,
            },
        )
    with pytest.raises(CannotEvaluate, match="single equality"):
        item_requests(
            "Query", {"TableName": "ledger", "KeyConditionExpression": "sk = :pk", "ExpressionAttributeValues": values}
        )


def test_a_scan_reaches_no_leading_key() -> None:
    assert item_requests("Scan", {"TableName": "ledger"}) == [ItemRequest("dynamodb:Scan", TABLE, ())]


# --- the condition, evaluated ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "allowed"),
    [
        (ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#0",)), True),
        (ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#shardId-000000000001",)), True),
        (ItemRequest("dynamodb:Query", TABLE, ("HOUR#orders#2026-11-21T08",)), True),
        (ItemRequest("dynamodb:UpdateItem", TABLE, ("HOURS#orders",)), True),
        # another stream, a stream whose name extends this one's, another family
        (ItemRequest("dynamodb:GetItem", TABLE, ("PART#payments#0",)), False),
        (ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders-eu#0",)), False),
        (ItemRequest("dynamodb:Query", TABLE, ("HOURS#orders",)), False),  # read: not a read family
        (ItemRequest("dynamodb:UpdateItem", TABLE, ("STREAM#orders",)), False),
        (ItemRequest("dynamodb:PutItem", TABLE, ("RUNS#orders",)), False),
        (ItemRequest("dynamodb:UpdateItem", TABLE, ("HOURS#orders-eu",)), False),  # exact, not a prefix
        # ForAllValues: every key of the request must match
        (ItemRequest("dynamodb:BatchWriteItem", TABLE, ("PART#orders#0", "PART#payments#0")), False),
        # not granted at all
        (ItemRequest("dynamodb:DeleteItem", TABLE, ("PART#orders#0",)), False),
        (ItemRequest("dynamodb:GetItem", OTHER, ("PART#orders#0",)), False),
    ],
)
def test_the_archivers_statements_allow_its_own_keys_only(request_: ItemRequest, allowed: bool) -> None:
    assert LeadingKeysEvaluator(ARCHIVER).allows(request_) is allowed


def test_for_all_values_is_true_of_a_request_without_keys_so_a_scan_would_pass() -> None:
    """Why no grant holds Scan: the condition cannot restrict it (IAM User Guide, "Multivalued
    context keys": ForAllValues returns true when the request has no values for the key)."""
    scan = ItemRequest("dynamodb:Scan", TABLE, ())
    assert LeadingKeysEvaluator([grant(["dynamodb:Scan"], ["PART#orders#*"])]).allows(scan)
    assert not LeadingKeysEvaluator(
        [grant(["dynamodb:Scan"], ["PART#orders#*"], operator="ForAnyValue:StringLike")]
    ).allows(scan)
    assert not LeadingKeysEvaluator(ARCHIVER).allows(scan)


def test_string_like_is_a_whole_value_glob_and_string_equals_exact() -> None:
    like = LeadingKeysEvaluator([grant(["dynamodb:GetItem"], ["PART#o?ders#*"])])
    assert like.allows(ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#0",)))
    assert not like.allows(ItemRequest("dynamodb:GetItem", TABLE, ("XPART#orders#0",)))
    assert not like.allows(ItemRequest("dynamodb:GetItem", TABLE, ("part#orders#0",)))  # case-sensitive
    equals = LeadingKeysEvaluator(
        [grant(["dynamodb:GetItem"], ["PART#orders#*"], operator="ForAllValues:StringEquals")]
    )
    assert not equals.allows(ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#0",)))
    assert equals.allows(ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#*",)))


def test_a_deny_wins_and_wildcard_actions_and_resources_match() -> None:
    statements = [
        {"Effect": "Allow", "Action": "dynamodb:*", "Resource": "*"},
        {**grant(["dynamodb:PutItem"], ["PART#*"]), "Effect": "Deny"},
    ]
    evaluator = LeadingKeysEvaluator(statements)
    assert evaluator.allows(ItemRequest("dynamodb:PutItem", TABLE, ("HOURS#orders",)))
    assert not evaluator.allows(ItemRequest("dynamodb:PutItem", TABLE, ("PART#orders#0",)))
    assert evaluator.allows(ItemRequest("dynamodb:Scan", TABLE, ()))  # an unconditioned grant: anything


def test_what_it_cannot_judge_is_an_error() -> None:
    other = {
        "Effect": "Allow",
        "Action": "dynamodb:GetItem",
        "Resource": TABLE,
        "Condition": {"StringEquals": {"aws:SourceVpce": "vpce-1"}},
    }
    with pytest.raises(CannotEvaluate):
        LeadingKeysEvaluator([other]).allows(ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#0",)))
    variable = grant(["dynamodb:GetItem"], ["PART#${aws:username}#*"])
    with pytest.raises(CannotEvaluate):
        LeadingKeysEvaluator([variable]).allows(ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#0",)))
    with pytest.raises(CannotEvaluate):
        LeadingKeysEvaluator([{"Effect": "Allow", "NotAction": "s3:*", "Resource": "*"}])


def test_statements_of_other_services_are_left_alone() -> None:
    s3 = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*", "Condition": {"StringLike": {"s3:prefix": "x"}}}
    assert LeadingKeysEvaluator([s3, *ARCHIVER]).allows(ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#0",)))


def test_unused_patterns_are_reported_per_statement() -> None:
    requests = [
        ItemRequest("dynamodb:GetItem", TABLE, ("PART#orders#0",)),
        ItemRequest("dynamodb:PutItem", TABLE, ("PART#orders#0",)),
        ItemRequest("dynamodb:UpdateItem", TABLE, ("HOURS#orders",)),
        ItemRequest("dynamodb:GetItem", TABLE, ("PART#payments#0",)),  # refused: uses nothing
    ]
    assert unused_leading_keys(ARCHIVER, requests) == {
        (("dynamodb:GetItem", "dynamodb:Query"), "HOUR#orders#*"),
        (("dynamodb:PutItem", "dynamodb:UpdateItem"), "HOUR#orders#*"),
    }
