"""Loading a function's handler module the way a Lambda cold start does, and reading its EMF."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest


def load_handler(monkeypatch: pytest.MonkeyPatch, path: Path, env: dict[str, str]) -> ModuleType:
    """Import the handler module at ``path`` afresh, with ``env`` set (its cold start runs again)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location(f"{path.parent.name}_handler_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop(spec.name, None)
    spec.loader.exec_module(module)
    return module


def lambda_context(function_name: str, request: int = 1, remaining_ms: int = 270_000) -> SimpleNamespace:
    """What Powertools' ``inject_lambda_context`` reads from a Lambda context, and the remaining
    time the sweeper's steps budget with."""
    return SimpleNamespace(
        function_name=function_name,
        memory_limit_in_mb=1024,
        invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}",
        aws_request_id=f"4f1c2d3e-0000-4000-8000-{request:012d}",
        get_remaining_time_in_millis=lambda: remaining_ms,
    )


def emf_documents(output: str) -> list[dict[str, Any]]:
    """The EMF documents a handler printed (one JSON object per line with an ``_aws`` key)."""
    return [json.loads(line) for line in output.splitlines() if line.startswith("{") and '"_aws"' in line]
