"""A real RabbitMQ broker on loopback for the RabbitMQ tests and the embedded demo.

It runs the installed ``rabbitmq-server`` (Debian's package: ``make rabbitmq`` installs it, as
root, without starting the system broker), never the system broker itself: every broker started
here has its own node name (``tidemark-<hex>@localhost``), its own free loopback ports (AMQP,
Erlang distribution, epmd), its own data, log, configuration and plugins files and its own Erlang
cookie (``HOME`` is a directory of its own), so nothing system-wide is read or written and
several brokers can run side by side. No plugin is enabled (the management UI would need another
port); the default ``guest`` user, which RabbitMQ allows on loopback only, logs in on vhost ``/``.

``max_message_size`` (a body's bytes; RabbitMQ 3.8+) is capped by default at what Lambda's Amazon
MQ mapping can deliver (``MAX_MESSAGE_SIZE``, 4 MiB): a larger message is refused to its publisher
-- the channel closes with PRECONDITION_FAILED -- instead of being dropped by the mapping, which
no audit of a queue could see. ``None`` keeps RabbitMQ's own default (128 MiB in 3.x).

The epmd it registers with is started here too (in the foreground, on its own port), so both
processes are children of this one: the context manager stops the broker (SIGTERM, RabbitMQ's
graceful shutdown), then epmd, on every exit -- errors and KeyboardInterrupt included -- and then
kills anything still running with this broker's environment. Should the parent be killed
outright, the kernel stops them as well (``PR_SET_PDEATHSIG``: SIGTERM for the broker's start
script, which stops the broker, SIGKILL for epmd).
"""

from __future__ import annotations

import ctypes
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tidemark.embedded.children import die_with_parent
from tidemark.embedded.esm.rabbitmq_mapping import MAX_MESSAGE_SIZE
from tidemark.embedded.ports import LOOPBACK, claim_port, free_port
from tidemark.exceptions import TidemarkError

log = logging.getLogger(__name__)

# Debian's /usr/sbin/rabbitmq-server is a wrapper that re-runs the script as the `rabbitmq` user
# in /var/lib/rabbitmq with the system cookie: the real scripts are in /usr/lib/rabbitmq/bin
# (RabbitMQ's own packages use the same directory).
SERVER_SCRIPTS = (Path("/usr/lib/rabbitmq/bin/rabbitmq-server"),)
# Every process this module starts carries it in its environment (the broker's children inherit
# it): the value is the node name, so leftovers are found by /proc/<pid>/environ, per broker.
ENV_MARKER = "TIDEMARK_RABBITMQ_NODE"
STOP_TIMEOUT_S = 30.0
_PROBE_INTERVAL_S = 0.2


class RabbitBrokerError(TidemarkError):
    """The embedded RabbitMQ broker could not be started or stopped."""


class BrokerMissingError(RabbitBrokerError):
    """``rabbitmq-server`` (or Erlang's epmd) is not installed."""


@dataclass(frozen=True)
class RabbitBroker:
    host: str
    port: int
    vhost: str
    log_path: Path
    node: str
    epmd_port: int
    dist_port: int
    started_in_s: float
    username: str = "guest"
    password: str = "guest"

    @property
    def url(self) -> str:
        vhost = "%2F" if self.vhost == "/" else self.vhost
        return f"amqp://{self.username}:{self.password}@{self.host}:{self.port}/{vhost}"


def server_script() -> Path:
    """The ``rabbitmq-server`` start script (not Debian's root-only wrapper in /usr/sbin)."""
    for candidate in SERVER_SCRIPTS:
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("rabbitmq-server")
    if found is not None and "rabbitmq-script-wrapper" not in Path(found).read_text(errors="replace")[:4000]:
        return Path(found)
    raise BrokerMissingError(
        "rabbitmq-server is not installed (no /usr/lib/rabbitmq/bin/rabbitmq-server): "
        "run 'make rabbitmq' as root (it installs Debian's rabbitmq-server without starting it)"
    )


