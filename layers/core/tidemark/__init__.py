"""Tidemark core: exactly-once archiving of Kafka/MSK partitions into event-hour S3 objects.

The package is organised by concept (see DESIGN.md): ``records`` (record model and ESM adapters),
``eventtime`` (event-time extraction), ``routing`` (raw vs dead-letter, buffer choice),
``staging`` (framed, fsync'd segment files), ``ledger`` (DynamoDB conditional-write ledger),
``flush`` (rotation predicates), ``formats`` and ``objects`` (S3 object writing) and ``writer``
(the per-partition state machine that ties them together).
"""

from __future__ import annotations

__version__ = "0.1.0"
