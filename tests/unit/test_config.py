"""tidemark.config: the model, the units and the loaders; every error names the field."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidemark.config import (
    DeadLetterConfig,
    EventTimeConfig,
    FlushPolicyConfig,
    TidemarkConfig,
    load_config,
    load_config_from_env,
    parse_config,
)
from tidemark.config.model import KEY_FIXED_PART, key_fixed_part
from tidemark.config.units import parse_duration, to_ms
from tidemark.exceptions import ConfigError, TidemarkError
from tidemark.objects.keys import object_key
from tidemark.sources import KAFKA_SHAPE, KINESIS_SHAPE

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "tidemark.yaml"
CLUSTER_ARN = "arn:aws:kafka:us-east-1:123456789012:cluster/tidemark-demo/4f3e2d1c-0b9a-4c8d-9e7f-6a5b4c3d2e1f-1"
MiB = 1024 * 1024


def example_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    return data


def minimal(**stream: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "orders", "source": {"cluster_arn": CLUSTER_ARN, "topic": "orders"}}
    base.update(stream)
    return {"streams": [base]}


def config_error(data: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    return str(caught.value)


def mutated(mutate: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    data = copy.deepcopy(example_data())
    mutate(data)
    return data


# -- the example configuration --------------------------------------------------------------------


def test_example_config_loads_with_its_values() -> None:
    config = load_config(EXAMPLE)
    assert isinstance(config, TidemarkConfig)
    assert config.version == 1
    assert (config.archive.raw_prefix, config.archive.errors_prefix) == ("raw", "errors")
    assert config.archive.segment_grace == timedelta(minutes=30)
    assert config.archive.segment_grace_ms == 1_800_000
    assert (int(config.archive.multipart_threshold), int(config.archive.multipart_chunksize)) == (16 * MiB, 8 * MiB)
    (stream,) = config.streams
    assert stream.name == "orders"
    assert stream.source.model_dump() == {
        "kind": "msk",
        "topic": "orders",
        "cluster_arn": CLUSTER_ARN,
        "bootstrap_servers": None,
        "consumer_group_id": None,
        "stream_arn": None,
        "batch_size": 1000,
        "batching_window": "1000ms",
        "starting_position": "TRIM_HORIZON",
        "starting_position_timestamp": None,
        "consumer": "shared",
        "parallelization_factor": 1,
        "auth": None,
        "network": None,
        "schema_registry": None,
        "broker_arn": None,
        "virtual_host": None,
        "credentials_secret_arn": None,
        "allow_plaintext_public": False,
    }
    assert stream.event_time == EventTimeConfig(source="json_field", field="created_at", format="auto", timezone="UTC")
    assert stream.flush.max_records == 100_000
    assert int(stream.flush.max_bytes) == 64 * MiB
    assert stream.flush.max_age == timedelta(minutes=15)
    assert stream.flush.max_age_ms == 900_000
    assert int(stream.dead_letter.max_record_bytes) == MiB
    assert (stream.format.type, stream.format.compression, stream.format.zstd_level) == ("jsonl", "zstd", 1)
    (aggregation,) = stream.aggregations
    assert aggregation.name == "orders_by_product"
    assert aggregation.group_by == ["product_id"]
    assert aggregation.metrics == {
        "order_count": "count(*)",
        "revenue": "sum(price * quantity)",
        "distinct_customers": "count(distinct customer_id)",
    }
    assert config.stream("orders") is stream
    assert config.stream_for_topic("orders") is stream
    assert config.stream_for_topic("payments") is None
    with pytest.raises(KeyError):
        config.stream("payments")


def test_load_config_accepts_a_string_path() -> None:
    assert load_config(str(EXAMPLE)) == load_config(EXAMPLE)


def test_minimal_config_takes_the_defaults() -> None:
    config = parse_config(minimal())
    stream = config.streams[0]
    assert stream.event_time == EventTimeConfig()
    assert stream.event_time.source == "record_timestamp"
    assert stream.flush == FlushPolicyConfig()
    assert stream.flush.max_records == 100_000
    assert int(stream.flush.max_bytes) == 64 * MiB
    assert stream.flush.max_age == timedelta(minutes=15)
    assert (stream.flush.max_segments, stream.flush.max_open_buffers) == (200, 24)
    assert stream.dead_letter == DeadLetterConfig()
    assert config.archive.segment_grace == timedelta(minutes=30)


def test_config_models_are_frozen() -> None:
    config = parse_config(minimal())
    with pytest.raises(ValueError, match="frozen"):
        config.streams[0].name = "other"  # type: ignore[misc]


# -- errors name the field -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "field"),
    [("flush", "max_recordz"), ("source", "topics"), ("event_time", "zone"), ("format", "level")],
)
def test_unknown_field_is_named_with_its_path(section: str, field: str) -> None:
    data = mutated(lambda d: d["streams"][0][section].update({field: 1}))
    assert config_error(data) == f"<config>: streams[0].{section}.{field}: unknown field"


def test_unknown_top_level_and_stream_fields() -> None:
    assert config_error({**minimal(), "streamz": []}) == "<config>: streamz: unknown field"
    assert config_error(minimal(sink="s3")) == "<config>: streams[0].sink: unknown field"


def test_several_problems_are_all_reported() -> None:
    data = mutated(lambda d: (d["streams"][0]["flush"].update(bogus=1), d["archive"].update(raw_prefix="Raw")))
    message = config_error(data)
    assert "streams[0].flush.bogus: unknown field" in message
    assert "archive.raw_prefix: String should match pattern" in message


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:kafka:us-east-1:123:cluster/tidemark-demo/abc",  # account id too short
        "arn:aws:s3:::bucket",
        "arn:aws:kafka:us-east-1:123456789012:topic/tidemark-demo/abc",
        "not an arn",
        "",
    ],
)
def test_bad_cluster_arn_is_named(arn: str) -> None:
    data = mutated(lambda d: d["streams"][0]["source"].update(cluster_arn=arn))
    assert config_error(data).startswith("<config>: streams[0].source.cluster_arn: String should match pattern")


def test_msk_source_needs_a_cluster_arn() -> None:
    message = config_error(minimal(source={"topic": "orders"}))
    assert message == (
        "<config>: streams[0].source.cluster_arn is required when kind is 'msk' "
        "(or set dev_cluster.enabled to read from a dev MSK Serverless cluster)"
    )


def test_self_managed_source_needs_bootstrap_servers() -> None:
    message = config_error(minimal(source={"kind": "kafka", "topic": "orders"}))
    assert message == "<config>: streams[0].source: bootstrap_servers is required when kind is 'kafka'"
    config = parse_config(minimal(source={"kind": "kafka", "topic": "orders", "bootstrap_servers": ["k:9092"]}))
    assert config.streams[0].source.bootstrap_servers == ["k:9092"]


SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:kafka-creds-AbCdEf"
MSK_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:AmazonMSK_orders-AbCdEf"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SELF_MANAGED = {"kind": "kafka", "topic": "orders", "bootstrap_servers": ["pkc-1.confluent.cloud:9092"]}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({**SELF_MANAGED, "auth": {"mechanism": "iam"}}, "auth.mechanism 'iam': kind 'kafka' takes one of none,"),
        (
            {"cluster_arn": CLUSTER_ARN, "topic": "orders", "auth": {"mechanism": "plain", "secret_arn": SECRET}},
            "auth.mechanism 'plain': kind 'msk' takes one of iam, sasl_scram_512, mtls",
        ),
        ({**SELF_MANAGED, "auth": {"mechanism": "sasl_scram_256"}}, "secret_arn is required with mechanism"),
        ({**SELF_MANAGED, "auth": {"mechanism": "none", "secret_arn": SECRET}}, "mechanism 'none' uses no secret"),
        (
            {"cluster_arn": CLUSTER_ARN, "topic": "orders",
             "auth": {"mechanism": "sasl_scram_512", "secret_arn": SECRET}},
            "MSK reads SASL/SCRAM credentials only from secrets named AmazonMSK_..., got 'kafka-creds-AbCdEf'",
        ),
        (
            {"cluster_arn": CLUSTER_ARN, "topic": "orders", "network": {"subnet_ids": ["subnet-0abc1234"],
             "security_group_ids": ["sg-0abc1234"]}},
            "network is for self-managed Kafka",
        ),
        (
            {"cluster_arn": CLUSTER_ARN, "topic": "orders",
             "auth": {"mechanism": "mtls", "secret_arn": SECRET, "root_ca_secret_arn": SECRET}},
            "root_ca_secret_arn is for self-managed Kafka",
        ),
        ({**SELF_MANAGED, "network": {"subnet_ids": ["vpc-1"], "security_group_ids": ["sg-0abc1234"]}}, "subnet id"),
        ({**SELF_MANAGED, "bootstrap_servers": ["no-port"]}, "'no-port' is not host:port"),
        ({**SELF_MANAGED, "auth": {"mechanism": "none", "kms_key_arn": KEY}}, "no secret it would decrypt"),
        (
            {"kind": "kinesis", "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/orders",
             "auth": {"mechanism": "none"}},
            "auth is for Kafka sources, not kind 'kinesis'",
        ),
    ],
)  # fmt: skip
def test_kafka_auth_and_network_are_checked_against_the_kind(source: dict[str, Any], message: str) -> None:
    assert message in config_error(minimal(source=source))


GLUE = {"kind": "glue", "registry_arn": "arn:aws:glue:us-east-1:123456789012:registry/orders"}
POLLERS = {"provisioned_pollers": {"minimum": 1, "maximum": 2}}


@pytest.mark.parametrize(
    ("source", "archiver", "message"),
    [
        ({"schema_registry": GLUE}, {}, "source.schema_registry needs archiver.provisioned_pollers"),
        ({"schema_registry": {**GLUE, "url": "https://r:8081"}}, POLLERS, "(IAM signs it in); not url"),
        ({"schema_registry": {"kind": "confluent", "url": "https://r:8081"}}, POLLERS, "needs auth (basic |"),
        ({"schema_registry": {**GLUE, "validate": ["value", "value"]}}, POLLERS, "validate: each part once"),
        ({"schema_registry": {**GLUE, "record_format": "avro"}}, POLLERS, "Input should be 'json' or 'source'"),
    ],
)  # fmt: skip
def test_schema_registry_settings_are_checked(source: dict[str, Any], archiver: dict[str, Any], message: str) -> None:
    data = minimal(source={"cluster_arn": CLUSTER_ARN, "topic": "orders", **source}, archiver=archiver)
    assert message in config_error(data)


def test_a_schema_registry_config_survives_the_lambdas_round_trip() -> None:
    """The Lambdas get the configuration dumped to JSON: ``validate`` (an alias) must read back."""
    source = {"cluster_arn": CLUSTER_ARN, "topic": "orders", "schema_registry": {**GLUE, "validate": ["key", "value"]}}
    config = parse_config(minimal(source=source, archiver=POLLERS))
    again = parse_config(json.loads(config.model_dump_json()))
    assert again.streams[0].source.schema_registry == config.streams[0].source.schema_registry
    assert again.streams[0].source.schema_registry.validate_parts == ["key", "value"]  # type: ignore[union-attr]


def test_each_kafka_kind_has_a_default_auth_mechanism() -> None:
    msk = parse_config(minimal(source={"cluster_arn": CLUSTER_ARN, "topic": "orders"})).streams[0].source
    kafka = parse_config(minimal(source={**SELF_MANAGED, "allow_plaintext_public": True})).streams[0].source
    scram = {"mechanism": "sasl_scram_512", "secret_arn": MSK_SECRET, "kms_key_arn": KEY}
    chosen = parse_config(minimal(source={"cluster_arn": CLUSTER_ARN, "topic": "orders", "auth": scram}))
    assert (msk.auth_mechanism, kafka.auth_mechanism, chosen.streams[0].source.auth_mechanism) == (
        "iam",
        "none",
        "sasl_scram_512",
    )


@pytest.mark.parametrize("topic", ["../etc", "a/b", "", "x" * 250, "orders topic", "orders\n"])
def test_bad_topic_is_named(topic: str) -> None:
    assert config_error(minimal(source={"cluster_arn": CLUSTER_ARN, "topic": topic})).startswith(
        "<config>: streams[0].source.topic: String should"
    )


@pytest.mark.parametrize("name", ["Orders", "1orders", "or/ders", "", "a" * 64, "orders\n"])
def test_bad_stream_name_is_named(name: str) -> None:
    assert config_error(minimal(name=name)).startswith("<config>: streams[0].name: String should")


@pytest.mark.parametrize("zone", ["Mars/Olympus", "EST+5", "../../etc/passwd", ""])
def test_unknown_timezone_is_named(zone: str) -> None:
    data = mutated(lambda d: d["streams"][0]["event_time"].update(timezone=zone))
    assert config_error(data) == f"<config>: streams[0].event_time.timezone: unknown IANA time zone {zone!r}"


def test_json_field_without_field_is_named() -> None:
    data = mutated(lambda d: d["streams"][0]["event_time"].pop("field"))
    assert config_error(data) == "<config>: streams[0].event_time: field is required when source is 'json_field'"


def test_header_source_without_header_is_named() -> None:
    message = config_error(minimal(event_time={"source": "header"}))
    assert message == "<config>: streams[0].event_time: header is required when source is 'header'"


@pytest.mark.parametrize("field", ["a..b", ".a", "a.", ""])
def test_bad_dotted_path_is_named(field: str) -> None:
    data = mutated(lambda d: d["streams"][0]["event_time"].update(field=field))
    assert config_error(data).startswith("<config>: streams[0].event_time.field: must be a dotted path")


def test_json_field_needs_json_values() -> None:
    data = mutated(lambda d: d["streams"][0]["encoding"].update(value="text"))
    assert config_error(data) == "<config>: streams[0]: event_time.source 'json_field' needs encoding.value 'json'"


def test_duplicate_stream_names_are_rejected() -> None:
    data = mutated(lambda d: d["streams"].append({**copy.deepcopy(d["streams"][0]), "source": _source("payments")}))
    assert config_error(data) == "<config>: stream names must be unique, got ['orders', 'orders']"


def test_duplicate_topics_are_rejected() -> None:
    data = mutated(lambda d: d["streams"].append({**copy.deepcopy(d["streams"][0]), "name": "orders_copy"}))
    assert (
        config_error(data)
        == "<config>: each topic (or Kinesis stream) may feed one stream only, got ['orders', 'orders']"
    )


def _source(topic: str) -> dict[str, Any]:
    return {"kind": "msk", "cluster_arn": CLUSTER_ARN, "topic": topic}


def test_two_distinct_streams_are_accepted() -> None:
    config = parse_config({"streams": [minimal()["streams"][0], {"name": "payments", "source": _source("payments")}]})
    assert [s.name for s in config.streams] == ["orders", "payments"]
    assert config.stream_for_topic("payments") is config.streams[1]


def test_no_streams_is_rejected() -> None:
    assert config_error({"streams": []}).startswith("<config>: streams: List should have at least 1 item")
    assert config_error({}) == "<config>: streams: Field required"


def test_raw_and_errors_prefix_must_differ() -> None:
    message = config_error({**minimal(), "archive": {"raw_prefix": "data", "errors_prefix": "data"}})
    assert message == "<config>: archive.raw_prefix, archive.errors_prefix and sweeper.manifests_prefix must differ"


def test_flush_max_age_below_the_sweeper_interval_names_the_field() -> None:
    data = {**minimal(flush={"max_age": "2m"}), "sweeper": {"interval": "5m"}}
    assert config_error(data) == (
        "<config>: streams[0].flush.max_age (0:02:00) is shorter than sweeper.interval (0:05:00): "
        "a quiet partition's buffer would wait up to the interval anyway"
    )


@pytest.mark.parametrize(
    ("sweeper", "message"),
    [
        ({"interval": "30s"}, "sweeper.interval: must be whole minutes between 1m and 24h (an EventBridge rate)"),
        ({"interval": "90s"}, "sweeper.interval: must be whole minutes between 1m and 24h (an EventBridge rate)"),
        ({"reconcile_lookback": "10m"}, "sweeper.reconcile_lookback: must be between 1h and 31d"),
        ({"max_concurrency": 0}, "sweeper.max_concurrency: Input should be greater than or equal to 1"),
        (
            {"manifests_prefix": "raw"},
            "archive.raw_prefix, archive.errors_prefix and sweeper.manifests_prefix must differ",
        ),
        ({"speed": 1}, "sweeper.speed: unknown field"),
    ],
)
def test_sweeper_settings_are_validated(sweeper: dict[str, Any], message: str) -> None:
    assert config_error({**minimal(), "sweeper": sweeper}) == f"<config>: {message}"


def test_allowed_lateness_is_validated() -> None:
    assert config_error(minimal(completeness={"allowed_lateness": "8d"})) == (
        "<config>: streams[0].completeness.allowed_lateness: must be between 0s and 7d"
    )


@pytest.mark.parametrize("grace", ["15m", "900s", "1m", "0s", 900])
def test_segment_grace_must_exceed_fifteen_minutes(grace: Any) -> None:
    message = config_error({**minimal(), "archive": {"segment_grace": grace}})
    assert message == "<config>: archive.segment_grace: must exceed 15m, the longest a Lambda invocation can run"


@pytest.mark.parametrize(("grace", "ms"), [("901s", 901_000), ("16m", 960_000), ("1h", 3_600_000), (3600, 3_600_000)])
def test_segment_grace_above_fifteen_minutes_is_accepted(grace: Any, ms: int) -> None:
    assert parse_config({**minimal(), "archive": {"segment_grace": grace}}).archive.segment_grace_ms == ms


def test_version_must_be_one() -> None:
    assert config_error({**minimal(), "version": 2}) == "<config>: version: Input should be 1"


def test_config_must_be_a_mapping() -> None:
    assert config_error(["streams"]) == "<config>: the configuration must be a mapping, got list"
    assert config_error(None) == "<config>: the configuration must be a mapping, got NoneType"


def test_origin_prefixes_the_message() -> None:
    with pytest.raises(ConfigError, match=r"^cfg\.yaml: streams: Field required$"):
        parse_config({}, origin="cfg.yaml")


# -- units ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("1h", timedelta(hours=1)),
        ("2d", timedelta(days=2)),
        ("1500ms", timedelta(milliseconds=1500)),
        ("1.5h", timedelta(minutes=90)),
        (" 30 s ", timedelta(seconds=30)),
        (45, timedelta(seconds=45)),
        (2.5, timedelta(milliseconds=2500)),
        (timedelta(minutes=3), timedelta(minutes=3)),
    ],
)
def test_parse_duration(text: Any, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["soon", "15", "15 minutes", "m15", "-5m", "", True, None, [1]])
def test_parse_duration_rejects(text: Any) -> None:
    with pytest.raises(ValueError, match="expected a duration such as '90s', '15m' or '1h'"):
        parse_duration(text)


@pytest.mark.parametrize(("duration", "ms"), [("90s", 90_000), ("15m", 900_000), ("1h", 3_600_000), ("1s", 1000)])
def test_flush_max_age_durations(duration: str, ms: int) -> None:
    flush = FlushPolicyConfig(max_age=duration)  # type: ignore[arg-type]
    assert flush.max_age_ms == ms
    assert to_ms(flush.max_age) == ms


@pytest.mark.parametrize(
    ("size", "expected"),
    [("64MiB", 64 * MiB), ("1MiB", MiB), ("1MB", 1_000_000), ("2GiB", 2 * 1024 * MiB), (4096, 4096), ("1KiB", 1024)],
)
def test_byte_sizes(size: Any, expected: int) -> None:
    assert int(FlushPolicyConfig(max_bytes=size).max_bytes) == expected


def test_durations_and_sizes_serialise_to_plain_values() -> None:
    dumped = FlushPolicyConfig(max_bytes="64MiB", max_age="90s").model_dump()  # type: ignore[arg-type]
    assert dumped == {
        "max_records": 100_000,
        "max_bytes": 64 * MiB,
        "max_age": "90000ms",
        "max_segments": 200,
        "max_open_buffers": 24,
    }


def test_dumped_config_parses_back_to_an_equal_config() -> None:
    config = load_config(EXAMPLE)
    assert parse_config(json.loads(json.dumps(config.model_dump()))) == config


@pytest.mark.parametrize(
    ("flush", "message"),
    [
        ({"max_age": "soon"}, "streams[0].flush.max_age: expected a duration such as '90s', '15m' or '1h', got 'soon'"),
        ({"max_age": "0s"}, "streams[0].flush.max_age: must be between 1s and 7d"),
        ({"max_age": "8d"}, "streams[0].flush.max_age: must be between 1s and 7d"),
        ({"max_bytes": "lots"}, "streams[0].flush.max_bytes: could not parse value and unit from byte string"),
        ({"max_bytes": "1KB"}, "streams[0].flush.max_bytes: Input should be greater than or equal to 1024"),
        ({"max_records": 0}, "streams[0].flush.max_records: Input should be greater than or equal to 1"),
        (
            {"max_segments": 1000, "max_open_buffers": 5},
            "streams[0].flush: max_segments * max_open_buffers must be at most 4800 (ledger item size)",
        ),
    ],
)
def test_bad_flush_values_are_named(flush: dict[str, Any], message: str) -> None:
    assert config_error(minimal(flush=flush)) == f"<config>: {message}"


def test_batching_window_limit_is_named() -> None:
    message = config_error(minimal(source={**_source("orders"), "batching_window": "301s"}))
    assert message == "<config>: streams[0].source.batching_window: must be between 0s and 300s (the ESM's limit)"


def test_dead_letter_max_record_bytes() -> None:
    config = parse_config(minimal(dead_letter={"max_record_bytes": "256KiB"}))
    assert int(config.streams[0].dead_letter.max_record_bytes) == 256 * 1024
    assert config_error(minimal(dead_letter={"max_record_bytes": 0})) == (
        "<config>: streams[0].dead_letter.max_record_bytes: Input should be greater than or equal to 1"
    )


# -- loaders --------------------------------------------------------------------------------------


def test_load_config_missing_file() -> None:
    missing = EXAMPLE.parent / "does-not-exist.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(missing)
    assert str(caught.value) == f"{missing}: cannot read the configuration (No such file or directory)"
    assert isinstance(caught.value, TidemarkError)


@pytest.fixture
def fake_files(monkeypatch: pytest.MonkeyPatch) -> dict[Path, str]:
    """Serve ``load_config``'s read of chosen paths from memory (unit tests do no file I/O)."""
    files: dict[Path, str] = {}
    real_read_text = Path.read_text

    def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        if self in files:
            return files[self]
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    return files


