"""Run the sweeper state machine that ``cdk synth`` produces, against moto server.

``synthesized_sweeper`` builds the CDK app (as ``cdk synth`` does) and takes the state machine's
``DefinitionString`` from the template, with each ``Fn::GetAtt [<function>, Arn]`` replaced by a
Lambda ARN named after the function's logical id. ``LambdaProxy`` is the HTTP endpoint moto
routes those invocations to (``moto_server(lambda_proxy=...)``): it runs each function's real
handler -- the ``Handler`` the template names, from ``functions/sweeper`` -- in this process.
moto interprets the definition; this module adds what moto cannot see: time.

Time is modelled, not waited for. The functions read ``LambdaProxy.clock``: the wall clock plus
the time a test says work took (``ExecutionClock.spend``; ``Took`` makes an upload take minutes
at once). moto enforces an execution's ``TimeoutSeconds`` on the wall clock only, so it never
sees that time; ``run_execution(..., proxy=...)`` applies the rule on the proxy's clock, as Step
Functions does: an execution that runs longer than its ``TimeoutSeconds`` fails with
``States.Timeout`` (status ``TIMED_OUT``) and no state starts after that; a task already running
is not stopped (a Lambda invocation runs on), its result is lost. (States Language,
"TimeoutSeconds" of a state machine: https://states-language.net/spec.html#toplevelfields;
https://docs.aws.amazon.com/step-functions/latest/dg/sfn-stuck-execution.html.) A function that
runs past its own ``Timeout`` (the template's) fails as Lambda's does, with what it did done;
``context.get_remaining_time_in_millis()`` counts down on the proxy's clock, and
``$$.Execution.StartTime`` in a task's payload (``execution_started``) is the start on it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aws_cdk.assertions import Template

import app as cdk_app
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import cdk_context, logical_id
from tidemark.embedded.lambda_runtime import HandlerRef, LocalContext, load_handler
from tidemark.runtime import Runtime

REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "123456789012"


@dataclass(frozen=True)
class SynthesizedSweeper:
    definition: str  # the state machine's definition, ready for CreateStateMachine
    handlers: dict[str, str]  # function logical id -> "handler.<function>"
    timeouts_s: dict[str, int] = field(default_factory=dict)  # function logical id -> its Timeout


def _resolve(value: Any) -> str:
    if isinstance(value, str):
        return value
    if "Fn::GetAtt" in value and value["Fn::GetAtt"][1] == "Arn":
        return f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:{value['Fn::GetAtt'][0]}"
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(_resolve(part) for part in parts)
    raise AssertionError(f"unexpected intrinsic in the definition: {value}")


def synthesized_sweeper(config_path: Path) -> SynthesizedSweeper:
    app = cdk_app.build_app(config_path, context=cdk_context())
    stack = app.node.find_child("Tidemark")
    assert isinstance(stack, TidemarkStack)
    template = Template.from_stack(stack)
    machine = template.find_resources("AWS::StepFunctions::StateMachine")[logical_id(stack.sweeper.state_machine)]
    definition = _resolve(machine["Properties"]["DefinitionString"])
    functions = template.find_resources("AWS::Lambda::Function")
    handlers = {logical_id: fn["Properties"]["Handler"] for logical_id, fn in functions.items()}
    used = {logical_id: handler for logical_id, handler in handlers.items() if logical_id in definition}
    timeouts = {logical_id: int(functions[logical_id]["Properties"].get("Timeout", 3)) for logical_id in used}
    return SynthesizedSweeper(definition, used, timeouts)


class ExecutionClock:
    """The wall clock plus the time work was said to take (``spend``): a ``tidemark.clock.Clock``."""

    def __init__(self) -> None:
        self._spent_ms = 0
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self._spent_ms

    def spend(self, *, seconds: float) -> None:
        with self._lock:
            self._spent_ms += int(seconds * 1000)


class Took:
    """A crash-point hook that makes the work at ``point`` take ``seconds`` on ``clock``, every
    time it is hit (a slow upload)."""

    def __init__(self, point: str, clock: ExecutionClock, seconds: float) -> None:
        self.point, self.clock, self.seconds = point, clock, seconds
        self.hits = 0

    def hit(self, name: str) -> None:
        if name == self.point:
            self.hits += 1
            self.clock.spend(seconds=self.seconds)


@dataclass
class ClockedContext(LocalContext):
    """A Lambda context whose remaining time counts down on the proxy's clock."""

    clock: ExecutionClock = field(default_factory=ExecutionClock)
    started_ms: int = 0

    def get_remaining_time_in_millis(self) -> int:
        return self.timeout_ms - (self.clock.now_ms() - self.started_ms)


@dataclass
class ModelledExecution:
    """One execution as Step Functions times it, on the proxy's clock."""

    started_ms: int
    timeout_s: int | None  # the definition's TimeoutSeconds
    ended_ms: int = 0  # when its last task returned
    refused: list[str] = field(default_factory=list)  # tasks due after the timeout: never started

    def out_of_time(self, now_ms: int) -> bool:
        return self.timeout_s is not None and now_ms - self.started_ms > self.timeout_s * 1000

    @property
    def timed_out(self) -> bool:
        return bool(self.refused) or self.out_of_time(self.ended_ms)

    @property
    def took_s(self) -> float:
        return (max(self.ended_ms, self.started_ms) - self.started_ms) / 1000


