"""The archiver Lambda handler itself: cold start from env, EMF metrics, errors, sample events."""

from __future__ import annotations

import json
from types import ModuleType, SimpleNamespace

import pytest

from tests.conftest import EXAMPLE_CONFIG, REPO
from tests.support.events import load_event
from tests.support.handlers import emf_documents, lambda_context
from tests.support.handlers import load_handler as load_support_handler
from tidemark.archiver import PositionResetsError
from tidemark.exceptions import ConfigError, MalformedEventError, UnknownTopicError

HANDLER = REPO / "functions" / "archiver" / "handler.py"


def load_handler(monkeypatch, env: dict[str, str]) -> ModuleType:
    return load_support_handler(monkeypatch, HANDLER, env)


def context() -> SimpleNamespace:
    return lambda_context("tidemark-archiver-orders")


@pytest.fixture
def handler(archive, monkeypatch):
    return load_handler(monkeypatch, {**archive.env(), "TIDEMARK_CONFIG": str(EXAMPLE_CONFIG)})


def test_msk_sample_event_is_archived_and_measured(handler, archive, capsys):
    event = load_event("msk-orders")
    response = handler.lambda_handler(event, context())
    assert response == {
        "status": "ok",
        "streams": {
            "orders": {
                "records_in": 6,
                "duplicates": 0,
                "staged": 6,
                "dead_lettered": 2,
                "objects_committed": 0,
                "flush_errors": 0,
                "quarantined": 0,
            }
        },
    }
    docs = emf_documents(capsys.readouterr().out)
    main = next(doc for doc in docs if "RecordsIn" in doc)
    assert main["stream"] == "orders"
    assert (main["RecordsIn"], main["DuplicatesDropped"], main["DeadLettered"]) == ([6.0], [0.0], [2.0])
    assert main["BytesStaged"][0] > 0
    assert main["dead_letter_reasons"] == {"invalid_value_encoding": 1, "missing_event_time": 1}
    assert main["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Tidemark"

    # The ESM retries the same batch: everything is a duplicate.
    again = handler.lambda_handler(event, context())
    assert again["streams"]["orders"]["duplicates"] == 6
    assert again["streams"]["orders"]["staged"] == 0


def test_the_tombstone_sample_event_is_archived_and_no_dead_letter_is_measured(handler, archive, capsys):
    """``events/msk-tombstones.json``: two tombstones (``"value": null`` and an omitted value)
    and an order, all archived; ``DeadLettered`` (what the ``DeadLetters`` alarm watches) is 0."""
    response = handler.lambda_handler(load_event("msk-tombstones"), context())
    assert response["streams"]["orders"] | {"objects_committed": 0} == {
        "records_in": 3,
        "duplicates": 0,
        "staged": 3,
        "dead_lettered": 0,
        "objects_committed": 0,
        "flush_errors": 0,
        "quarantined": 0,
    }
    main = next(doc for doc in emf_documents(capsys.readouterr().out) if "RecordsIn" in doc)
    assert (main["RecordsIn"], main["DeadLettered"]) == ([3.0], [0.0])


def test_flush_metrics_carry_reason_and_latency(handler, archive, capsys):
    event = load_event("msk-orders")
    handler.lambda_handler(event, context())
    capsys.readouterr()
    handler.ARCHIVER.runtime.clock.now_ms = lambda: 4_102_444_800_000  # far past max age
    # The redelivery stages nothing new, but both partitions' buffers are past max age:
    # partition 0 has raw 07h, raw 03h (a late order) and errors 07h; partition 1 has raw 07h.
    response = handler.lambda_handler(event, context())
    assert response["streams"]["orders"]["objects_committed"] == 4
    docs = emf_documents(capsys.readouterr().out)
    assert len(docs) == 1  # one EMF document per batch, flush reasons included
    main = docs[0]
    reasons = {name: value for name, value in main.items() if name.startswith("Flushes_")}
    assert reasons == {"Flushes_max_age": [4.0]}
    assert main["ObjectsCommitted"] == [4.0]
    assert len(main["FlushLatency"]) == 4
    keys = sorted(o["Key"] for o in archive.s3.list_objects_v2(Bucket=archive.bucket)["Contents"])
    assert keys == [
        "errors/orders/2026/11/21/07/orders+0+00000000000000000003-00000000000000000004.jsonl.gz",
        "raw/orders/2026/11/21/03/orders+0+00000000000000000002-00000000000000000002.jsonl.zst",
        "raw/orders/2026/11/21/07/orders+0+00000000000000000000-00000000000000000001.jsonl.zst",
        "raw/orders/2026/11/21/07/orders+1+00000000000000000007-00000000000000000007.jsonl.zst",
    ]


def test_self_managed_sample_event(handler, archive):
    response = handler.lambda_handler(load_event("self-managed-orders"), context())
    assert response["streams"]["orders"]["staged"] == 1


def test_malformed_event_fails_clearly(handler):
    expected = "not a Kafka, Kinesis or RabbitMQ event source mapping event: eventSource='aws:sqs'"
    with pytest.raises(MalformedEventError, match=expected):
        handler.lambda_handler({"Records": [{"eventSource": "aws:sqs"}]}, context())


def test_unknown_topic_fails_before_staging_anything(handler, archive):
    event = load_event("msk-orders")
    event["records"] = {"payments-0": [{**event["records"]["orders-0"][0], "topic": "payments"}]}
    with pytest.raises(UnknownTopicError, match="no stream archives topic 'payments'"):
        handler.lambda_handler(event, context())
    assert list(archive.staging_root.rglob("*")) == []


def test_bad_config_fails_cold_start_naming_the_field(archive, monkeypatch, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE_CONFIG.read_text().replace("max_age: 15m", "max_age: 15 minutes"))
    with pytest.raises(ConfigError, match=r"streams\[0\]\.flush\.max_age"):
        load_handler(monkeypatch, {**archive.env(), "TIDEMARK_CONFIG": str(bad)})


def test_missing_environment_fails_cold_start(archive, monkeypatch):
    monkeypatch.delenv("TIDEMARK_BUCKET", raising=False)
    env = {k: v for k, v in archive.env().items() if k != "TIDEMARK_BUCKET"}
    with pytest.raises(ConfigError, match="TIDEMARK_BUCKET"):
        load_handler(monkeypatch, {**env, "TIDEMARK_CONFIG": str(EXAMPLE_CONFIG)})


def test_a_position_reset_fails_the_invocation_and_is_counted(handler, archive, capsys):
    event = load_event("msk-orders")
    handler.lambda_handler(event, context())
    moved = json.loads(json.dumps(event))  # the same partition, now from another cluster
    moved["eventSourceArn"] = moved["eventSourceArn"].replace("tidemark-demo", "tidemark-dr")
    capsys.readouterr()
    with pytest.raises(PositionResetsError, match="tidemark epoch start"):
        handler.lambda_handler(moved, context())
    resets = [doc for doc in emf_documents(capsys.readouterr().out) if "PositionResets" in doc]
    assert [(doc["stream"], doc["PositionResets"]) for doc in resets] == [("orders", [2.0])]  # partitions 0 and 1