def epmd_binary() -> Path:
    found = shutil.which("epmd") or shutil.which("epmd", path="/usr/lib/erlang/bin")
    if found is None:
        raise BrokerMissingError("Erlang's epmd is not installed: run 'make rabbitmq' as root")
    return Path(found)


def _term_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn``: SIGTERM when the parent dies (the start script then stops the broker)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, in the parent

    def term_with_parent() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return term_with_parent


def _accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((host, port)) == 0


def _amqp_ready(broker: RabbitBroker) -> bool:
    """True once guest can open a connection and a channel on the vhost (not just TCP)."""
    if not _accepts(broker.host, broker.port):
        return False  # checked first: pika logs every refused connection at ERROR
    try:
        import pika  # type: ignore[import-untyped]
    except ModuleNotFoundError:
        raise RabbitBrokerError(
            "the embedded RabbitMQ broker needs the 'pika' package: pip install 'tidemark[demo]'"
        ) from None
    parameters = pika.ConnectionParameters(
        host=broker.host,
        port=broker.port,
        virtual_host=broker.vhost,
        credentials=pika.PlainCredentials(broker.username, broker.password),
        connection_attempts=1,
        socket_timeout=2,
        blocked_connection_timeout=2,
    )
    try:
        connection = pika.BlockingConnection(parameters)
    except Exception:  # noqa: BLE001 - any failure (still booting, login not ready) means "not yet"
        return False
    try:
        connection.channel().close()
    finally:
        connection.close()
    return True


def _distinct_free_ports(count: int, taken: set[int]) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(LOOPBACK)
        if port not in taken and port not in ports:
            ports.append(port)
    return ports


def _tail(path: Path, limit: int = 800) -> str:
    try:
        text = path.read_bytes()[-limit:].decode(errors="replace")
    except OSError:
        return ""
    return " ".join(text.split())


def marked_pids(node: str) -> set[int]:
    """The live processes whose environment marks them as started for broker ``node``."""
    needle = f"{ENV_MARKER}={node}".encode()
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if needle in environ.split(b"\0") and b") Z " not in state:
            found.add(int(entry.name))
    return found


def _stop(process: subprocess.Popen[bytes], sig: int, timeout: float) -> None:
    if process.poll() is not None:
        return
    try:
        process.send_signal(sig)
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _prepare(
    workdir: Path, node: str, port: int, epmd_port: int, dist_port: int, max_message_size: int | None
) -> tuple[dict[str, str], Path]:
    home, mnesia, logs = workdir / "home", workdir / "mnesia", workdir / "log"
    for directory in (home, mnesia, logs):
        directory.mkdir(parents=True, exist_ok=True)
    cookie = home / ".erlang.cookie"
    cookie.unlink(missing_ok=True)
    cookie.write_text(secrets.token_hex(20))
    cookie.chmod(0o400)  # Erlang refuses a cookie others can read
    config = workdir / "rabbitmq.conf"
    settings = [
        "# written by tidemark.embedded.rabbitmq",
        f"distribution.listener.interface = {LOOPBACK}",
        "log.console = false",
        "log.file.level = info",
    ]
    if max_message_size is not None:  # a body's bytes (rabbitmq.conf since 3.8)
        settings.append(f"max_message_size = {max_message_size}")
    config.write_text("".join(f"{line}\n" for line in settings))
    plugins = workdir / "enabled_plugins"
    plugins.write_text("[].\n")  # no plugin: the management UI and the others want more ports
    env_file = workdir / "rabbitmq-env.conf"
    env_file.write_text("# empty: the system's /etc/rabbitmq/rabbitmq-env.conf is not read\n")
    log_path = logs / f"{node.split('@')[0]}.log"
    # Nothing inherited: a RABBITMQ_* or ERL_* variable of the caller's could point at system files.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_", "NOTIFY_SOCKET"))}
    env.update(
        {
            ENV_MARKER: node,
            "HOME": str(home),
            "RABBITMQ_NODENAME": node,
            "RABBITMQ_USE_LONGNAME": "false",
            "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": LOOPBACK,
            "RABBITMQ_MNESIA_BASE": str(mnesia),
            "RABBITMQ_LOG_BASE": str(logs),
            "RABBITMQ_LOGS": str(log_path),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(workdir / "advanced.config"),  # absent: none
            "RABBITMQ_CONF_ENV_FILE": str(env_file),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
            "RABBITMQ_PID_FILE": str(workdir / f"{node.split('@')[0]}.pid"),
            "ERL_CRASH_DUMP": str(logs / "erl_crash.dump"),
        }
    )
    return env, log_path


