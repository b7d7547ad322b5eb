"""``sum()`` of integers that never wraps silently: exact within int64, a loud error beyond.

The job runs Spark with ANSI mode off (a text field holding ``"—"`` among numbers must sum as
null there, not fail its hour for good), and then Spark's ``sum`` of an integer column wraps
around past int64 (three times ``2**62`` sum to ``-2**62``) and its ``sum`` of a
``decimal(38,0)`` column is null past 38 digits -- a wrong figure stored without a word.
:func:`guard_sums` rewrites each ``sum(x)`` of a metric whose argument is an integer or a
decimal so that an overflow raises instead (``raise_error``: the hour fails, is reported and
stays dirty); the figure and its type are otherwise what ``sum(x)`` gives:

* integers: ``sum`` over ``x`` cast to ``decimal(38,0)`` (exact: it would take 10**19 rows to
  overflow), cast back to ``bigint`` when it fits, else the error;
* decimals: ``sum(x)``, unless it is null while ``count(x)`` is not zero (Spark's overflow),
  then the error.

``DISTINCT`` and a ``FILTER (WHERE ...)`` clause are kept on every aggregate of the rewrite. A
``sum`` inside a string literal, a backquoted name, or a window (``OVER``) is left alone. The
argument's type comes from ``type_of`` (Spark's analysis of the argument over the records).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pyspark.sql.types import ByteType, DataType, DecimalType, IntegerType, LongType, ShortType

INTEGERS = (ByteType, ShortType, IntegerType, LongType)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: the text of the error a guarded sum raises (the run's failure reason starts with it)
OVERFLOW = "tidemark: sum overflow"

_SUM = re.compile(r"(?<![\w.`$])sum\s*\(", re.IGNORECASE)
_DISTINCT = re.compile(r"\s*(distinct|all)\s+", re.IGNORECASE)
_FILTER = re.compile(r"\s*filter\s*\(", re.IGNORECASE)
_OVER = re.compile(r"\s*over\b", re.IGNORECASE)


def _skip_quoted(text: str, at: int) -> int:
    """The index after the literal or backquoted name opening at ``at`` (SQL doubles a quote
    to escape it; Spark also takes a backslash in string literals)."""
    quote = text[at]
    index = at + 1
    while index < len(text):
        char = text[index]
        if char == "\\" and quote != "`":
            index += 2
            continue
        if char == quote:
            if index + 1 < len(text) and text[index + 1] == quote:
                index += 2
                continue
            return index + 1
        index += 1
    return len(text)


def _closing(text: str, opening: int) -> int | None:
    """The index of the ``)`` closing the ``(`` at ``opening``, or None if it is never closed."""
    depth = 0
    index = opening
    while index < len(text):
        char = text[index]
        if char in "'\"`":
            index = _skip_quoted(text, index)
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return None


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` is SQL rather than a string literal or a backquoted name."""
    spans, start, index = [], 0, 0
    while index < len(text):
        if text[index] in "'\"`":
            spans.append((start, index))
            index = start = _skip_quoted(text, index)
            continue
        index += 1
    spans.append((start, len(text)))
    return spans


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _guarded(argument: str, distinct: str, clause: str, kind: DataType, spelled: str) -> str:
    message = _literal(
        f"{OVERFLOW}: {spelled} is beyond "
        + (
            "int64; write sum(cast(... as decimal(38,0))) to sum it exactly to 38 digits"
            if isinstance(kind, INTEGERS)
            else "38 digits, more than Spark's decimal (and DynamoDB's number) holds"
        )
    )
    if isinstance(kind, INTEGERS):
        exact = f"sum({distinct}CAST(({argument}) AS DECIMAL(38,0))){clause}"
        return (
            f"(CASE WHEN {exact} IS NULL THEN CAST(NULL AS BIGINT) "
            f"WHEN {exact} BETWEEN {INT64_MIN} AND {INT64_MAX} THEN CAST({exact} AS BIGINT) "
            f"ELSE raise_error({message}) END)"
        )
    total = f"sum({distinct}{argument}){clause}"
    return (
        f"(CASE WHEN {total} IS NULL AND count({distinct}{argument}){clause} > 0 "
        f"THEN raise_error({message}) ELSE {total} END)"
    )


def guard_sums(expression: str, type_of: Callable[[str], DataType | None]) -> str:
    """``expression`` with every ``sum(...)`` of an integer or decimal argument guarded against
    overflow (see the module's docstring); ``type_of`` gives an argument's type, or None when
    it cannot be resolved (the sum is then left as written)."""
    out: list[str] = []
    done = 0
    for start, end in _code_spans(expression):
        for match in _SUM.finditer(expression, start, end):
            if match.start() < done:
                continue
            opening = match.end() - 1
            closing = _closing(expression, opening)
            if closing is None:
                return expression  # not SQL Spark parses: its own error says so
            inner = expression[opening + 1 : closing]
            distinct = ""
            modifier = _DISTINCT.match(inner)
            if modifier:
                distinct = modifier.group(1).upper() + " "
                inner = inner[modifier.end() :]
            after = closing + 1
            clause = ""
            filtered = _FILTER.match(expression, after)
            if filtered:
                clause_end = _closing(expression, filtered.end() - 1)
                if clause_end is None:
                    return expression
                clause = " " + expression[after : clause_end + 1].strip()
                after = clause_end + 1
            if _OVER.match(expression, after):
                continue  # a window function: not an aggregate of the group
            kind = type_of(inner)
            if not isinstance(kind, (*INTEGERS, DecimalType)):
                continue
            spelled = expression[match.start() : after].strip()
            out.append(expression[done : match.start()])
            out.append(_guarded(inner, distinct, clause, kind, spelled))
            done = after
    out.append(expression[done:])
    return "".join(out)