@pytest.mark.parametrize(
    "text",
    ["streams: [\n  - name: orders\n    source: {topic: orders\n", "a: b: c\n", "key: 'unterminated\n", "\tx: 1\n"],
)
def test_load_config_invalid_yaml(fake_files: dict[Path, str], text: str) -> None:
    path = Path("/virtual/broken.yaml")
    fake_files[path] = text
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: not valid YAML: ")


@pytest.mark.parametrize(("text", "kind"), [("", "NoneType"), ("- a\n- b\n", "list"), ("just text\n", "str")])
def test_load_config_yaml_that_is_not_a_mapping(fake_files: dict[Path, str], text: str, kind: str) -> None:
    path = Path("/virtual/scalar.yaml")
    fake_files[path] = text
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: the configuration must be a mapping, got {kind}"


def test_load_config_valid_yaml_invalid_config_names_file_and_field(fake_files: dict[Path, str]) -> None:
    path = Path("/virtual/typo.yaml")
    fake_files[path] = EXAMPLE.read_text(encoding="utf-8").replace("max_records: 100000", "max_recods: 100000")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: streams[0].flush.max_recods: unknown field"


def test_load_config_from_env_inline_json_wins() -> None:
    data = example_data()
    environ = {"TIDEMARK_CONFIG_JSON": json.dumps(data), "TIDEMARK_CONFIG": "/nonexistent/tidemark.yaml"}
    assert load_config_from_env(environ) == load_config(EXAMPLE)


