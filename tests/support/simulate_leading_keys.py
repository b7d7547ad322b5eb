"""Check :class:`tests.support.iam.LeadingKeysEvaluator` against AWS's own policy simulator.

The suite evaluates the ``dynamodb:LeadingKeys`` conditions of the template itself (moto ignores
them); this asks AWS the same questions, with an account's credentials::

    .venv/bin/python -m tests.support.simulate_leading_keys --config config/tidemark.yaml [--profile NAME]

It synthesizes the stack for the configuration (nothing is deployed or created), takes each role's
statements from the template (each function role, the job role, the operator policy), and for
every DynamoDB action a role holds, and ``dynamodb:Scan``, asks ``iam:SimulateCustomPolicy``
whether the role's statements allow it on its table with ``dynamodb:LeadingKeys`` set to a key of
each family (``stacks.grants.Keys``) of each configured stream and of a stream that is not
configured -- and once with no leading key (a Scan's). Each answer is compared with the
evaluator's. It prints one JSON line per question and a summary, and exits 1 if AWS and the
evaluator disagree anywhere. The caller needs ``iam:SimulateCustomPolicy`` (which has no
resource: ``"*"``); the simulator evaluates the policies given, so the account needs no Tidemark.

Not run by the suite (no AWS here): ``tests/unit/test_simulate_leading_keys.py`` runs it against
a stubbed IAM client.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stacks.grants import LEADING_KEYS, Keys
from tests.support.cdk import logical_id, synth_stack
from tests.support.iam import ACCOUNT, PARTITION, REGION, ItemRequest, LeadingKeysEvaluator, TemplateGrants
from tidemark.config import TidemarkConfig, load_config

#: a stream no configuration here has: its keys must be refused to every role
FOREIGN = "not-configured"
LEDGER = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/tidemark-ledger"
AGGREGATES = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/tidemark-aggregates"


def example_key(family: Keys, stream: str) -> str:
    """A real key of the family: the pattern with its ``*`` made concrete."""
    return family.pattern(stream).replace("*", {Keys.AGGREGATES: "orders_by_product#2026-11-21T08"}.get(family, "0"))


@dataclass(frozen=True)
class Question:
    role: str
    table: str
    actions: tuple[str, ...]
    key: str | None  # None: no leading key at all (a Scan)


@dataclass(frozen=True)
class Answer:
    question: Question
    action: str
    aws: str  # allowed | implicitDeny | explicitDeny
    evaluator: bool

    @property
    def agrees(self) -> bool:
        return (self.aws == "allowed") is self.evaluator


def role_policies(config: TidemarkConfig) -> dict[str, list[dict[str, Any]]]:
    """Each role's statements from the template of ``config``, resolved to placeholder tables."""
    stack, template = synth_stack(config, nag=False)
    document = template.to_json()
    storage = stack.storage
    grants = TemplateGrants(
        document,
        {
            logical_id(storage.ledger_table): ("tidemark-ledger", LEDGER),
            logical_id(storage.aggregates_table): ("tidemark-aggregates", AGGREGATES),
        },
    )
    roles: dict[str, Any] = {f"archiver-{name}": fn.role for name, fn in stack.archiver.functions.items()}
    sweeper = stack.sweeper.functions
    roles |= {
        "list_partitions": sweeper.list_partitions.role,
        "sweep_partition": sweeper.sweep_partition.role,
        "reconcile": sweeper.reconcile.role,
        "complete_hours": sweeper.complete_hours.role,
    }
    if stack.pipeline.enabled:
        roles["job"] = stack.pipeline.job_role
    policies = {name: grants.statements(logical_id(role)) for name, role in roles.items()}
    managed = document["Resources"][logical_id(stack.operators.policy)]["Properties"]["PolicyDocument"]
    policies["operator"] = list(grants.resolve(managed["Statement"]))
    return policies


def questions(policies: Mapping[str, Sequence[Mapping[str, Any]]], streams: Sequence[str]) -> Iterator[Question]:
    for role, statements in policies.items():
        held = sorted(
            {
                action
                for statement in statements
                for action in (statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]])
                if action.startswith("dynamodb:")
            }
        )
        for table in (LEDGER, AGGREGATES):
            on_table = json.dumps([s for s in statements if table in json.dumps(s.get("Resource"))])
            if table not in on_table:
                continue
            actions = (*held, "dynamodb:Scan")
            yield Question(role, table, actions, None)
            for stream in (*streams, FOREIGN):
                for family in Keys:
                    yield Question(role, table, actions, example_key(family, stream))


def ask(iam: Any, statements: Sequence[Mapping[str, Any]], question: Question) -> list[Answer]:
    """AWS's decision for each action of the question, next to the evaluator's."""
    context = (
        [{"ContextKeyName": LEADING_KEYS, "ContextKeyValues": [question.key], "ContextKeyType": "stringList"}]
        if question.key is not None
        else []
    )
    reply = iam.simulate_custom_policy(
        PolicyInputList=[json.dumps({"Version": "2012-10-17", "Statement": list(statements)})],
        ActionNames=list(question.actions),
        ResourceArns=[question.table],
        ContextEntries=context,
    )
    evaluator = LeadingKeysEvaluator(statements)
    keys = (question.key,) if question.key is not None else ()
    return [
        Answer(
            question,
            result["EvalActionName"],
            result["EvalDecision"],
            evaluator.allows(ItemRequest(result["EvalActionName"], question.table, keys)),
        )
        for result in reply["EvaluationResults"]
    ]


def run(iam: Any, config: TidemarkConfig, out: Any = sys.stdout) -> int:
    policies = role_policies(config)
    answers = [
        answer
        for question in questions(policies, [stream.name for stream in config.streams])
        for answer in ask(iam, policies[question.role], question)
    ]
    for answer in answers:
        q = answer.question
        line = {"role": q.role, "table": q.table.rsplit("/", 1)[1], "action": answer.action, "key": q.key}
        print(json.dumps({**line, "aws": answer.aws, "evaluator": answer.evaluator, "agree": answer.agrees}), file=out)
    disagreements = [answer for answer in answers if not answer.agrees]
    print(json.dumps({"questions": len(answers), "disagreements": len(disagreements)}), file=out)
    return 1 if disagreements else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, required=True, help="the stream configuration to synthesize")
    parser.add_argument("--profile", help="AWS profile (default: the usual credential chain)")
    args = parser.parse_args(argv)
    import boto3

    session = boto3.Session(profile_name=args.profile)
    return run(session.client("iam"), load_config(args.config))


if __name__ == "__main__":
    sys.exit(main())