@contextmanager
def rabbitmq_broker(
    workdir: Path, *, port: int = 0, start_timeout_s: float = 60, max_message_size: int | None = MAX_MESSAGE_SIZE
) -> Iterator[RabbitBroker]:
    """Start a RabbitMQ broker on loopback (a free AMQP port by default) with its files under
    ``workdir``, yield it once guest can connect, always stop it and everything it started.
    ``max_message_size``: the largest body it accepts (``None``: RabbitMQ's default)."""
    script, epmd = server_script(), epmd_binary()
    workdir = workdir.resolve()
    port = claim_port(port, option="port")
    epmd_port, dist_port = _distinct_free_ports(2, {port})
    node = f"tidemark-{secrets.token_hex(6)}@localhost"
    env, log_path = _prepare(workdir, node, port, epmd_port, dist_port, max_message_size)
    output_path = workdir / "log" / f"{node.split('@')[0]}.out"  # the start script's own output
    began = time.monotonic()
    epmd_process: subprocess.Popen[bytes] | None = None
    server: subprocess.Popen[bytes] | None = None
    try:
        with output_path.open("ab") as output:
            # In the foreground, as our child: the broker finds it on ERL_EPMD_PORT and starts none.
            epmd_process = subprocess.Popen(
                [str(epmd), "-port", str(epmd_port), "-address", LOOPBACK],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,  # a Ctrl-C reaches us, and we stop it in order
                preexec_fn=die_with_parent(),
            )
            deadline = began + start_timeout_s
            while not _accepts(LOOPBACK, epmd_port):
                if epmd_process.poll() is not None or time.monotonic() > deadline:
                    raise RabbitBrokerError(
                        f"epmd did not start on {LOOPBACK}:{epmd_port} (exit code {epmd_process.poll()}); "
                        f"see {output_path}: {_tail(output_path)}"
                    )
                time.sleep(0.05)
            server = subprocess.Popen(
                [str(script)],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,
                preexec_fn=_term_with_parent(),
            )
        broker = RabbitBroker(LOOPBACK, port, "/", log_path, node, epmd_port, dist_port, 0.0)
        while not _amqp_ready(broker):
            if server.poll() is not None:
                raise RabbitBrokerError(
                    f"rabbitmq-server exited with code {server.returncode} before accepting AMQP connections "
                    f"on {LOOPBACK}:{port}; see the broker log {log_path} and {output_path}: {_tail(output_path)}"
                )
            if time.monotonic() > deadline:
                raise RabbitBrokerError(
                    f"rabbitmq-server did not accept AMQP connections on {LOOPBACK}:{port} within "
                    f"{start_timeout_s:g}s; see the broker log {log_path}"
                )
            time.sleep(_PROBE_INTERVAL_S)
        started_in = time.monotonic() - began
        log.info("RabbitMQ %s started in %.1fs on %s:%d (log %s)", node, started_in, LOOPBACK, port, log_path)
        yield RabbitBroker(LOOPBACK, port, "/", log_path, node, epmd_port, dist_port, started_in)
    finally:
        stopping = time.monotonic()
        if server is not None:
            # The start script turns SIGTERM into RabbitMQ's graceful shutdown and waits for it.
            _stop(server, signal.SIGTERM, STOP_TIMEOUT_S)
        if epmd_process is not None:
            _stop(epmd_process, signal.SIGTERM, 5.0)
        for pid in marked_pids(node):  # e.g. erl_child_setup, or a broker whose script was killed
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.info("RabbitMQ %s stopped in %.1fs", node, time.monotonic() - stopping)
