"""Helpers for tests that talk to the embedded RabbitMQ broker (tidemark.embedded.rabbitmq).

A test module gets a broker for its tests with::

    @pytest.fixture(scope="module")
    def rabbitmq(tmp_path_factory):
        yield from rabbitmq_fixture(tmp_path_factory)

The broker must be installed (``make test`` runs ``make rabbitmq``): a missing one fails the
fixture with BrokerMissingError, it is never skipped.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel

from tidemark.embedded.rabbitmq import RabbitBroker, marked_pids, rabbitmq_broker


def rabbitmq_fixture(tmp_path_factory: Any, **options: Any) -> Iterator[RabbitBroker]:
    """The body of a broker fixture: one broker, started in a fresh directory, always stopped."""
    with rabbitmq_broker(tmp_path_factory.mktemp("rabbitmq"), **options) as broker:
        yield broker


def connect(broker: RabbitBroker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def new_queue(channel: BlockingChannel, prefix: str = "q") -> str:
    """A durable classic queue with a fresh name, on the channel's vhost."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    channel.queue_declare(queue=name, durable=True)
    return name


def publish(channel: BlockingChannel, queue: str, count: int, start: int = 0) -> list[str]:
    """Publish ``count`` persistent messages through the default exchange with publisher confirms
    (each basic_publish returns once the broker has confirmed it); returns their message ids."""
    channel.confirm_delivery()
    ids: list[str] = []
    for n in range(start, start + count):
        message_id = f"m-{n:05d}"
        channel.basic_publish(
            exchange="",
            routing_key=queue,
            body=b'{"n":%d}' % n,
            properties=pika.BasicProperties(
                message_id=message_id,
                delivery_mode=pika.DeliveryMode.Persistent,
                content_type="application/json",
                headers={"seq": n, "source": "tidemark-test"},
            ),
            mandatory=True,
        )
        ids.append(message_id)
    return ids


def queue_depth(channel: BlockingChannel, queue: str) -> tuple[int, int]:
    """(ready messages, consumers) of an existing queue."""
    method = channel.queue_declare(queue=queue, passive=True).method
    return method.message_count, method.consumer_count


def broker_processes(broker: RabbitBroker) -> dict[int, str]:
    """pid -> command name of every live process started for ``broker`` (found by environment)."""
    found: dict[int, str] = {}
    for pid in marked_pids(broker.node):
        try:
            found[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:  # gone meanwhile
            continue
    return found


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a TCP socket in LISTEN state on ``port`` (from /proc/net)."""
    found: set[str] = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, port_hex = fields[1].split(":")
            if fields[3] != "0A" or int(port_hex, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # The kernel prints each 32-bit word in host (little-endian) order.
            ordered = b"".join(raw[i : i + 4][::-1] for i in range(0, width // 2, 4))
            family = socket.AF_INET if width == 8 else socket.AF_INET6
            found.add(socket.inet_ntop(family, ordered))
    return found


def accepts(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((host, port)) == 0


#: the Gregorian calendar repeats every 400 years: 146,097 days
_CYCLE_MS = 146_097 * 86_400_000


def java_medium_date(ms: int) -> str:
    """What Lambda's Amazon MQ mapping shows for an AMQP timestamp: Java's
    ``DateFormat.getDateTimeInstance(DEFAULT, DEFAULT, Locale.US)`` of ``new Date(ms)`` in UTC
    ("Jan 1, 1970, 12:33:41 AM", pattern ``MMM d, y, h:mm:ss a``), for any ``ms >= 0`` up to a
    Java long. An oracle independent of the decoder: stdlib ``datetime`` formats a date moved back
    by whole 400-year cycles into its range, and the year is moved forward again."""
    cycles = max(0, ms // _CYCLE_MS - 10)
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms - cycles * _CYCLE_MS)
    year = moment.year + 400 * cycles
    return f"{moment:%b} {moment.day}, {year}, {moment.hour % 12 or 12}:{moment:%M:%S} {moment:%p}"
