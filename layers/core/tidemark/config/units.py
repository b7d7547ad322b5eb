"""Human-friendly units in the config file: ``15m``, ``90s``, ``1h``; ``64MiB``, ``1MB``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, ByteSize, PlainSerializer

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_FACTOR_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration(value: Any) -> timedelta:
    """Accept ``timedelta``, seconds as a number, or ``<number><ms|s|m|h|d>``."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '90s', '15m' or '1h'")
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return timedelta(milliseconds=float(match.group(1)) * _FACTOR_MS[match.group(2)])
    raise ValueError(f"expected a duration such as '90s', '15m' or '1h', got {value!r}")


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(lambda d: f"{int(d.total_seconds() * 1000)}ms", return_type=str),
]

Bytes = Annotated[ByteSize, PlainSerializer(int, return_type=int)]


def to_ms(duration: timedelta) -> int:
    return int(duration.total_seconds() * 1000)
