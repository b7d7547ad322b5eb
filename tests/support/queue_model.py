"""A small model of the Amazon MQ (RabbitMQ) event source mapping for fault-injection tests.

Like the real mapping it takes up to ``size`` ready messages off the queue's head into one event,
acks them only after the function returned, and on a failure nacks them with requeue: they go
back to the queue with ``redelivered: true`` -- here in a shuffled order and, with the next
batch size, split across other batches. A lost ack (the function succeeded, the ack never
reached the broker) requeues them too. One invocation at a time, as the mapping's concurrency is
one per queue.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import orjson

from tests.support.workload import BASE_MS, HOUR_MS, utc_hour
from tidemark.archiver import Archiver
from tidemark.dedupe.ids import digest
from tidemark.exceptions import StagingConflictError
from tidemark.faults import CrashPoints, SimulatedCrash
from tidemark.records.model import Record
from tidemark.records.rabbitmq import PROPERTY_PREFIX
from tidemark.records.rabbitmq_esm import RabbitMessage, build_rabbitmq_event
from tidemark.runtime import Runtime
from tidemark.verify import ExpectedMessage, RecordMeta

BROKER_ARN = "arn:aws:mq:us-east-1:123456789012:broker:orders:b-1234a5b6-78cd-901e-2fgh-3i45j6k178l9"
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:mq-orders-AbCdEf"
QUEUE = "orders"


def rabbitmq_source(**changes: object) -> dict[str, object]:
    """A stream's ``source`` reading the model's queue."""
    return {
        "kind": "rabbitmq",
        "broker_arn": BROKER_ARN,
        "queue": QUEUE,
        "virtual_host": "/",
        "batch_size": 100,
        "batching_window": "1s",
        "credentials_secret_arn": SECRET_ARN,
        **changes,
    }


@dataclass
class Published:
    """What was published: the messages in order (publisher retries included) and what the
    archive must hold, one entry per distinct id."""

    messages: list[RabbitMessage]
    expected: list[ExpectedMessage]


def publish_orders(
    count: int, *, seed: int = 7, hours: int = 3, repeats: float = 0.05, no_id: float = 0.02, bad: float = 0.02
) -> Published:
    """Orders with ``messageId`` ``m-<n>`` over ``hours`` hours; a share published twice (a
    publisher's retry: same id, same body), a few without an id (dead-lettered
    ``missing_message_id``) and a few not JSON (dead-lettered as bad values)."""
    rng = random.Random(seed)
    messages: list[RabbitMessage] = []
    expected: dict[bytes, ExpectedMessage] = {}
    for index in range(count):
        event_ms = BASE_MS + (hours * HOUR_MS * index) // count - rng.randint(0, 60_000)
        roll = rng.random()
        created = datetime.fromtimestamp(event_ms / 1000, UTC).isoformat()
        body = orjson.dumps({"order_id": f"o-{index}", "price": round(rng.uniform(1, 99), 2), "created_at": created})
        message_id: str | None = f"m-{index}"
        hour: str | None = utc_hour(event_ms)
        if roll < no_id:
            message_id, hour = None, None
        elif roll < no_id + bad:
            body, hour = b"{not json " + str(index).encode(), None
        headers: dict[str, bytes] = {"source": b"web"} if index % 3 == 0 else {}
        message = RabbitMessage(
            body, message_id, event_ms - event_ms % 1000, headers, {"contentType": "application/json"}
        )
        messages.append(message)
        if rng.random() < repeats:
            messages.append(message)  # the publisher's retry: the same message again
        ident = message_id.encode() if message_id is not None else None
        meta = RecordMeta(QUEUE, ident, (*headers.items(), (f"{PROPERTY_PREFIX}content_type", b"application/json")))
        key = ident if ident is not None else digest(Record("", 0, 0, 0, body, None), "message_id")
        expected.setdefault(key, ExpectedMessage(key, body, hour, meta))
    return Published(messages, list(expected.values()))


@dataclass
class QueueModel:
    published: list[RabbitMessage]
    make_runtime: Callable[[CrashPoints | None], Runtime]
    seed: int = 3
    ready: deque[RabbitMessage] = field(default_factory=deque)
    crashes: int = 0
    refused: int = 0  # invocations failed by a conflict (another writer accepted meanwhile)
    deliveries: int = 0
    _warm: Runtime | None = None

    def __post_init__(self) -> None:
        self.ready = deque(self.published)
        self._rng = random.Random(self.seed)

    def deliver(self, size: int, crash_points: CrashPoints | None = None, *, lose_ack: bool = False) -> bool:
        """One invocation with up to ``size`` messages; ``False`` if it failed (requeued)."""
        batch = [self.ready.popleft() for _ in range(min(size, len(self.ready)))]
        if not batch:
            return True
        self.deliveries += 1
        if crash_points is None:
            if self._warm is None:
                self._warm = self.make_runtime(None)
            runtime = self._warm
        else:
            runtime = self.make_runtime(crash_points)
        try:
            Archiver(runtime).handle(build_rabbitmq_event(batch, broker_arn=BROKER_ARN, queue=QUEUE))
        except SimulatedCrash:
            self.crashes += 1
            self._requeue(batch)
            return False
        except StagingConflictError:
            self.refused += 1
            self._requeue(batch)
            return False
        if lose_ack:
            self._requeue(batch)
        return True

    def _requeue(self, batch: list[RabbitMessage]) -> None:
        """Nack with requeue: back at the head, redelivered, in another order."""
        again = [replace(message, redelivered=True) for message in batch]
        self._rng.shuffle(again)
        self.ready.extendleft(reversed(again))

    def drain(self, size: int) -> None:
        while self.ready:
            assert self.deliver(size), "delivery without faults must succeed"
