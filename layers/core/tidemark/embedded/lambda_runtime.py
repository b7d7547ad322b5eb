"""Run a Lambda handler from this repository on the local machine, the way Lambda would.

``HandlerRef`` names a handler the way a function definition does (code directory plus
``module.function``); ``load_handler`` imports that file as its own module, so each load is a
fresh "container" whose cold start runs the module's top level exactly once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidemark.exceptions import ConfigError

Handler = Callable[[Any, Any], Any]
_loads = itertools.count()


@dataclass(frozen=True, slots=True)
class HandlerRef:
    code_dir: Path  # the function's code directory, e.g. functions/archiver
    handler: str = "handler.lambda_handler"  # <module file>.<function>, as in the Lambda definition

    @classmethod
    def for_function(cls, project_dir: Path, name: str) -> HandlerRef:
        return cls(project_dir / "functions" / name)

    @property
    def module_file(self) -> Path:
        return self.code_dir / f"{self.handler.rsplit('.', 1)[0]}.py"

    @property
    def function(self) -> str:
        return self.handler.rsplit(".", 1)[1]

    def check(self) -> HandlerRef:
        if "." not in self.handler:
            raise ConfigError(f"handler must look like 'module.function', got {self.handler!r}")
        if not self.module_file.is_file():
            raise ConfigError(f"no handler module at {self.module_file} (run from the project directory)")
        return self


def load_handler(ref: HandlerRef) -> Handler:
    """Import the handler's module under a fresh name (a cold start) and return the function."""
    ref.check()
    name = f"tidemark_local_{ref.code_dir.name}_{next(_loads)}"
    spec = importlib.util.spec_from_file_location(name, ref.module_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    function = getattr(module, ref.function, None)
    if not callable(function):
        raise ConfigError(f"{ref.module_file} has no function {ref.function!r}")
    handler: Handler = function
    return handler


@dataclass
class LocalContext:
    """The Lambda context object, with what Powertools and the handlers read from it."""

    function_name: str = "tidemark-archiver"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 1024
    timeout_ms: int = 840_000  # the stack keeps functions under the ESM's 14-minute limit
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/tidemark-archiver"
    log_stream_name: str = "local"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return self.timeout_ms


@contextlib.contextmanager
def patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    """The in-process function reads its settings from the environment, as on Lambda."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
