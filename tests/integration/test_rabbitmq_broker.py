"""The embedded RabbitMQ broker (the installed rabbitmq-server on free loopback ports): durable
queues, properties and headers, manual acks under a prefetch limit, nack with requeue and
redelivery, and nothing left running or listening after the context exits -- also on a
KeyboardInterrupt and on a failed start."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.support.rabbitmq import (
    accepts,
    broker_processes,
    connect,
    listening_addresses,
    new_queue,
    publish,
    queue_depth,
    rabbitmq_fixture,
)
from tidemark.embedded import rabbitmq as embedded_rabbitmq
from tidemark.embedded.rabbitmq import (
    BrokerMissingError,
    RabbitBroker,
    RabbitBrokerError,
    marked_pids,
    rabbitmq_broker,
)
from tidemark.exceptions import TidemarkError

PREFETCH = 10


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory):
    yield from rabbitmq_fixture(tmp_path_factory)


def test_the_broker_is_ours_and_on_loopback_only(rabbitmq: RabbitBroker):
    assert rabbitmq.url == f"amqp://guest:guest@127.0.0.1:{rabbitmq.port}/%2F"
    assert re.fullmatch(r"tidemark-[0-9a-f]{12}@localhost", rabbitmq.node)
    assert len({rabbitmq.port, rabbitmq.epmd_port, rabbitmq.dist_port}) == 3
    assert 5672 not in {rabbitmq.port, rabbitmq.epmd_port, rabbitmq.dist_port}
    assert listening_addresses(rabbitmq.port) == {"127.0.0.1"}
    assert listening_addresses(rabbitmq.dist_port) == {"127.0.0.1"}
    assert listening_addresses(rabbitmq.epmd_port) <= {"127.0.0.1", "::1"}
    assert "127.0.0.1" in listening_addresses(rabbitmq.epmd_port)
    names = sorted(broker_processes(rabbitmq).values())
    assert "beam.smp" in names and "epmd" in names
    assert _log_shows(rabbitmq.log_path, "Server startup complete; 0 plugins started")
    assert _log_shows(rabbitmq.log_path, f"home dir       : {rabbitmq.log_path.parents[1] / 'home'}")  # its cookie
    assert 0 < rabbitmq.started_in_s < 60


def test_publish_consume_nack_redeliver_ack(rabbitmq: RabbitBroker):
    connection = connect(rabbitmq)
    try:
        channel = connection.channel()
        queue = new_queue(channel)
        ids = publish(channel, queue, 30)
        assert queue_depth(channel, queue) == (30, 0)

        consumer = connection.channel()
        consumer.basic_qos(prefetch_count=PREFETCH)
        deliveries = consumer.consume(queue, auto_ack=False, inactivity_timeout=1.0)

        # First batch: exactly the prefetch limit arrives while nothing is acked.
        first = []
        for method, properties, body in deliveries:
            if method is None:
                break
            first.append((method, properties, body))
        assert [p.message_id for _, p, _ in first] == ids[:PREFETCH]
        assert not any(m.redelivered for m, _, _ in first)
        method, properties, body = first[3]
        assert body == b'{"n":3}'
        assert properties.headers == {"seq": 3, "source": "tidemark-test"}
        assert properties.delivery_mode == 2 and properties.content_type == "application/json"

        # Give the whole batch back: it is requeued and delivered again, marked redelivered.
        consumer.basic_nack(delivery_tag=first[-1][0].delivery_tag, multiple=True, requeue=True)

        acked: dict[str, bool] = {}
        while len(acked) < 30:
            batch = []
            for method, properties, _body in deliveries:
                if method is None:
                    break
                batch.append((method, properties))
                if len(batch) == PREFETCH:
                    break
            assert batch, f"the broker stopped delivering with {len(acked)} of 30 acked"
            assert len(batch) <= PREFETCH
            for method, properties in batch:
                assert properties.message_id not in acked, f"{properties.message_id} delivered after its ack"
                acked[properties.message_id] = method.redelivered
            consumer.basic_ack(delivery_tag=batch[-1][0].delivery_tag, multiple=True)

        assert sorted(acked) == ids
        assert {i for i, redelivered in acked.items() if redelivered} == set(ids[:PREFETCH])
        consumer.cancel()
        assert queue_depth(channel, queue) == (0, 0)
    finally:
        connection.close()

    # The acks are the broker's, not the connection's: a new connection finds the queue empty.
    connection = connect(rabbitmq)
    try:
        channel = connection.channel()
        assert queue_depth(channel, queue) == (0, 0)
        assert channel.basic_get(queue, auto_ack=False) == (None, None, None)
    finally:
        connection.close()


def test_context_exit_stops_everything_also_on_keyboard_interrupt(tmp_path: Path):
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt), rabbitmq_broker(tmp_path) as broker:
        started = time.monotonic() - began
        processes = broker_processes(broker)
        assert {"beam.smp", "epmd"} <= set(processes.values())
        assert accepts(broker.host, broker.port) and accepts(broker.host, broker.epmd_port)
        connection = connect(broker)
        connection.channel().queue_declare(queue="left-open", durable=True)
        # Left open on purpose: stopping the broker must not wait for clients.
        raise KeyboardInterrupt
    stopped = time.monotonic() - began - started
    print(
        f"rabbitmq broker: started in {started:.1f}s (reported {broker.started_in_s:.1f}s), stopped in {stopped:.1f}s"
    )
    assert marked_pids(broker.node) == set()
    for pid in processes:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"{processes[pid]} ({pid}) still runs"
    for port in (broker.port, broker.epmd_port, broker.dist_port):
        assert not accepts(broker.host, port), f"port {port} still accepts connections"
        assert listening_addresses(port) == set()
    assert stopped < embedded_rabbitmq.STOP_TIMEOUT_S  # a graceful stop, not the kill after the timeout
    assert _log_shows(broker.log_path, f"stopped TCP listener on 127.0.0.1:{broker.port}")


def test_a_start_that_times_out_names_the_log_and_leaves_nothing(tmp_path: Path):
    with pytest.raises(RabbitBrokerError) as failure, rabbitmq_broker(tmp_path, start_timeout_s=0.5):
        pytest.fail("the broker cannot be ready within half a second")
    message = str(failure.value)
    assert "did not accept AMQP connections" in message and "within 0.5s" in message
    found = re.search(r"see the broker log (\S+/(tidemark-[0-9a-f]{12})\.log)", message)
    assert found is not None, message
    assert Path(found.group(1)).parent == tmp_path.resolve() / "log"
    assert marked_pids(f"{found.group(2)}@localhost") == set()


def test_a_missing_rabbitmq_server_says_make_rabbitmq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(embedded_rabbitmq, "SERVER_SCRIPTS", (tmp_path / "no-such-rabbitmq-server",))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerMissingError) as missing, rabbitmq_broker(tmp_path):
        pytest.fail("started without rabbitmq-server")
    assert isinstance(missing.value, TidemarkError)
    assert "make rabbitmq" in str(missing.value) and "\n" not in str(missing.value)
    assert list(tmp_path.iterdir()) == []  # nothing was prepared, nothing started


def test_the_installed_server_is_found(tmp_path: Path):
    # `make test` installs it: a machine without it fails here, loudly, rather than skipping.
    script = embedded_rabbitmq.server_script()
    assert script.is_file() and "rabbitmq-script-wrapper" not in script.read_text(errors="replace")
    assert embedded_rabbitmq.epmd_binary().is_file()


def _zombie(pid: int) -> bool:
    try:
        return ") Z " in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # gone meanwhile


def _log_shows(path: Path, text: str, timeout: float = 10.0) -> bool:
    """The broker writes its log file asynchronously: wait a little for a line to appear."""
    deadline = time.monotonic() + timeout
    while True:
        if text in path.read_text(errors="replace"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