def test_load_config_from_env_path() -> None:
    assert load_config_from_env({"TIDEMARK_CONFIG": str(EXAMPLE)}) == load_config(EXAMPLE)


@pytest.mark.parametrize("environ", [{}, {"TIDEMARK_CONFIG": ""}, {"TIDEMARK_CONFIG_JSON": ""}])
def test_load_config_from_env_with_nothing_set(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_from_env(environ)
    assert str(caught.value) == (
        "set $TIDEMARK_CONFIG (a path) or $TIDEMARK_CONFIG_JSON (inline JSON) to the Tidemark configuration"
    )


def test_load_config_from_env_invalid_json() -> None:
    with pytest.raises(ConfigError, match=r"^\$TIDEMARK_CONFIG_JSON: not valid JSON: "):
        load_config_from_env({"TIDEMARK_CONFIG_JSON": "{streams: "})


def test_load_config_from_env_invalid_config_names_the_field() -> None:
    data = mutated(lambda d: d["streams"][0]["flush"].update(max_recordz=1))
    with pytest.raises(ConfigError) as caught:
        load_config_from_env({"TIDEMARK_CONFIG_JSON": json.dumps(data)})
    assert str(caught.value) == "$TIDEMARK_CONFIG_JSON: streams[0].flush.max_recordz: unknown field"


def test_load_config_from_env_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDEMARK_CONFIG", raising=False)
    monkeypatch.setenv("TIDEMARK_CONFIG_JSON", json.dumps(minimal()))
    assert load_config_from_env() == parse_config(minimal())


def test_aggregations_need_json_values() -> None:
    data = minimal(encoding={"value": "text"}, event_time={"source": "record_timestamp"})
    data["streams"][0]["aggregations"] = [{"name": "n", "metrics": {"c": "count(*)"}}]
    assert config_error(data) == (
        "<config>: streams[0]: aggregations need encoding.value 'json' (they read the value's fields)"
    )


# --- deployment sections -----------------------------------------------------------------------


def test_deployment_defaults_create_a_vpc_with_endpoints() -> None:
    config = parse_config(minimal())
    assert (config.network.vpc_id, config.network.endpoints) == (None, True)
    assert config.pipeline.release_label.startswith("emr-7.")
    assert config.streams[0].archiver.retry_attempts is None  # retry until success


def test_an_existing_vpc_keeps_its_own_endpoints_unless_asked() -> None:
    existing = {"vpc_id": "vpc-0123456789abcdef0"}
    assert parse_config({**minimal(), "network": existing}).network.endpoints is False
    asked = {**existing, "create_endpoints": True}
    assert parse_config({**minimal(), "network": asked}).network.endpoints is True


def test_runtime_json_leaves_out_what_only_the_stack_reads() -> None:
    data = {**minimal(), "alarms": {"emails": ["oncall@example.com"]}, "dev_cluster": {"enabled": True}}
    config = parse_config(data)
    runtime = json.loads(config.runtime_json())
    assert not {"network", "pipeline", "alarms"} & set(runtime)
    assert "archiver" not in runtime["streams"][0]
    # what the functions get is itself a valid configuration with the same streams
    again = parse_config(runtime)
    assert again.streams[0].flush == config.streams[0].flush
    assert again.dev_cluster.enabled


@pytest.mark.parametrize("name", ["tidemark.yaml", "kinesis.yaml"])
def test_runtime_json_parses_back_into_the_same_runtime_configuration(name: str) -> None:
    """Defaults are left out of what the functions get: parsed back, every setting they read is
    what the stack was given, and it is well within Lambda's environment limit."""
    config = load_config(EXAMPLE.parent / name)
    runtime = config.runtime_json()
    again = parse_config(json.loads(runtime))
    assert (again.streams, again.archive, again.sweeper, again.dev_cluster) == (
        [stream.model_copy(update={"archiver": again.streams[0].archiver}) for stream in config.streams],
        config.archive,
        config.sweeper,
        config.dev_cluster,
    )
    assert len(runtime.encode()) < 1024


def test_msk_stream_may_omit_its_cluster_with_the_dev_cluster() -> None:
    data = {"streams": [{"name": "orders", "source": {"topic": "orders"}}], "dev_cluster": {"enabled": True}}
    assert parse_config(data).streams[0].source.cluster_arn is None


def test_transitions_must_ascend() -> None:
    transitions = [{"storage_class": "GLACIER_IR", "after": "90d"}, {"storage_class": "STANDARD_IA", "after": "30d"}]
    message = config_error({**minimal(), "archive": {"transitions": transitions}})
    assert "archive.transitions: transitions must be in ascending order" in message


def test_provisioned_pollers_bounds() -> None:
    pollers = {"minimum": 10, "maximum": 5}
    message = config_error(minimal(archiver={"provisioned_pollers": pollers}))
    assert "streams[0].archiver.provisioned_pollers: minimum (10) is above maximum (5)" in message


@pytest.mark.parametrize(
    ("transitions", "message"),
    [
        (
            [{"storage_class": "GLACIER", "after": "30d"}, {"storage_class": "STANDARD_IA", "after": "60d"}],
            "cannot move objects from GLACIER to STANDARD_IA",
        ),
        (
            [{"storage_class": "STANDARD_IA", "after": "30d"}, {"storage_class": "GLACIER_IR", "after": "40d"}],
            "must stay 30d in STANDARD_IA before moving on (30d -> 40d)",
        ),
    ],
)
def test_transitions_follow_s3s_waterfall(transitions: list[dict[str, str]], message: str) -> None:
    assert message in config_error({**minimal(), "archive": {"transitions": transitions}})


@pytest.mark.parametrize(
    ("pipeline", "field"),
    [
        ({"job_timeout": "90s", "schedule": "1h"}, "pipeline.job_timeout: must be whole minutes"),
        ({"max_cpu": "0 vCPU"}, "pipeline.max_cpu"),
        ({"max_memory": "64 TB"}, "pipeline.max_memory"),
    ],
)
def test_pipeline_values_emr_would_refuse(pipeline: dict[str, str], field: str) -> None:
    assert field in config_error({**minimal(), "pipeline": pipeline})


def test_cloudformation_accepts_these_capacity_spellings() -> None:
    config = parse_config({**minimal(), "pipeline": {"max_cpu": "16vCPU", "max_memory": "120 GB"}})
    assert (config.pipeline.max_cpu, config.pipeline.max_memory) == ("16vCPU", "120 GB")


# -- formats and partitioning ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "default"),
    [
        ("jsonl", "zstd"),
        ("parquet", "snappy"),
        ("avro", "deflate"),
        ("csv", "zstd"),
        ("text", "zstd"),
        ("bytes", "zstd"),
    ],
)
def test_each_format_takes_its_default_compression(fmt: str, default: str) -> None:
    stream = parse_config(minimal(format={"type": fmt}, aggregations=[])).streams[0]
    assert (stream.format.type, stream.format.compression) == (fmt, default)
    assert (stream.format.gzip_level, stream.format.zstd_level) == (6, 1)


