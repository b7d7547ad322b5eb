"""``tests/support/simulate_leading_keys.py`` against a stand-in for ``iam:SimulateCustomPolicy``.

The script asks AWS's policy simulator what the evaluator answers (no AWS here: it is documented,
not run). Here a fake IAM client answers with a second, independent reading of the same
statements (``fnmatch`` for ``StringLike``): the two agree on every question, the questions are
shaped as the simulator takes them, and a simulator that disagrees makes the script fail.
"""

from __future__ import annotations

import io
import json
from fnmatch import fnmatchcase
from typing import Any

from tests.support.harness import small_config
from tests.support.simulate_leading_keys import FOREIGN, run


class FakeSimulator:
    """``SimulateCustomPolicy`` for Allow statements with ``ForAllValues:StringLike`` on
    ``dynamodb:LeadingKeys``: what the IAM User Guide says of them, written without the evaluator."""

    def __init__(self, *, always: str | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.always = always

    def simulate_custom_policy(self, **request: Any) -> dict[str, Any]:
        self.calls.append(request)
        (document,) = request["PolicyInputList"]
        statements = json.loads(document)["Statement"]
        (table,) = request["ResourceArns"]
        keys = [value for entry in request["ContextEntries"] for value in entry["ContextKeyValues"]]
        results = []
        for action in request["ActionNames"]:
            allowed = False
            for statement in statements:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                resources = (
                    statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
                )
                if action not in actions or not any(fnmatchcase(table, r) for r in resources):
                    continue
                patterns = statement.get("Condition", {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
                allowed = allowed or patterns is None or all(any(fnmatchcase(k, p) for p in patterns) for k in keys)
            results.append(
                {"EvalActionName": action, "EvalDecision": self.always or ("allowed" if allowed else "implicitDeny")}
            )
        return {"EvaluationResults": results}


def test_the_evaluator_and_an_independent_reading_agree_on_every_question() -> None:
    simulator, out = FakeSimulator(), io.StringIO()
    assert run(simulator, small_config(), out) == 0, out.getvalue()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    summary = lines.pop()
    assert summary["disagreements"] == 0 and summary["questions"] == len(lines) > 100
    decided = {
        (line["role"], line["action"], line["key"]): line["aws"] for line in lines if line["table"] == "tidemark-ledger"
    }
    assert decided[("archiver-orders", "dynamodb:PutItem", "PART#orders#0")] == "allowed"
    assert decided[("archiver-orders", "dynamodb:PutItem", f"PART#{FOREIGN}#0")] == "implicitDeny"
    assert decided[("job", "dynamodb:UpdateItem", "PART#orders#0")] == "implicitDeny"
    assert decided[("job", "dynamodb:UpdateItem", "HOURS#orders")] == "allowed"
    assert decided[("operator", "dynamodb:PutItem", "STREAM#orders")] == "implicitDeny"
    assert {line["aws"] for line in lines if line["action"] == "dynamodb:Scan"} == {"implicitDeny"}
    assert [line for line in lines if line["table"] == "tidemark-aggregates" and line["aws"] == "allowed"]
    # as the simulator takes them: a list context key, the role's statements as one policy
    keyed = [call for call in simulator.calls if call["ContextEntries"]]
    assert {entry["ContextKeyType"] for call in keyed for entry in call["ContextEntries"]} == {"stringList"}
    assert all("dynamodb:Scan" in call["ActionNames"] for call in simulator.calls)


def test_a_simulator_that_disagrees_fails_the_run() -> None:
    out = io.StringIO()
    assert run(FakeSimulator(always="allowed"), small_config(), out) == 1
    assert json.loads(out.getvalue().splitlines()[-1])["disagreements"] > 0
