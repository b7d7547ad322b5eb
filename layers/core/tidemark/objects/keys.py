"""Object keys are a pure function of (prefix, stream, event hour, partition, offsets, format)."""

from __future__ import annotations

import re

from tidemark.eventtime import hour_path
from tidemark.exceptions import UnsafePathError
from tidemark.names import HOUR, PREFIX, STREAM, matches

_EXTENSION = re.compile(r"^[a-z0-9]+(\.[a-z0-9]+)*$")


def object_key(
    prefix: str, stream: str, hour: str, partition: int, first: int, last: int, extension: str, epoch: int = 0
) -> str:
    """``raw/orders/2026/11/21/07/orders+3+00000000000000000100-00000000000000000199.jsonl.gz``.

    Epoch 0 (every partition until its positions are reset) keeps exactly that form, so existing
    archives stay valid. A later epoch adds ``e<n>`` in one place, after the partition:
    ``orders+3+e1+00000000000000000000-00000000000000000099.jsonl.gz``: its positions may repeat
    an earlier epoch's, its keys never do."""
    if not (
        matches(PREFIX, prefix) and matches(STREAM, stream) and matches(HOUR, hour) and _EXTENSION.fullmatch(extension)
    ):
        raise UnsafePathError(f"refusing object key for {prefix!r}/{stream!r}/{hour!r}/{extension!r}")
    numbers = (partition, first, last, epoch)
    if any(isinstance(n, bool) or not isinstance(n, int) for n in numbers) or not (
        partition >= 0 and 0 <= first <= last and epoch >= 0
    ):
        raise UnsafePathError(
            f"refusing object key for partition={partition!r} epoch={epoch!r} offsets {first!r}..{last!r}"
        )
    epoch_part = f"e{epoch}+" if epoch else ""
    return f"{prefix}/{stream}/{hour_path(hour)}/{stream}+{partition}+{epoch_part}{first:020d}-{last:020d}.{extension}"


_EPOCH_PART = re.compile(r"\+e(\d+)\+\d{20}-\d{20}\.[^/]*$")


def epoch_of_key(key: str) -> int:
    """The position epoch an object key names (0 when it has no ``+e<n>+`` part)."""
    match = _EPOCH_PART.search(key)
    return int(match.group(1)) if match else 0


def hour_of_key(key: str) -> str:
    """The event-hour label an object key is filed under (the inverse of ``object_key``'s folder)."""
    parts = key.split("/")
    hour = "{}-{}-{}T{}".format(*parts[2:6]) if len(parts) >= 7 else ""
    if not matches(HOUR, hour):
        raise UnsafePathError(f"not a Tidemark object key: {key!r}")
    return hour
