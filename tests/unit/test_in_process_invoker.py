"""InProcessInvoker's traceback option: the function's own logs always reach ``log``; the
traceback of a function error only when asked (the default, which the ESM and demo rely on)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tidemark.embedded.esm.invokers import InProcessInvoker
from tidemark.embedded.lambda_runtime import HandlerRef

FAILING_HANDLER = """
def handler(event, context):
    print("log line from the function")
    raise ValueError("boom")
"""


@pytest.mark.parametrize(("options", "traceback_logged"), [({}, True), ({"print_traceback": False}, False)])
def test_function_error_traceback_is_an_option(
    tmp_path: Path, options: dict[str, bool], traceback_logged: bool
) -> None:
    (tmp_path / "app.py").write_text(FAILING_HANDLER)
    log = io.StringIO()
    failed = InProcessInvoker(HandlerRef(tmp_path, "app.handler"), log, **options).invoke({})
    assert (failed.ok, failed.error) == (False, "ValueError: boom")
    assert "log line from the function" in log.getvalue()
    assert ("Traceback (most recent call last)" in log.getvalue()) is traceback_logged
