"""moto in server mode (real HTTP on loopback), with DynamoDB's write atomicity.

DynamoDB applies a conditional write atomically: the condition and the write happen as one
step per item. moto's server handles requests on several threads and evaluates conditions
without a lock, so two concurrent conditional puts can both "succeed" -- a race real DynamoDB
never lets happen and one that the exactly-once ledger depends on. This launcher serves the
same moto application with one lock around each request, restoring that atomicity.

Run: ``python -m tidemark.embedded.moto_server --port 0`` (0 picks a free port; the chosen
endpoint is printed as the first line on stdout).
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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tidemark.embedded.children import die_with_parent
from tidemark.exceptions import TidemarkError

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Serialised:
    """WSGI middleware: one request at a time (responses are fully read inside the lock)."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with self._lock:
            return list(self._app(environ, start_response))


def serve(host: str, port: int) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    os.environ.setdefault("MOTO_PORT", str(port))
    app = _Serialised(DomainDispatcherApplication(create_backend_app))
    server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"http://{host}:{server.server_port}", flush=True)
    server.serve_forever()


@contextmanager
def moto_server(host: str = "127.0.0.1", port: int = 0, startup_timeout: float = 60.0) -> Iterator[str]:
    """Start the server in a child process (on a free port by default), yield its endpoint,
    always stop it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tidemark.embedded.moto_server", "--host", host, "--port", str(port)],
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
    args = parser.parse_args(argv)
    serve(args.host, args.port)


if __name__ == "__main__":
    main()