@pytest.mark.parametrize("level", [0, 23, -1])
def test_the_zstd_level_is_one_zstd_compresses_at(level: int) -> None:
    assert "zstd_level" in config_error(minimal(format={"type": "jsonl", "zstd_level": level}))
    for ok in (1, 22):
        stream = parse_config(minimal(format={"type": "jsonl", "zstd_level": ok})).streams[0]
        assert stream.format.zstd_level == ok


@pytest.mark.parametrize(
    ("fmt", "codec"), [("jsonl", "snappy"), ("parquet", "deflate"), ("avro", "zstd"), ("csv", "lz4"), ("text", "null")]
)
def test_a_codec_the_format_lacks_is_named(fmt: str, codec: str) -> None:
    message = config_error(minimal(format={"type": fmt, "compression": codec}))
    assert f"streams[0].format: compression {codec!r} is not one {fmt} supports (" in message


def test_format_options_belong_to_their_formats() -> None:
    schema = {"fields": [{"name": "price", "type": "double"}]}
    assert "value_schema is for parquet and avro" in config_error(
        minimal(format={"type": "csv", "value_schema": schema})
    )
    assert "columns is for csv" in config_error(minimal(format={"type": "parquet", "columns": ["offset"]}))
    assert "neither an envelope field" in config_error(minimal(format={"type": "csv", "columns": ["price"]}))
    ok = parse_config(minimal(format={"type": "csv", "columns": ["offset", "value.customer.id"]})).streams[0]
    assert ok.csv_columns == ("offset", "value.customer.id")


