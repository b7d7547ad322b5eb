"""How the local event source mapping runs the function: in this process or in a child.

``InProcessInvoker`` is one warm container: the handler module is loaded once and every
invocation reuses it (and its caches). ``ChildInvoker`` runs each invocation in a new process
-- a cold container -- which is how chaos kills a handler for real: the child is armed with a
crash point (``TIDEMARK_CRASH_AT``) and dies with ``os._exit`` when it gets there.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from tidemark.embedded.children import die_with_parent
from tidemark.embedded.lambda_runtime import Handler, HandlerRef, LocalContext, load_handler
from tidemark.faults import CRASH_EXIT_CODE, ENV_CRASH_AT
from tidemark.sources import PartitionId

CHILD_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class Invocation:
    ok: bool
    response: Any = None
    error: str | None = None  # the function error, as Lambda would report it
    crashed: bool = False  # the process died (killed at a crash point)


class Invoker(Protocol):
    def invoke(self, event: dict[str, Any]) -> Invocation: ...


class InProcessInvoker:
    """A warm container in this process; the handler's stdout (logs, EMF) goes to ``log``.

    A function error's traceback is written to ``log`` too, as Lambda's runtime logs it, unless
    ``print_traceback`` is False: ``tidemark invoke`` reports the error as one line and keeps the
    traceback for ``--verbose``, while the local ESM and the demo keep it in their handler log.
    """

    def __init__(self, ref: HandlerRef, log: IO[str], *, print_traceback: bool = True) -> None:
        self._ref = ref
        self._log = log
        self._print_traceback = print_traceback
        self._handler: Handler | None = None

    def _loaded(self) -> Handler:
        if self._handler is None:
            self._handler = load_handler(self._ref)  # the cold start, once
        return self._handler

    def invoke(self, event: dict[str, Any]) -> Invocation:
        with contextlib.redirect_stdout(self._log):
            try:
                response = self._loaded()(event, LocalContext())
            except Exception as exc:  # noqa: BLE001 - any function error fails the invocation, like Lambda
                if self._print_traceback:
                    traceback.print_exc(file=self._log)
                return Invocation(ok=False, error=f"{type(exc).__name__}: {exc}")
        return Invocation(ok=True, response=response)


class ChildInvoker:
    """Each invocation in a fresh process with ``env``; optionally armed to crash."""

    def __init__(self, ref: HandlerRef, env: Mapping[str, str], log_path: Path) -> None:
        self._ref = ref
        self._env = dict(env)
        self._log_path = log_path

    def invoke(self, event: dict[str, Any], crash_at: str | None = None) -> Invocation:
        return self.run(["invoke", "--event", "{input}"], event, crash_at)

    def drain(self, stream: str, partitions: list[PartitionId], crash_at: str | None = None) -> Invocation:
        """Write every open buffer of these partitions now (``PartitionWriter.drain``)."""
        args = ["drain", "--stream", stream, *(f"--partition={p}" for p in partitions)]
        return self.run(args, None, crash_at)

    def run(self, args: list[str], payload: Any, crash_at: str | None) -> Invocation:
        env = {**os.environ, **self._env}
        env.pop(ENV_CRASH_AT, None)
        if crash_at:
            env[ENV_CRASH_AT] = crash_at
        with tempfile.TemporaryDirectory(prefix="tidemark-invoke-") as scratch:
            request, response = Path(scratch) / "event.json", Path(scratch) / "response.json"
            request.write_text(json.dumps(payload))
            command = [
                sys.executable,
                "-m",
                "tidemark.embedded.esm.child",
                "--code-dir",
                str(self._ref.code_dir),
                "--handler",
                self._ref.handler,
                "--response",
                str(response),
                *(arg.replace("{input}", str(request)) for arg in args),
            ]
            with self._log_path.open("ab") as log:
                # run() kills the child if this process is interrupted while waiting.
                done = subprocess.run(
                    command,
                    env=env,
                    stdout=log,
                    stderr=log,
                    timeout=CHILD_TIMEOUT_S,
                    check=False,
                    preexec_fn=die_with_parent(),
                )
            if done.returncode == CRASH_EXIT_CODE:
                return Invocation(ok=False, crashed=True, error=f"process killed at crash point {crash_at}")
            if done.returncode != 0:
                return Invocation(ok=False, error=f"exit code {done.returncode} (see {self._log_path})")
            return Invocation(ok=True, response=json.loads(response.read_text()))
