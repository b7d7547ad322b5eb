"""Loopback ports for the embedded services: free ones by default, checked ones on request."""

from __future__ import annotations

import socket

from tidemark.exceptions import TidemarkError

LOOPBACK = "127.0.0.1"


class PortInUseError(TidemarkError):
    """A port the user asked for is taken."""


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def claim_port(port: int, *, option: str, host: str = LOOPBACK) -> int:
    """``port`` if it can be bound (0: a free one); otherwise an error that says what to do."""
    if port == 0:
        return free_port(host)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            raise PortInUseError(
                f"port {port} on {host} is already in use: pass another with {option}, or {option} 0 for a free one"
            ) from None
    return port