def test_aggregations_need_a_format_that_keeps_positions() -> None:
    aggregations = [{"name": "n", "metrics": {"c": "count(*)"}}]
    assert "keeps each record's partition and offset" in config_error(
        minimal(format={"type": "text"}, aggregations=aggregations)
    )
    assert "csv without those columns" in config_error(
        minimal(format={"type": "csv", "columns": ["offset", "value.price"]}, aggregations=aggregations)
    )
    parse_config(minimal(format={"type": "parquet"}, aggregations=aggregations))


def test_value_schema_from_an_avro_schema_file(tmp_path: Path) -> None:
    avsc = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "order_id", "type": "string"},
            {"name": "quantity", "type": "int"},
            {"name": "price", "type": ["null", "float"]},
        ],
    }
    (tmp_path / "orders.avsc").write_text(json.dumps(avsc))
    data = minimal(format={"type": "avro", "value_schema": {"avro_schema": "orders.avsc"}})
    (tmp_path / "tidemark.yaml").write_text(yaml.safe_dump(data))
    fields = load_config(tmp_path / "tidemark.yaml").streams[0].format.value_schema.fields  # type: ignore[union-attr]
    assert [(f.name, f.type, f.nullable) for f in fields] == [
        ("order_id", "string", False),
        ("quantity", "long", False),
        ("price", "double", True),
    ]
    (tmp_path / "orders.avsc").write_text(json.dumps({**avsc, "fields": [{"name": "tags", "type": "array"}]}))
    with pytest.raises(ConfigError, match="field 'tags' has type 'array'"):
        load_config(tmp_path / "tidemark.yaml")
    (tmp_path / "orders.avsc").unlink()
    with pytest.raises(ConfigError, match=r"value_schema.avro_schema: cannot read"):
        load_config(tmp_path / "tidemark.yaml")


