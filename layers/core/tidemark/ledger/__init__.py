"""The offset/buffer ledger: one conditionally written DynamoDB item per (stream, partition).

``Ledger`` (base) owns the public operations; ``DynamoDBLedger`` implements only the storage
primitives, in the manner of Powertools' idempotency persistence layers.
"""

from __future__ import annotations

from tidemark.ledger.base import Ledger
from tidemark.ledger.dynamodb import DynamoDBLedger, ledger_table_schema
from tidemark.ledger.model import CommittedObject, OpenBuffer, PartitionState, SealedFlush

__all__ = [
    "CommittedObject",
    "DynamoDBLedger",
    "Ledger",
    "OpenBuffer",
    "PartitionState",
    "SealedFlush",
    "ledger_table_schema",
]
