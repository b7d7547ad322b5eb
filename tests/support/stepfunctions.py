"""Run the sweeper state machine that ``cdk synth`` produces, against moto server.

``synthesized_sweeper`` builds the CDK app (as ``cdk synth`` does) and takes the state machine's
``DefinitionString`` from the template, with each ``Fn::GetAtt [<function>, Arn]`` replaced by a
Lambda ARN named after the function's logical id. ``LambdaProxy`` is the HTTP endpoint moto
routes those invocations to (``moto_server(lambda_proxy=...)``): it runs each function's real
handler -- the ``Handler`` the template names, from ``functions/sweeper`` -- in this process.
"""

from __future__ import annotations

import json
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aws_cdk.assertions import Template

import app as cdk_app
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import cdk_context, logical_id
from tidemark.embedded.lambda_runtime import HandlerRef, LocalContext, load_handler

REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "123456789012"


@dataclass(frozen=True)
class SynthesizedSweeper:
    definition: str  # the state machine's definition, ready for CreateStateMachine
    handlers: dict[str, str]  # function logical id -> "handler.<function>"


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
    return SynthesizedSweeper(definition, used)


class LambdaProxy:
    """Runs a function's handler per POST ``/<function name>``; one invocation at a time, like
    one warm container per function."""

    def __init__(self) -> None:
        self.functions: dict[str, Callable[[Any, Any], Any]] = {}
        self.invocations: list[tuple[str, Any]] = []
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
                        body = json.dumps(proxy.functions[name](event, LocalContext(function_name=name)))
                    except Exception as exc:  # noqa: BLE001 - reported as a function error, like Lambda
                        traceback.print_exc()
                        headers["X-Amz-Function-Error"] = "Unhandled"
                        body = json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)})
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

    def load(self, handlers: dict[str, str], code_dir: Path) -> None:
        """Cold-start each function (its module reads the environment now)."""
        self.functions = {name: load_handler(HandlerRef(code_dir, handler)) for name, handler in handlers.items()}
        self.invocations.clear()


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


def run_execution(sfn: Any, state_machine_arn: str, timeout_s: float = 300) -> dict[str, Any]:
    """Start an execution and wait for it to end (moto runs it on a thread of its own)."""
    execution = sfn.start_execution(stateMachineArn=state_machine_arn, name=uuid.uuid4().hex, input="{}")[
        "executionArn"
    ]
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