def test_partition_by_names_are_checked() -> None:
    stream = parse_config(minimal(partition_by={"fields": ["_value.Country", "_key"]})).streams[0]
    assert [f.name for f in stream.partition_by.fields] == ["country", "record_key"]
    assert "taken by an archive column" in config_error(minimal(partition_by={"fields": ["_value.offset"]}))
    assert "partition names must be unique" in config_error(
        minimal(partition_by={"fields": ["_value.a.id", "_value.b.id"]})
    )
    assert "String should match pattern" in config_error(minimal(partition_by={"fields": ["value.country"]}))
    named = minimal(partition_by={"fields": [{"field": "_value.a.id", "name": "a_id"}, "_value.b.id"]})
    assert [f.name for f in parse_config(named).streams[0].partition_by.fields] == ["a_id", "id"]


def test_partition_by_that_could_make_keys_longer_than_s3_allows_is_refused() -> None:
    fields = [{"field": f"_value.f{n}", "name": "n" * 60 + str(n)} for n in range(4)]
    message = config_error(minimal(partition_by={"fields": fields, "max_value_length": 256}))
    assert "streams[0].partition_by: object keys could be" in message and "over S3's 1024" in message
    parse_config(minimal(partition_by={"fields": fields, "max_value_length": 128}))


# -- Kinesis sources ------------------------------------------------------------------------------

STREAM_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
PARALLELIZATION_REASON = (
    "parallelization_factor must be 1: with more, the mapping processes one shard in several concurrent batches "
    "(by partition key), sequence numbers no longer arrive in order, and the ledger could not drop redeliveries "
    "by position"
)


def kinesis(**source: Any) -> dict[str, Any]:
    return {"kind": "kinesis", "stream_arn": STREAM_ARN, **source}


def kinesis_config(source: dict[str, Any] | None = None, **stream: Any) -> dict[str, Any]:
    return {"streams": [{"name": "orders", "source": source or kinesis(), **stream}]}


def test_a_kinesis_config_loads_back_from_what_the_lambdas_get() -> None:
    """The Lambdas get ``runtime_json()``: it carries the derived topic, which must load again."""
    config = parse_config(kinesis_config(kinesis(consumer="efo")))
    again = parse_config(json.loads(config.runtime_json()))
    assert again.streams[0].source == config.streams[0].source
    assert again.streams[0].source.topic == "orders"


def test_kinesis_source_takes_its_topic_from_the_stream_arn() -> None:
    arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/click_stream.v2"
    config = parse_config(kinesis_config(kinesis(stream_arn=arn)))
    (stream,) = config.streams
    assert stream.source.model_dump() == {
        "kind": "kinesis",
        "topic": "click_stream.v2",
        "cluster_arn": None,
        "bootstrap_servers": None,
        "consumer_group_id": None,
        "stream_arn": arn,
        "batch_size": 1000,
        "batching_window": "1000ms",
        "starting_position": "TRIM_HORIZON",
        "starting_position_timestamp": None,
        "consumer": "shared",
        "parallelization_factor": 1,
        "auth": None,
        "network": None,
        "schema_registry": None,
        "broker_arn": None,
        "virtual_host": None,
        "credentials_secret_arn": None,
        "allow_plaintext_public": False,
    }
    assert stream.source.shape is KINESIS_SHAPE
    assert stream.csv_columns == (
        "stream",
        "shard_id",
        "sequence_number",
        "approximate_arrival_timestamp",
        "event_time",
        "partition_key",
        "value",
    )
    assert stream.keeps_positions
    assert config.stream_for_topic("click_stream.v2", "kinesis") is stream
    assert config.stream_for_topic("click_stream.v2") is None  # not a Kafka topic
    assert config.stream_for_topic("orders", "kinesis") is None


def test_kinesis_source_options_are_accepted() -> None:
    source = kinesis(
        consumer="efo",
        starting_position="AT_TIMESTAMP",
        starting_position_timestamp="2026-11-21T07:00:00Z",
        batch_size=10_000,
        parallelization_factor=1,
    )
    parsed = parse_config(kinesis_config(source)).streams[0].source
    assert (parsed.consumer, parsed.starting_position, parsed.batch_size) == ("efo", "AT_TIMESTAMP", 10_000)
    assert parsed.starting_position_timestamp == datetime(2026, 11, 21, 7, tzinfo=UTC)
    assert parse_config(kinesis_config(kinesis(starting_position="LATEST"))).streams[0].source.starting_position == (
        "LATEST"
    )


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            kinesis(topic="payments"),
            "topic is for Kafka sources; a Kinesis stream's name comes from stream_arn",
        ),
        (
            {"kind": "kinesis"},
            "stream_arn is required when kind is 'kinesis' (arn:aws:kinesis:<region>:<account>:stream/<name>)",
        ),
        (
            kinesis(stream_arn="arn:aws:sqs:us-east-1:123456789012:orders"),
            "stream_arn is required when kind is 'kinesis' (arn:aws:kinesis:<region>:<account>:stream/<name>)",
        ),
        (kinesis(parallelization_factor=2), PARALLELIZATION_REASON),
        (kinesis(parallelization_factor=10), PARALLELIZATION_REASON),
        (
            kinesis(starting_position="AT_TIMESTAMP"),
            "starting_position_timestamp goes with starting_position AT_TIMESTAMP, and only with it",
        ),
        (
            kinesis(starting_position="LATEST", starting_position_timestamp="2026-11-21T07:00:00Z"),
            "starting_position_timestamp goes with starting_position AT_TIMESTAMP, and only with it",
        ),
        (kinesis(cluster_arn=CLUSTER_ARN), "cluster_arn is for Kafka sources, not kind 'kinesis'"),
        (kinesis(bootstrap_servers=["b-1:9092"]), "bootstrap_servers is for Kafka sources, not kind 'kinesis'"),
        (kinesis(consumer_group_id="tidemark"), "consumer_group_id is for Kafka sources, not kind 'kinesis'"),
    ],
    ids=[
        "topic-given",
        "no-stream-arn",
        "not-a-stream-arn",
        "parallelization-2",
        "parallelization-10",
        "at-timestamp-without-timestamp",
        "timestamp-without-at-timestamp",
        "cluster-arn",
        "bootstrap-servers",
        "consumer-group",
    ],
)
def test_kinesis_source_refusals(source: dict[str, Any], message: str) -> None:
    assert config_error(kinesis_config(source)) == f"<config>: streams[0].source: {message}"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"stream_arn": STREAM_ARN}, "stream_arn"),
        ({"consumer": "efo"}, "consumer"),
        ({"parallelization_factor": 2}, "parallelization_factor"),
        ({"starting_position": "AT_TIMESTAMP"}, "starting_position AT_TIMESTAMP"),
        ({"consumer": "efo", "stream_arn": STREAM_ARN}, "stream_arn, consumer"),
    ],
)
def test_kinesis_only_fields_are_refused_for_kafka(extra: dict[str, Any], named: str) -> None:
    for source in (
        {"cluster_arn": CLUSTER_ARN, "topic": "orders"},
        {"kind": "kafka", "bootstrap_servers": ["b-1:9092"], "topic": "orders"},
    ):
        message = config_error({"streams": [{"name": "orders", "source": {**source, **extra}}]})
        assert message == f"<config>: streams[0].source: {named}: only for kind 'kinesis'"


