"""Kinesis shard lineage: which shards are closed, and which of those the mapping has finished.

When a shard splits or merges, its parents close and children begin; the Lambda mapping reads a
parent to its end before it starts any of its children. So a closed shard is *finished* -- no
record of it will ever be delivered again -- once any child of it has accepted a record in the
ledger. A finished shard with nothing staged holds no event hour back, however old its
watermark (one still holding records of the hour -- a quarantined flush included -- does):
without this, every hour after a resharding would wait ``allowed_lateness`` for a shard that can
never move again.

The lineage comes from ``ListShards`` (the sweeper's role may call it on the stream). Shards that
never received a record are registered too, so the sweeper sees every shard of the stream.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from tidemark.ledger.model import PartitionState

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Shard:
    shard_id: str
    parents: tuple[str, ...]
    closed: bool  # it has an ending sequence number: no record is ever added to it again


def list_shards(client: KinesisClient | Any, stream_arn: str) -> dict[str, Shard]:
    """Every shard of the stream (open and closed, as long as Kinesis keeps them)."""
    shards: dict[str, Shard] = {}
    request: dict[str, Any] = {"StreamARN": stream_arn}
    while True:
        page = client.list_shards(**request)
        for raw in page.get("Shards", []):
            parents = tuple(parent for parent in (raw.get("ParentShardId"), raw.get("AdjacentParentShardId")) if parent)
            closed = bool(raw.get("SequenceNumberRange", {}).get("EndingSequenceNumber"))
            shards[raw["ShardId"]] = Shard(raw["ShardId"], parents, closed)
        token = page.get("NextToken")
        if not token:
            return shards
        request = {"NextToken": token}


def try_list_shards(client: KinesisClient | Any, stream_arn: str) -> dict[str, Shard] | None:
    """``list_shards``, or ``None`` (logged) when Kinesis cannot be asked: completeness then falls
    back to the rule every partition obeys (idle for ``allowed_lateness``)."""
    try:
        return list_shards(client, stream_arn)
    except (BotoCoreError, ClientError) as exc:
        logger.warning("cannot list the stream's shards", extra={"stream_arn": stream_arn, "error": str(exc)})
        return None


def finished_shards(shards: Mapping[str, Shard], states: Mapping[str, PartitionState]) -> set[str]:
    """Closed shards the mapping has read to their end: a child of theirs accepted a record."""
    started = {shard_id for shard_id, state in states.items() if state.version > 0 and state.staged_offset >= 0}
    return {
        parent
        for shard in shards.values()
        if shard.shard_id in started
        for parent in shard.parents
        if parent in shards and shards[parent].closed
    }
