"""Every ledger and aggregates grant carries the ``dynamodb:LeadingKeys`` condition of its role.

Asserted on the synthesized template, since moto cannot evaluate the condition (the integration
tests evaluate it on every request with ``tests.support.iam.LeadingKeysEvaluator``): for a
deployment of three streams of three source kinds (``orders`` on MSK with aggregations,
``payments`` on Kinesis and ``refunds`` on RabbitMQ, both without), each role's DynamoDB
statements, their actions and their patterns -- nothing else on either table, no Scan or other
keyless action anywhere, no index whose leading keys would be others. And the stream names such
patterns are made of cannot widen them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match
from hypothesis import assume, given
from hypothesis import strategies as st

from stacks.grants import KEYLESS_ACTIONS, LEADING_KEYS, LEADING_KEYS_OPERATOR, Keys
from stacks.operators import MANAGED_POLICY_CHARS, estimated_size
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import logical_id, synth_stack
from tests.support.harness import small_config_data
from tests.support.iam import ACCOUNT, PARTITION, REGION, ItemRequest, LeadingKeysEvaluator, TemplateGrants
from tests.support.queue_model import rabbitmq_source
from tests.support.workload import KINESIS_STREAM_ARN
from tidemark.config import TidemarkConfig, parse_config
from tidemark.exceptions import ConfigError
from tidemark.ledger.dynamodb import hour_pk, marks_pk, registry_pk, state_pk
from tidemark.names import STREAM_NAME

STREAMS = ("orders", "payments", "refunds")
READ = ["dynamodb:GetItem", "dynamodb:Query"]
WRITE = ["dynamodb:PutItem", "dynamodb:UpdateItem"]


def three_streams() -> TidemarkConfig:
    data = small_config_data(max_records=50)
    orders = data["streams"][0]
    payments = {**json.loads(json.dumps(orders)), "name": "payments", "aggregations": []}
    payments["source"] = {"kind": "kinesis", "stream_arn": KINESIS_STREAM_ARN}
    refunds = {**json.loads(json.dumps(orders)), "name": "refunds", "aggregations": []}
    refunds["source"] = rabbitmq_source()
    data["streams"] += [payments, refunds]
    return parse_config(data)


@pytest.fixture(scope="module")
def synthesized() -> tuple[TidemarkStack, dict[str, Any]]:
    stack, template = synth_stack(three_streams(), nag=False)
    return stack, template.to_json()


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def role_statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [
        statement
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource["Properties"]["Roles"]
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def every_statement(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every identity policy statement of the template: policies, managed policies, inline ones."""
    found = []
    for lid, resource in template["Resources"].items():
        properties = resource.get("Properties", {})
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            found += [(lid, s) for s in properties["PolicyDocument"]["Statement"]]
        if resource["Type"] == "AWS::IAM::Role":
            found += [(lid, s) for p in properties.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    return found


def table_grants(statements: list[dict[str, Any]], table: str) -> list[tuple[list[str], list[str]]]:
    """(actions, patterns) of each statement on ``table``, sorted."""
    return sorted(
        (sorted(listed(s["Action"])), s["Condition"][LEADING_KEYS_OPERATOR][LEADING_KEYS])
        for s in statements
        if {"Fn::GetAtt": [table, "Arn"]} in listed(s["Resource"])
    )


def test_every_statement_on_a_table_carries_its_leading_keys(synthesized: tuple[TidemarkStack, dict[str, Any]]) -> None:
    stack, template = synthesized
    tables = {logical_id(stack.storage.ledger_table), logical_id(stack.storage.aggregates_table)}
    on_tables = 0
    for lid, statement in every_statement(template):
        actions = listed(statement["Action"])
        text = json.dumps(statement["Resource"])
        if not any(action.split(":")[0] in ("dynamodb", "*") for action in actions) and not any(
            table in text for table in tables
        ):
            continue
        on_tables += 1
        assert statement["Effect"] == "Allow", lid
        assert all(action.startswith("dynamodb:") and "*" not in action for action in actions), (lid, actions)
        assert not set(actions) & set(KEYLESS_ACTIONS), (lid, actions)  # Scan, PartiQL, exports, restores
        assert [resource for resource in listed(statement["Resource"]) if "index" in json.dumps(resource)] == []
        assert all(r in [{"Fn::GetAtt": [t, "Arn"]} for t in tables] for r in listed(statement["Resource"])), lid
        # one condition, the set operator, at least one pattern: never unconditioned
        assert list(statement["Condition"]) == [LEADING_KEYS_OPERATOR], lid
        assert list(statement["Condition"][LEADING_KEYS_OPERATOR]) == [LEADING_KEYS], lid
        patterns = statement["Condition"][LEADING_KEYS_OPERATOR][LEADING_KEYS]
        assert patterns and all(p.count("*") <= 1 and (p.endswith("#*") or "*" not in p) for p in patterns), lid
        assert "?" not in json.dumps(patterns), lid
    # archivers (3 x read, write), ListPartitions (merged), the other steps, the job (2 + 1), operators
    assert on_tables == 3 * 2 + 1 + 3 * 2 + 3 + 2


def test_no_role_holds_an_action_that_names_no_item(synthesized: tuple[TidemarkStack, dict[str, Any]]) -> None:
    """``ForAllValues`` is true of a request without leading keys: a Scan granted under the
    condition would read every item (test_leading_keys_evaluator.py shows it)."""
    granted = {action for _, s in every_statement(synthesized[1]) for action in listed(s["Action"])}
    assert not granted & {*KEYLESS_ACTIONS, "dynamodb:*", "*"}
    assert not {
        action for action in granted if action.startswith("dynamodb:") and ("Scan" in action or "PartiQL" in action)
    }


def test_the_tables_have_no_index(synthesized: tuple[TidemarkStack, dict[str, Any]]) -> None:
    """A Query of an index is authorized with the index's partition key as its leading key: an
    index would need conditions of its own (and the evaluator refuses to judge one)."""
    for table in (t for t in synthesized[1]["Resources"].values() if t["Type"] == "AWS::DynamoDB::Table"):
        assert not {"GlobalSecondaryIndexes", "LocalSecondaryIndexes"} & set(table["Properties"])


def test_each_archiver_reaches_its_own_streams_partitions_objects_and_hour_marks(
    synthesized: tuple[TidemarkStack, dict[str, Any]],
) -> None:
    stack, template = synthesized
    ledger = logical_id(stack.storage.ledger_table)
    for stream in STREAMS:
        role = logical_id(stack.archiver.functions[stream].role)  # type: ignore[arg-type]
        assert table_grants(role_statements(template, role), ledger) == [
            (READ, [f"PART#{stream}#*", f"HOUR#{stream}#*"]),
            (WRITE, [f"PART#{stream}#*", f"HOUR#{stream}#*", f"HOURS#{stream}"]),
        ]


def each(*families: str) -> list[str]:
    return [family.format(s=stream) for stream in STREAMS for family in families]


def test_each_sweeper_step_reaches_every_streams_families_it_uses(
    synthesized: tuple[TidemarkStack, dict[str, Any]],
) -> None:
    stack, template = synthesized
    ledger = logical_id(stack.storage.ledger_table)
    fns = stack.sweeper.functions
    expected = {
        fns.list_partitions: [(sorted(READ + WRITE), each("STREAM#{s}"))],
        fns.sweep_partition: [
            (READ, each("PART#{s}#*", "HOUR#{s}#*")),
            (WRITE, each("PART#{s}#*", "HOUR#{s}#*", "HOURS#{s}")),
        ],
        fns.reconcile: [
            (READ, each("PART#{s}#*", "HOUR#{s}#*", "HOURS#{s}", "STREAM#{s}")),
            (WRITE, each("HOURS#{s}", "STREAM#{s}")),
        ],
        fns.complete_hours: [
            (READ, each("PART#{s}#*", "HOUR#{s}#*", "HOURS#{s}", "STREAM#{s}")),
            (WRITE, each("HOURS#{s}", "STREAM#{s}")),
        ],
    }
    for fn, grants in expected.items():
        assert table_grants(role_statements(template, logical_id(fn.role)), ledger) == grants  # type: ignore[arg-type]


def test_the_job_reaches_only_its_streams_marks_objects_runs_and_aggregates(
    synthesized: tuple[TidemarkStack, dict[str, Any]],
) -> None:
    """Never a partition's state (raising a staged offset would make the archiver drop new records
    as duplicates) nor a committed object's item; only the streams it aggregates (``orders``)."""
    stack, template = synthesized
    statements = role_statements(template, logical_id(stack.pipeline.job_role))
    assert table_grants(statements, logical_id(stack.storage.ledger_table)) == [
        (["dynamodb:PutItem", "dynamodb:UpdateItem"], ["HOURS#orders", "RUNS#orders"]),
        (["dynamodb:Query"], ["HOUR#orders#*", "HOURS#orders"]),
    ]
    assert table_grants(statements, logical_id(stack.storage.aggregates_table)) == [
        (["dynamodb:BatchWriteItem", "dynamodb:Query"], ["AGG#orders#*"])
    ]
    arn = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/ledger"
    grants = TemplateGrants(template, {logical_id(stack.storage.ledger_table): ("ledger", arn)})
    evaluator = LeadingKeysEvaluator(grants.statements(logical_id(stack.pipeline.job_role)))
    assert evaluator.allows(ItemRequest("dynamodb:UpdateItem", arn, ("HOURS#orders",)))
    for key in ("PART#orders#0", "HOUR#orders#2026-11-21T08", "STREAM#orders", "HOURS#payments"):
        assert not evaluator.allows(ItemRequest("dynamodb:UpdateItem", arn, (key,))), key


def test_the_operator_policy_reaches_every_configured_stream(synthesized: tuple[TidemarkStack, dict[str, Any]]) -> None:
    stack, template = synthesized
    policy = template["Resources"][logical_id(stack.operators.policy)]["Properties"]["PolicyDocument"]
    assert table_grants(policy["Statement"], logical_id(stack.storage.ledger_table)) == [
        (READ, each("PART#{s}#*", "HOUR#{s}#*", "HOURS#{s}", "STREAM#{s}")),
        (WRITE, each("PART#{s}#*", "HOUR#{s}#*", "HOURS#{s}")),
    ]


# --- stream names cannot widen a pattern -----------------------------------------------------------


@pytest.mark.parametrize("name", ["orders#eu", "orders*", "order?", "orders/x", "Orders", "orders\n", "", "-x"])
def test_a_stream_name_with_a_separator_or_a_glob_is_refused(name: str) -> None:
    data = small_config_data()
    data["streams"][0]["name"] = name
    with pytest.raises(ConfigError):
        parse_config(data)
    with pytest.raises(ConfigError):
        Keys.PARTITIONS.pattern(name)


def test_the_patterns_are_the_ledgers_own_keys_with_a_wildcard() -> None:
    assert Keys.PARTITIONS.pattern("orders") == state_pk("orders", "*") == "PART#orders#*"
    assert Keys.OBJECTS.pattern("orders") == hour_pk("orders", "*")
    assert Keys.HOUR_MARKS.pattern("orders") == marks_pk("orders")
    assert Keys.REGISTRY.pattern("orders") == registry_pk("orders")


names = st.from_regex(STREAM_NAME.removesuffix("$") + r"\Z", fullmatch=True)
suffixes = st.text(st.characters(codec="ascii", exclude_characters="\n"), max_size=20)


@given(mine=names, theirs=names, tail=suffixes)
def test_no_streams_pattern_matches_another_streams_key(mine: str, theirs: str, tail: str) -> None:
    """Any two stream names the config accepts: none of one's patterns matches a key of the
    other's, whatever follows the stream in it (partition ids, hours, aggregation names)."""
    assume(mine != theirs)
    keys = [
        state_pk(theirs, tail),
        hour_pk(theirs, tail),
        marks_pk(theirs),
        registry_pk(theirs),
        f"RUNS#{theirs}",
        f"AGG#{theirs}#{tail}",
    ]
    statements = [
        {
            "Effect": "Allow",
            "Action": "dynamodb:GetItem",
            "Resource": "*",
            "Condition": {LEADING_KEYS_OPERATOR: {LEADING_KEYS: [family.pattern(mine) for family in Keys]}},
        }
    ]
    evaluator = LeadingKeysEvaluator(statements)
    for key in keys:
        assert not evaluator.allows(ItemRequest("dynamodb:GetItem", "t", (key,))), (mine, key)
    assert evaluator.allows(ItemRequest("dynamodb:GetItem", "t", (state_pk(mine, tail),)))


# --- the operator policy's size -------------------------------------------------------------------


def operator_warnings(stack: TidemarkStack) -> list[str]:
    return [
        str(message.entry.data)
        for message in Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("operator policy"))
    ]


def test_an_operator_policy_too_large_for_iam_is_warned_about(synthesized: tuple[TidemarkStack, Any]) -> None:
    """Each stream adds object ARNs, listing prefixes and seven key patterns to the one managed
    policy, whose size IAM limits (6,144 characters): seven streams of 20-character names pass
    it, and synth says so before CloudFormation refuses the policy."""
    assert operator_warnings(synthesized[0]) == []
    assert estimated_size(synthesized[0], list(synthesized[0].operators.statements.values())) < MANAGED_POLICY_CHARS
    data = small_config_data()
    template = data["streams"][0]
    data["streams"] = [
        {
            **json.loads(json.dumps(template)),
            "name": f"s{i}-" + "x" * 17,
            "source": {**template["source"], "topic": f"t{i}"},
            "aggregations": [],  # (the functions' 4 KB environment holds seven streams without them)
        }
        for i in range(7)
    ]
    stack, _ = synth_stack(parse_config(data), nag=False)
    (warning,) = operator_warnings(stack)
    assert "above IAM's 6144 for a managed policy" in warning and "7 streams" in warning
