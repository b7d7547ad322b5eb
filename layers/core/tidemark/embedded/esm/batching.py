"""When the event source mapping invokes: batch size, batching window or payload limit.

Pure logic over records and an injected time, so the rules are tested without a broker or
sleeping. Like Lambda, a batch is sent as soon as it holds ``batch_size`` records, its payload
would pass the 6 MB invocation limit with one more record, or ``window_ms`` has passed since its
first record arrived. ``measure`` is what a record adds to the payload in the source's event
shape (Kafka's by default; the Kinesis mapping passes ``kinesis_payload_size``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from tidemark.exceptions import ConfigError
from tidemark.records.esm import payload_size
from tidemark.records.model import Record
from tidemark.sources import PartitionId

LAMBDA_PAYLOAD_LIMIT = 6 * 1024 * 1024  # synchronous invocation payload quota
MAX_BATCH_SIZE = 10_000  # the MSK event source mapping's maximum
MAX_WINDOW_MS = 300_000
# The event's own fields (eventSource, ARN, bootstrap servers) and each "<topic>-<partition>"
# group key, on top of the records' sizes (``payload_size``); generous on purpose.
ENVELOPE_BYTES = 2048
GROUP_OVERHEAD_BYTES = 32
POLL_TIMEOUT_S = 0.5  # how long an empty batch waits for a first record before the mapping idles

Fetched = TypeVar("Fetched")
Batched = TypeVar("Batched")


@dataclass(frozen=True, slots=True)
class BatchLimits:
    batch_size: int = 100
    window_ms: int = 500
    max_payload_bytes: int = LAMBDA_PAYLOAD_LIMIT

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ConfigError(f"batch_size must be 1..{MAX_BATCH_SIZE}, got {self.batch_size}")
        if not 0 <= self.window_ms <= MAX_WINDOW_MS:
            raise ConfigError(f"batching window must be 0..{MAX_WINDOW_MS // 1000}s, got {self.window_ms}ms")
        if self.max_payload_bytes < 1:
            raise ConfigError(f"max_payload_bytes must be positive, got {self.max_payload_bytes}")


@dataclass
class BatchBuilder:
    limits: BatchLimits
    records: list[Record] = field(default_factory=list)
    payload_bytes: int = 0
    opened_ms: int | None = None
    groups: set[tuple[str, PartitionId]] = field(default_factory=set)
    measure: Callable[[Record], int] = payload_size

    def offer(self, record: Record, now_ms: int) -> bool:
        """Add ``record`` unless the batch is full; ``False`` means: send this batch first.

        A single record larger than the payload limit is still accepted into an empty batch:
        Lambda would fail such an invocation, and the local mapping surfaces that as a handler
        error rather than silently skipping the record.
        """
        size = self.measure(record)
        if (record.topic, record.partition) not in self.groups:
            size += len(record.topic) + GROUP_OVERHEAD_BYTES
        if not self.records:
            size += ENVELOPE_BYTES
        if self.records and (self.full or self.payload_bytes + size > self.limits.max_payload_bytes):
            return False
        if self.opened_ms is None:
            self.opened_ms = now_ms
        self.records.append(record)
        self.groups.add((record.topic, record.partition))
        self.payload_bytes += size
        return True

    @property
    def full(self) -> bool:
        return len(self.records) >= self.limits.batch_size or self.payload_bytes >= self.limits.max_payload_bytes

    def remaining_ms(self, now_ms: int) -> int:
        """How long to keep gathering before the window closes (the whole window while empty)."""
        if self.opened_ms is None:
            return self.limits.window_ms
        return max(0, self.opened_ms + self.limits.window_ms - now_ms)

    def ready(self, now_ms: int) -> bool:
        return bool(self.records) and (self.full or self.remaining_ms(now_ms) == 0)

    def take(self) -> list[Record]:
        records, self.records, self.payload_bytes, self.opened_ms = self.records, [], 0, None
        self.groups = set()
        return records


def gather(
    builder: BatchBuilder,
    fetched: deque[Fetched],
    *,
    offer: Callable[[Fetched, int], bool],
    take: Callable[[], list[Batched]],
    receive: Callable[[float], None],
    now_ms: Callable[[], int],
) -> list[Batched]:
    """The next batch from what the source delivered into ``fetched``; an empty list means
    nothing arrived for a poll interval.

    Received items move into the builder until it refuses one (the batch is full) or the window
    closes; while the batch can still grow, ``receive`` waits for more for the window's rest.
    """
    while True:
        while fetched and offer(fetched[0], now_ms()):
            fetched.popleft()
        now = now_ms()
        if builder.ready(now) or (fetched and builder.records):
            return take()
        wait_ms = builder.remaining_ms(now) if builder.records else int(POLL_TIMEOUT_S * 1000)
        before = len(fetched)
        receive(max(wait_ms, 1) / 1000)
        if len(fetched) == before and not builder.records:
            return []