def test_kinesis_records_have_no_headers_to_read() -> None:
    assert config_error(kinesis_config(event_time={"source": "header", "header": "ts"})) == (
        "<config>: streams[0]: event_time.source 'header': kinesis records have no headers"
    )
    assert config_error(kinesis_config(partition_by={"fields": ["_header.country"]})) == (
        "<config>: streams[0]: partition_by on _header.<name>: kinesis records have no headers"
    )


def test_csv_columns_must_be_fields_of_the_sources_envelope() -> None:
    assert config_error(kinesis_config(format={"type": "csv", "columns": ["topic", "offset", "value.a"]})) == (
        "<config>: streams[0]: format.columns ['topic', 'offset'] are not fields of a kinesis envelope "
        "(stream, shard_id, sequence_number, approximate_arrival_timestamp, event_time, partition_key, value)"
    )
    assert config_error(minimal(format={"type": "csv", "columns": ["shard_id", "value.a"]})) == (
        "<config>: streams[0]: format.columns ['shard_id'] are not fields of a msk envelope "
        "(topic, partition, offset, timestamp, event_time, key, value, headers)"
    )
    columns = ["sequence_number", "shard_id", "partition_key", "value.order_id"]
    stream = parse_config(kinesis_config(format={"type": "csv", "columns": columns})).streams[0]
    assert stream.csv_columns == tuple(columns)
    assert stream.keeps_positions


def test_kinesis_positions_are_kept_only_with_both_columns() -> None:
    aggregation = [{"name": "by_product", "metrics": {"n": "count(*)"}}]
    without = kinesis_config(format={"type": "csv", "columns": ["shard_id", "value.a"]}, aggregations=aggregation)
    assert config_error(without) == (
        "<config>: streams[0]: aggregations need a format that keeps each record's partition and offset (the job"
        " dedupes on them): csv without those columns does not"
    )
    stream = parse_config(kinesis_config(format={"type": "csv", "columns": ["shard_id", "value.a"]})).streams[0]
    assert not stream.keeps_positions
    kept = kinesis_config(
        format={"type": "csv", "columns": ["shard_id", "sequence_number", "value.a"]}, aggregations=aggregation
    )
    assert parse_config(kept).streams[0].keeps_positions


@pytest.mark.parametrize("name", ["stream", "shard_id", "sequence_number", "partition_key"])
def test_partition_names_must_not_clash_with_kinesis_columns(name: str) -> None:
    message = config_error(kinesis_config(partition_by={"fields": [{"field": "_value.x", "name": name}]}))
    assert (
        message == f"<config>: streams[0]: partition names ['{name}'] are taken by kinesis archive columns; set name:"
    )
    # the same name is free for a Kafka stream, whose archive has no such column
    kafka = parse_config(minimal(partition_by={"fields": [{"field": "_value.x", "name": name}]})).streams[0]
    assert [f.name for f in kafka.partition_by.fields] == [name]


def test_key_fixed_part_grows_with_the_sources_widths() -> None:
    assert key_fixed_part(KAFKA_SHAPE) == KEY_FIXED_PART == 130
    assert key_fixed_part(KINESIS_SHAPE) == 130 + (128 - 10) + 2 * (129 - 20)
    fields = [{"field": f"_value.f{n}", "name": f"field_{n:04d}"} for n in range(4)]
    partition_by = {"fields": fields, "max_value_length": 150}
    parse_config(minimal(partition_by=partition_by))  # a Kafka key fits in 1024
    message = config_error(kinesis_config(partition_by=partition_by))
    longest = len("errors") + 2 * len("orders") + 4 * (10 + 2 + 150) + key_fixed_part(KINESIS_SHAPE)
    assert message == (
        f"<config>: streams[0].partition_by: object keys could be {longest} characters, over S3's 1024: "
        "use fewer fields, shorter names or a smaller max_value_length"
    )


def test_a_kinesis_key_of_the_widest_kind_fits_its_fixed_part() -> None:
    key = object_key(
        "errors",
        "orders",
        "2026-11-21T07",
        "s" * 128,
        10**129 - 1,
        10**129 - 1,
        "jsonl.zst",
        2**31 - 1,
        hive_hours=True,
        digits=129,
    )
    assert len(key) <= len("errors") + 2 * len("orders") + key_fixed_part(KINESIS_SHAPE)


def test_one_kinesis_stream_feeds_one_archive_stream() -> None:
    data = {"streams": [{"name": "orders", "source": kinesis()}, {"name": "orders_copy", "source": kinesis()}]}
    assert (
        config_error(data)
        == "<config>: each topic (or Kinesis stream) may feed one stream only, got ['orders', 'orders']"
    )


def test_a_kinesis_stream_and_a_kafka_topic_may_share_a_name() -> None:
    data = {
        "streams": [
            {"name": "orders", "source": {"cluster_arn": CLUSTER_ARN, "topic": "orders"}},
            {"name": "orders_kinesis", "source": kinesis()},
        ]
    }
    config = parse_config(data)
    assert config.stream_for_topic("orders") is config.streams[0]
    assert config.stream_for_topic("orders", "kafka") is config.streams[0]
    assert config.stream_for_topic("orders", "kinesis") is config.streams[1]


