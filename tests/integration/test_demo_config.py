"""The demo's view of the config file: the same validated config, with its overrides."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import EXAMPLE_CONFIG, REPO
from tests.support.harness import example_config_data
from tidemark.embedded.demo import DemoOptions, demo_config, run_hours
from tidemark.exceptions import ConfigError


def test_overrides_apply_and_are_validated_like_the_file():
    options = DemoOptions(REPO, EXAMPLE_CONFIG, topic="orders-demo-1", flush_records=2000)
    data, config, stream = demo_config(options)
    assert (stream.source.topic, stream.flush.max_records) == ("orders-demo-1", 2000)
    assert data["streams"][0]["source"]["topic"] == "orders-demo-1"  # what the handler gets
    assert config.stream_for_topic("orders-demo-1") is stream
    with pytest.raises(ConfigError, match=r"streams\[0\]\.flush\.max_records"):
        demo_config(DemoOptions(REPO, EXAMPLE_CONFIG, flush_records=10**9))


def test_unknown_stream_and_unusable_streams_are_named(tmp_path):
    with pytest.raises(ConfigError, match=r"--stream 'clicks': not in .* \(streams: orders\)"):
        demo_config(DemoOptions(REPO, EXAMPLE_CONFIG, stream="clicks"))
    data = example_config_data()
    data["streams"][0]["event_time"] = {"source": "record_timestamp"}
    other = tmp_path / "tidemark.yaml"
    other.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="carries its event time in the JSON field 'created_at'"):
        demo_config(DemoOptions(REPO, other))
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        demo_config(DemoOptions(REPO, tmp_path / "missing.yaml"))


def test_run_hours_cover_the_run_in_the_stream_zone():
    start_ms = 1_795_255_140_000  # 2026-11-21T09:59:00Z
    assert run_hours(start_ms, (start_ms + 120_000) / 1000, "UTC") == {"2026-11-21T09", "2026-11-21T10"}
    assert run_hours(start_ms, start_ms / 1000, "Asia/Kolkata") == {"2026-11-21T15"}
