"""Object keys are a pure function of (prefix, stream, event hour, partition, offsets, format)."""

from __future__ import annotations

import re

from tidemark.eventtime import hour_path
from tidemark.exceptions import UnsafePathError
from tidemark.names import HOUR, PREFIX, STREAM, matches

_EXTENSION = re.compile(r"^[a-z0-9]+(\.[a-z0-9]+)*$")


def object_key(prefix: str, stream: str, hour: str, partition: int, first: int, last: int, extension: str) -> str:
    """``raw/orders/2026/11/21/07/orders+3+00000000000000000100-00000000000000000199.jsonl.gz``."""
    if not (
        matches(PREFIX, prefix) and matches(STREAM, stream) and matches(HOUR, hour) and _EXTENSION.fullmatch(extension)
    ):
        raise UnsafePathError(f"refusing object key for {prefix!r}/{stream!r}/{hour!r}/{extension!r}")
    numbers = (partition, first, last)
    if any(isinstance(n, bool) or not isinstance(n, int) for n in numbers) or not (
        partition >= 0 and 0 <= first <= last
    ):
        raise UnsafePathError(f"refusing object key for partition={partition!r} offsets {first!r}..{last!r}")
    return f"{prefix}/{stream}/{hour_path(hour)}/{stream}+{partition}+{first:020d}-{last:020d}.{extension}"


def hour_of_key(key: str) -> str:
    """The event-hour label an object key is filed under (the inverse of ``object_key``'s folder)."""
    parts = key.split("/")
    hour = "{}-{}-{}T{}".format(*parts[2:6]) if len(parts) >= 7 else ""
    if not matches(HOUR, hour):
        raise UnsafePathError(f"not a Tidemark object key: {key!r}")
    return hour
