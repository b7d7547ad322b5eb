"""moto in server mode (real HTTP on loopback), with DynamoDB's write atomicity.

DynamoDB applies a conditional write atomically: the condition and the write happen as one
step per item. moto's server handles requests on several threads and evaluates conditions
without a lock, so two concurrent conditional puts can both "succeed" -- a race real DynamoDB
never lets happen and one that the exactly-once ledger depends on. This launcher serves the
same moto application with one lock around each request, restoring that atomicity.

Run: ``python -m tidemark.embedded.moto_server --port 0`` (0 picks a free port; the chosen
endpoint is printed as the first line on stdout).

For the sweeper's state machine test, ``--execute-state-machines`` makes moto's Step Functions
interpreter run executions, and ``--lambda-proxy URL`` routes every Lambda invocation to
``URL/<function name>`` (an HTTP endpoint that runs the real handlers), since moto would
otherwise need Docker to run a function.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from tidemark.embedded.children import die_with_parent
from tidemark.exceptions import TidemarkError

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Serialised:
    """WSGI middleware: one request at a time (responses are fully read inside the lock).

    Lambda invocations are not serialised: a proxied function calls back into this server
    (S3, DynamoDB) while its invocation request is still open."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        if path.startswith("/2015-03-31/functions/") and path.rstrip("/").endswith("/invocations"):
            return list(self._app(environ, start_response))
        with self._lock:
            return list(self._app(environ, start_response))


def _route_lambda_invocations(proxy: str) -> None:
    """Invoke functions by POSTing the payload to ``proxy/<function name>`` instead of Docker."""
    from moto.awslambda.models import LambdaBackend

    def invoke(
        self: LambdaBackend, function_name: str, qualifier: str | None, body: Any, headers: Any, response_headers: Any
    ) -> bytes:
        name = function_name.rsplit(":function:", 1)[-1].split(":", 1)[0]
        data = body if isinstance(body, bytes) else str(body or "").encode()
        request = urllib.request.Request(f"{proxy}/{name}", data=data, method="POST")
        with urllib.request.urlopen(request, timeout=900) as reply:
            payload: bytes = reply.read()
            error = reply.headers.get("X-Amz-Function-Error")
        if error:
            response_headers["x-amz-function-error"] = error
        response_headers["Content-Length"] = str(len(payload))
        return payload

    LambdaBackend.invoke = invoke  # type: ignore[method-assign]


def _execute_state_machines() -> None:
    from moto.core.config import default_user_config

    default_user_config["stepfunctions"] = {"execute_state_machine": True}


def serve(host: str, port: int, *, lambda_proxy: str | None = None, execute_state_machines: bool = False) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    if lambda_proxy:
        _route_lambda_invocations(lambda_proxy)
    if execute_state_machines:
        _execute_state_machines()
    app = _Serialised(DomainDispatcherApplication(create_backend_app))
    server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)
    # moto calls itself back (Step Functions -> Lambda) on this port: the one actually bound.
    os.environ["MOTO_PORT"] = str(server.server_port)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"http://{host}:{server.server_port}", flush=True)
    server.serve_forever()


@contextmanager
def moto_server(
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout: float = 60.0,
    *,
    lambda_proxy: str | None = None,
    execute_state_machines: bool = False,
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """Start the server in a child process (on a free port by default), yield its endpoint,
    always stop it. ``command`` replaces this module's entry point (a benchmark's instrumented
    server); it gets the same arguments and must print the endpoint first, as ``serve`` does."""
    extra = ["--lambda-proxy", lambda_proxy] if lambda_proxy else []
    extra += ["--execute-state-machines"] if execute_state_machines else []
    entry = list(command) if command else [sys.executable, "-m", "tidemark.embedded.moto_server"]
    process = subprocess.Popen(
        [*entry, "--host", host, "--port", str(port), *extra],
        env=None if env is None else {**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=die_with_parent(),
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip()
        if not endpoint.startswith("http://"):
            raise TidemarkError(f"moto server failed to start on {host}:{port} (exit code {process.wait()})")
        # Keep draining stdout so a chatty server can never block on a full pipe.
        threading.Thread(target=process.stdout.read, daemon=True).start()
        deadline = time.monotonic() + startup_timeout
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise TidemarkError(f"moto server at {endpoint} did not answer") from None
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    parser.add_argument("--lambda-proxy", help="route Lambda invocations to URL/<function name> (HTTP POST)")
    parser.add_argument("--execute-state-machines", action="store_true", help="run Step Functions executions")
    args = parser.parse_args(argv)
    serve(args.host, args.port, lambda_proxy=args.lambda_proxy, execute_state_machines=args.execute_state_machines)


if __name__ == "__main__":
    main()