class FunctionError(Exception):
    """A function error with the ``errorType`` Step Functions names the failure after."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def iso(ms: int) -> str:
    """A time as ``$$.Execution.StartTime`` renders it."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LambdaProxy:
    """Runs a function's handler per POST ``/<function name>``; one invocation at a time, like
    one warm container per function. The execution ``run_execution`` runs is timed on ``clock``."""

    def __init__(self) -> None:
        self.functions: dict[str, Callable[[Any, Any], Any]] = {}
        self.timeouts_s: dict[str, int] = {}
        self.invocations: list[tuple[str, Any]] = []
        self.results: list[tuple[str, Any]] = []  # what each invocation returned, or its errorType
        self.clock = ExecutionClock()
        self.execution: ModelledExecution | None = None
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                name = self.path.strip("/")
                event = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
                headers: dict[str, str] = {}
                with proxy._lock:
                    proxy.invocations.append((name, event))
                    try:
                        body = json.dumps(proxy.invoke(name, event))
                    except Exception as exc:  # noqa: BLE001 - reported as a function error, like Lambda
                        if isinstance(exc, FunctionError):
                            error_type = exc.error_type
                        else:
                            traceback.print_exc()
                            error_type = type(exc).__name__
                        proxy.results.append((name, {"errorType": error_type}))
                        headers["X-Amz-Function-Error"] = "Unhandled"
                        body = json.dumps({"errorType": error_type, "errorMessage": str(exc)})
                data = body.encode()
                self.send_response(200)
                for key, value in {**headers, "Content-Length": str(len(data))}.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def invoke(self, name: str, event: Any) -> Any:
        """One invocation, timed: refused when the execution is out of time (Step Functions ended
        it before this state), failed when it outlasts the function's timeout."""
        execution = self.execution
        if execution is not None and execution.out_of_time(self.clock.now_ms()):
            execution.refused.append(name)
            raise FunctionError("States.Timeout", "the execution had timed out before this state started (modelled)")
        if execution is not None and isinstance(event, dict) and "execution_started" in event:
            # moto rendered $$.Execution.StartTime on the wall clock; on this one it is this
            event = {**event, "execution_started": iso(execution.started_ms)}
        timeout_s = self.timeouts_s.get(name, 900)
        started = self.clock.now_ms()
        context = ClockedContext(function_name=name, timeout_ms=timeout_s * 1000, clock=self.clock, started_ms=started)
        try:
            result = self.functions[name](event, context)
        finally:
            if execution is not None:
                execution.ended_ms = self.clock.now_ms()
        if self.clock.now_ms() - started > timeout_s * 1000:
            raise FunctionError("Sandbox.Timedout", f"Task timed out after {timeout_s}.00 seconds (modelled)")
        self.results.append((name, result))
        return result

    def load(self, handlers: dict[str, str], code_dir: Path, timeouts_s: dict[str, int] | None = None) -> None:
        """Cold-start each function (its module reads the environment now), on a fresh clock."""
        self.functions = {name: load_handler(HandlerRef(code_dir, handler)) for name, handler in handlers.items()}
        self.timeouts_s = dict(timeouts_s or {})
        self.clock = ExecutionClock()
        for name in self.functions:
            self.runtime(name).clock = self.clock
        self.execution = None
        self.invocations.clear()
        self.results.clear()

    def runtime(self, name: str) -> Runtime:
        """Function ``name``'s ``RUNTIME`` (its cold start's)."""
        runtime: Runtime = sys.modules[self.functions[name].__module__].RUNTIME
        return runtime

    def begin(self, timeout_s: int | None) -> ModelledExecution:
        """An execution starts now, on the proxy's clock: its tasks are timed against it."""
        self.execution = ModelledExecution(self.clock.now_ms(), timeout_s)
        return self.execution


@contextmanager
def lambda_proxy() -> Iterator[LambdaProxy]:
    proxy = LambdaProxy()
    thread = threading.Thread(target=proxy.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.server.shutdown()
        proxy.server.server_close()
        thread.join()


def run_execution(
    sfn: Any, state_machine_arn: str, timeout_s: float = 300, *, proxy: LambdaProxy | None = None
) -> dict[str, Any]:
    """Start an execution and wait for it to end (moto runs it on a thread of its own).

    With ``proxy``, the execution is timed on its clock: if it ran longer than the definition's
    ``TimeoutSeconds``, it ends ``TIMED_OUT`` with ``States.Timeout``, whatever moto made of it."""
    modelled = None
    if proxy is not None:
        definition = json.loads(sfn.describe_state_machine(stateMachineArn=state_machine_arn)["definition"])
        limit = definition.get("TimeoutSeconds")
        modelled = proxy.begin(int(limit) if limit is not None else None)
    execution = sfn.start_execution(stateMachineArn=state_machine_arn, name=uuid.uuid4().hex, input="{}")[
        "executionArn"
    ]
    described = _wait(sfn, execution, timeout_s)
    if modelled is not None and modelled.timed_out:
        return {
            **{key: value for key, value in described.items() if key != "output"},
            "status": "TIMED_OUT",
            "error": "States.Timeout",
            "cause": f"ran {modelled.took_s:.0f}s, TimeoutSeconds {modelled.timeout_s} (modelled); "
            f"states never started: {modelled.refused}",
        }
    return described


def _wait(sfn: Any, execution: str, timeout_s: float) -> dict[str, Any]:
    done = threading.Event()
    deadline = threading.Timer(timeout_s, done.set)
    deadline.start()
    try:
        while True:
            described: dict[str, Any] = sfn.describe_execution(executionArn=execution)
            if described["status"] != "RUNNING":
                return described
            if done.wait(0.1):
                raise AssertionError(f"execution still running after {timeout_s}s")
    finally:
        deadline.cancel()
