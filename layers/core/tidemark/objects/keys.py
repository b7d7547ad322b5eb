"""Object keys are a pure function of (prefix, stream, epoch, partition-by folders, event hour,
partition, offsets, format)."""

from __future__ import annotations

import re

from tidemark.eventtime import hour_path
from tidemark.exceptions import UnsafePathError
from tidemark.names import HOUR, PREFIX, STREAM, matches
from tidemark.partitioning import valid_folders
from tidemark.sources import (
    KAFKA,
    KAFKA_POSITION_DIGITS,
    KINESIS,
    KINESIS_POSITION_DIGITS,
    PartitionId,
    is_partition_id,
    partition_of_text,
)

_EXTENSION = re.compile(r"^[a-z0-9]+(\.[a-z0-9]+)*$")


def hour_folders(hour: str, hive: bool = False) -> str:
    """``2026/11/21/07``, or with ``hive`` ``year=2026/month=11/day=21/hour=07``."""
    if not hive:
        return hour_path(hour)
    return f"year={hour[0:4]}/month={hour[5:7]}/day={hour[8:10]}/hour={hour[11:13]}"


def object_key(
    prefix: str,
    stream: str,
    hour: str,
    partition: PartitionId,
    first: int,
    last: int,
    extension: str,
    epoch: int = 0,
    *,
    folders: str = "",
    hive_hours: bool = False,
    digits: int = KAFKA_POSITION_DIGITS,
) -> str:
    """``raw/orders/2026/11/21/07/orders+3+00000000000000000100-00000000000000000199.jsonl.gz``.

    Epoch 0 (every partition until its positions are reset) keeps exactly that form, so existing
    archives stay valid. A later epoch adds ``e<n>`` in one place, after the partition:
    ``orders+3+e1+00000000000000000000-00000000000000000099.jsonl.gz``: its positions may repeat
    an earlier epoch's, its keys never do. Partition-by ``folders`` (already path-safe, see
    ``tidemark.partitioning``) go between the stream and the hour:
    ``raw/orders/country=US/year=2026/month=11/day=21/hour=07/orders+3+...parquet``.

    ``partition`` is a Kafka partition number or a Kinesis shard id; positions are zero-padded
    to ``digits``, the width of the source kind's largest position (20 for Kafka, 129 for
    Kinesis sequence numbers, see ``tidemark.sources``), so a stream's keys sort by position."""
    if not (
        matches(PREFIX, prefix)
        and matches(STREAM, stream)
        and matches(HOUR, hour)
        and _EXTENSION.fullmatch(extension)
        and valid_folders(folders)
    ):
        raise UnsafePathError(f"refusing object key for {prefix!r}/{stream!r}/{folders!r}/{hour!r}/{extension!r}")
    numbers = (first, last, epoch)
    if (
        any(isinstance(n, bool) or not isinstance(n, int) for n in numbers)
        or not is_partition_id(partition)
        or not (0 <= first <= last < 10**digits and epoch >= 0)
        or digits not in (KAFKA_POSITION_DIGITS, KINESIS_POSITION_DIGITS)
    ):
        raise UnsafePathError(
            f"refusing object key for partition={partition!r} epoch={epoch!r} offsets {first!r}..{last!r}"
        )
    epoch_part = f"e{epoch}+" if epoch else ""
    middle = f"{folders}/" if folders else ""
    return (
        f"{prefix}/{stream}/{middle}{hour_folders(hour, hive_hours)}/"
        f"{stream}+{partition}+{epoch_part}{first:0{digits}d}-{last:0{digits}d}.{extension}"
    )


_POSITIONS = r"(\d{20}-\d{20}|\d{129}-\d{129})"
# The epoch follows a partition part (a shard id such as "e1" is a partition, not an epoch).
_EPOCH_PART = re.compile(r"\+[A-Za-z0-9_.-]{1,128}\+e(\d+)\+" + _POSITIONS + r"\.[^/]*$")


def epoch_of_key(key: str) -> int:
    """The position epoch an object key names (0 when it has no ``+e<n>+`` part)."""
    match = _EPOCH_PART.search(key)
    return int(match.group(1)) if match else 0


_HIVE_HOUR = ("year=", "month=", "day=", "hour=")


def hour_of_key(key: str) -> str:
    """The event-hour label an object key is filed under (the inverse of ``object_key``'s hour
    folders, plain or Hive-style: the four folders right above the object)."""
    parts = key.split("/")
    hour = ""
    if len(parts) >= 7:
        levels = parts[-5:-1]
        if all(level.startswith(name) for level, name in zip(levels, _HIVE_HOUR, strict=True)):
            levels = [level.split("=", 1)[1] for level in levels]
        hour = "{}-{}-{}T{}".format(*levels)
    if not matches(HOUR, hour):
        raise UnsafePathError(f"not a Tidemark object key: {key!r}")
    return hour


_NAME = re.compile(r"\+([A-Za-z0-9_.-]{1,128})\+(?:e\d+\+)?" + _POSITIONS + r"\.[^/+]*$")


def positions_of_key(key: str) -> tuple[PartitionId, int, int]:
    """``(partition, first, last)`` an object key names (a partition number or a shard id)."""
    match = _NAME.search(key)
    if match is None:
        raise UnsafePathError(f"not a Tidemark object key: {key!r}")
    first, last = match.group(2).split("-")
    try:
        partition = partition_of_text(match.group(1))
    except ValueError:
        raise UnsafePathError(f"not a Tidemark object key: {key!r}") from None
    return partition, int(first), int(last)


def source_of_key(key: str) -> str:
    """The source kind an object key's position width names (``tidemark.sources``): 129-digit
    positions are Kinesis sequence numbers, 20-digit ones Kafka offsets."""
    match = _NAME.search(key)
    if match is None:
        raise UnsafePathError(f"not a Tidemark object key: {key!r}")
    return KINESIS if len(match.group(2)) > 2 * KAFKA_POSITION_DIGITS + 1 else KAFKA


def folders_of_key(key: str) -> str:
    """The partition-by folders of an object key ('' when the stream is not partitioned)."""
    hour_of_key(key)  # validates the shape
    return "/".join(key.split("/")[2:-5])


def hour_folder_of_key(key: str) -> str:
    """The folder an object sits in: ``<prefix>/<stream>/<folders>/<hour folders>/``."""
    hour_of_key(key)
    return key.rsplit("/", 1)[0] + "/"