# -- RabbitMQ sources --------------------------------------------------------------------------------

MQ_SOURCE = {
    "kind": "rabbitmq",
    "broker_arn": "arn:aws:mq:us-east-1:123456789012:broker:orders:b-1234a5b6-78cd-901e-2fgh-3i45j6k178l9",
    "queue": "orders",
    "credentials_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:mq-orders-AbCdEf",
}


def test_a_rabbitmq_source_is_named_as_its_events_name_it() -> None:
    config = parse_config(minimal(source=MQ_SOURCE))
    stream = config.streams[0]
    assert (stream.source.topic, stream.source.match_name, stream.source.shape.kind) == (
        "orders",
        "orders::/",
        "rabbitmq",
    )
    assert stream.dedupe_settings.id == "message_id" and stream.dedupe_settings.window == timedelta(hours=24)
    assert config.stream_for_topic("orders::/", "rabbitmq") is stream
    assert config.stream_for_topic("orders::prod", "rabbitmq") is None  # another virtual host
    again = parse_config(config.model_dump(mode="json"))  # what the Lambdas get: topic, no queue
    assert again.streams[0].source.match_name == "orders::/"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"broker_arn": None}, "kind 'rabbitmq' needs broker_arn"),
        ({"credentials_secret_arn": None}, "needs broker_arn (the Amazon MQ broker) and credentials_secret_arn"),
        ({"queue": None}, "queue is required when kind is 'rabbitmq'"),
        ({"topic": "other"}, "a RabbitMQ source names its queue"),
        ({"bootstrap_servers": ["b:9092"]}, "bootstrap_servers: not for kind 'rabbitmq'"),
        ({"consumer": "efo"}, "consumer: not for kind 'rabbitmq'"),
        ({"broker_arn": "arn:aws:kafka:us-east-1:123456789012:cluster/x/y"}, "broker_arn"),
    ],
)
def test_rabbitmq_source_errors(change: dict[str, Any], message: str) -> None:
    source = {key: value for key, value in {**MQ_SOURCE, **change}.items() if value is not None}
    assert message in config_error(minimal(source=source))


def test_rabbitmq_fields_are_refused_on_other_kinds_and_dedupe_with_them() -> None:
    assert "virtual_host: only for kind 'rabbitmq'" in config_error(
        minimal(source={"cluster_arn": CLUSTER_ARN, "topic": "orders", "virtual_host": "/"})
    )
    assert "dedupe is for RabbitMQ sources" in config_error(minimal(dedupe={"id": "message_id"}))
    aggregation = {"name": "n", "metrics": {"n": "count(*)"}}
    assert "not yet a RabbitMQ queue's" in config_error(minimal(source=MQ_SOURCE, aggregations=[aggregation]))
    assert "must be between 1m and 14d" in config_error(minimal(source=MQ_SOURCE, dedupe={"window": "30s"}))
    assert "String should match pattern" in config_error(minimal(source=MQ_SOURCE, dedupe={"id": "key"}))
    header = parse_config(minimal(source=MQ_SOURCE, dedupe={"id": "header:x-id", "window": "1h"}))
    assert header.streams[0].dedupe_settings.id == "header:x-id"


@pytest.mark.parametrize(
    "servers",
    [["pkc-1.confluent.cloud:9092"], ["10.0.0.5:9092", "broker.example.com:9092"], ["52.94.76.10:9092"]],
)
def test_plaintext_self_managed_kafka_at_a_public_endpoint_is_refused_unless_allowed(servers) -> None:
    """Issue 31: no authentication, no VPC and a broker the internet reaches: anyone can read the
    topic and records may cross the internet unencrypted. Refused, naming the public brokers and
    the ways out; allowed when said so."""
    source = {"kind": "kafka", "topic": "orders", "bootstrap_servers": servers}
    message = config_error(minimal(source=source))
    public = ", ".join(server for server in servers if not server.startswith("10."))
    assert f"self-managed Kafka at a public endpoint ({public}) with auth.mechanism none" in message
    assert "source.allow_plaintext_public: true" in message
    assert (
        parse_config(minimal(source={**source, "allow_plaintext_public": True}))
        .streams[0]
        .source.allow_plaintext_public
    )


@pytest.mark.parametrize(
    "source",
    [
        {"kind": "kafka", "topic": "orders", "bootstrap_servers": ["127.0.0.1:9092", "localhost:9093"]},
        {"kind": "kafka", "topic": "orders", "bootstrap_servers": ["10.1.2.3:9092", "192.168.1.2:9092"]},
        {"kind": "kafka", "topic": "orders", "bootstrap_servers": ["b-1:9092", "kafka-1.internal:9092"]},
        {**SELF_MANAGED, "auth": {"mechanism": "sasl_scram_512", "secret_arn": SECRET}},
        {
            **SELF_MANAGED,
            "network": {"subnet_ids": ["subnet-0123456789abcdef0"], "security_group_ids": ["sg-0123456789abcdef0"]},
        },
    ],
)
def test_kafka_on_private_addresses_in_a_vpc_or_with_tls_auth_is_accepted(source) -> None:
    assert parse_config(minimal(source=source)).streams[0].source.kind == "kafka"


def test_allow_plaintext_public_is_for_self_managed_kafka_only() -> None:
    message = config_error(
        minimal(source={"cluster_arn": CLUSTER_ARN, "topic": "orders", "allow_plaintext_public": True})
    )
    assert "allow_plaintext_public is for self-managed Kafka" in message


REGISTRY = {"kind": "confluent", "auth": "basic", "secret_arn": SECRET}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://registry.example.com", "a registry at a public address needs https"),
        ("https://registry.example.com/?api_key=abc", "no query string or fragment"),
        ("https://registry.example.com/#x", "no query string or fragment"),
    ],
)
def test_a_public_schema_registry_needs_https_and_no_query_string(url, message) -> None:
    source = {
        **SELF_MANAGED,
        "auth": {"mechanism": "plain", "secret_arn": SECRET},
        "schema_registry": {**REGISTRY, "url": url},
    }
    assert message in config_error(
        minimal(source=source, archiver={"provisioned_pollers": {"minimum": 1, "maximum": 2}})
    )


@pytest.mark.parametrize(
    "url", ["https://registry.example.com:8081/v1", "http://127.0.0.1:8081", "http://10.0.0.9:8081/?x=1"]
)
def test_a_registry_over_https_or_on_a_private_address_is_accepted(url) -> None:
    from tidemark.config.model import SchemaRegistryConfig

    assert SchemaRegistryConfig.model_validate({**REGISTRY, "url": url}).url == url
