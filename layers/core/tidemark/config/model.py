"""Pydantic model of the stream configuration (``config/tidemark.yaml``).

Every model forbids unknown fields, so a typo fails loudly with the field's path instead of
being silently ignored.
"""

from __future__ import annotations

import itertools
import re
from datetime import timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ByteSize, ConfigDict, Field, field_validator, model_validator

from tidemark.config.deployment import (
    IA_MIN_STAY_DAYS,
    STORAGE_CLASS_ORDER,
    AlarmSettings,
    ArchiverFunctionSettings,
    DevClusterSettings,
    NetworkSettings,
    PipelineSettings,
    StorageTransition,
)
from tidemark.config.units import Bytes, Duration, to_ms
from tidemark.names import S3_PREFIX, STREAM_NAME, TOPIC_NAME

MSK_CLUSTER_ARN = r"^arn:aws[a-z-]*:kafka:[a-z0-9-]+:\d{12}:cluster/[A-Za-z0-9-]{1,64}/[A-Za-z0-9-]+$"
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"

MiB = 1024 * 1024
GiB = 1024 * MiB


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceConfig(_Model):
    """Where the stream's records come from: an MSK cluster or a self-managed Kafka."""

    kind: Literal["msk", "kafka"] = "msk"
    topic: str = Field(pattern=TOPIC_NAME)
    cluster_arn: str | None = Field(default=None, pattern=MSK_CLUSTER_ARN)
    bootstrap_servers: list[str] | None = None
    consumer_group_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,200}$")
    batch_size: int = Field(default=1000, ge=1, le=10_000)
    batching_window: Duration = timedelta(seconds=1)
    starting_position: Literal["TRIM_HORIZON", "LATEST"] = "TRIM_HORIZON"

    @field_validator("batching_window")
    @classmethod
    def _window_limit(cls, value: timedelta) -> timedelta:
        if not timedelta(0) <= value <= timedelta(seconds=300):
            raise ValueError("must be between 0s and 300s (the ESM's limit)")
        return value

    @model_validator(mode="after")
    def _source_kind(self) -> SourceConfig:
        # An msk source without cluster_arn reads from the dev cluster; TidemarkConfig checks that.
        if self.kind == "kafka" and not self.bootstrap_servers:
            raise ValueError("bootstrap_servers is required when kind is 'kafka'")
        return self


class EventTimeConfig(_Model):
    """How a record's event time is found; the record is filed under that time's hour."""

    source: Literal["record_timestamp", "json_field", "header", "processing_time"] = "record_timestamp"
    field: str | None = Field(default=None, description="dotted path into a JSON value (source=json_field)")
    header: str | None = Field(default=None, min_length=1, description="header name (source=header)")
    format: Literal["auto", "epoch_s", "epoch_ms", "iso8601"] = Field(
        default="auto",
        description=(
            "how a field or header value is read. auto: JSON numbers are epoch seconds below 1e11, else"
            " milliseconds; a string of exactly 8 digits is a basic ISO-8601 date YYYYMMDD (midnight in"
            " `timezone`; an impossible date is invalid_event_time); any other numeric string is an epoch"
            " number like a JSON number; any other string is ISO-8601. epoch_s / epoch_ms: numbers and"
            " numeric strings in that unit. iso8601: strings only ('20240101' is a date). Fractions are"
            " floored to the millisecond."
        ),
    )
    timezone: str = "UTC"

    @field_validator("field")
    @classmethod
    def _dotted_path(cls, value: str | None) -> str | None:
        if value is not None and (not value or any(not part for part in value.split("."))):
            raise ValueError("must be a dotted path such as 'created_at' or 'meta.ts'")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown IANA time zone {value!r}") from exc
        return value

    @model_validator(mode="after")
    def _source_needs(self) -> EventTimeConfig:
        if self.source == "json_field" and not self.field:
            raise ValueError("field is required when source is 'json_field'")
        if self.source == "header" and not self.header:
            raise ValueError("header is required when source is 'header'")
        return self


class EncodingConfig(_Model):
    """How key, value and header bytes are validated and rendered in the archive envelope."""

    value: Literal["json", "text", "bytes"] = "json"
    key: Literal["text", "bytes"] = "text"
    headers: Literal["text", "bytes"] = "text"


class FlushPolicyConfig(_Model):
    """A buffer is sealed and flushed when any one limit is reached."""

    max_records: int = Field(default=100_000, ge=1, le=50_000_000)
    max_bytes: Bytes = Field(default=ByteSize(64 * MiB), ge=1024, le=5 * GiB)
    max_age: Duration = timedelta(minutes=15)
    # Guards that keep the ledger item small (DynamoDB items are limited to 400 KB).
    max_segments: int = Field(default=200, ge=1, le=1000)
    max_open_buffers: int = Field(default=24, ge=1, le=200)

    @field_validator("max_age")
    @classmethod
    def _age_range(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(days=7):
            raise ValueError("must be between 1s and 7d")
        return value

    @model_validator(mode="after")
    def _ledger_item_bound(self) -> FlushPolicyConfig:
        # ~60 bytes per segment reference in the ledger item; stay well under 400 KB.
        if self.max_segments * self.max_open_buffers > 4800:
            raise ValueError("max_segments * max_open_buffers must be at most 4800 (ledger item size)")
        return self

    @property
    def max_age_ms(self) -> int:
        return to_ms(self.max_age)


class FormatConfig(_Model):
    type: Literal["jsonl"] = "jsonl"
    compression: Literal["gzip", "none"] = "gzip"
    gzip_level: int = Field(default=6, ge=1, le=9)


class DeadLetterConfig(_Model):
    """Bad records go to ``<errors_prefix>/<stream>/...`` with their original bytes and a reason."""

    max_record_bytes: Bytes = Field(default=ByteSize(1 * MiB), ge=1, le=64 * MiB)


class AggregationConfig(_Model):
    """One aggregate table the Spark job computes per event hour."""

    name: str = Field(pattern=IDENTIFIER)
    group_by: list[str] = Field(default_factory=list)
    metrics: dict[str, str] = Field(min_length=1, description="metric name -> Spark SQL aggregate expression")

    @field_validator("group_by")
    @classmethod
    def _columns(cls, value: list[str]) -> list[str]:
        for column in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_.]*$", column):
                raise ValueError(f"{column!r} is not a column name")
        return value

    @field_validator("metrics")
    @classmethod
    def _metric_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, expression in value.items():
            if not re.match(IDENTIFIER, name):
                raise ValueError(f"metric name {name!r} is not an identifier")
            if not expression.strip():
                raise ValueError(f"metric {name!r} has an empty expression")
        return value


class CompletenessConfig(_Model):
    """When the sweeper may call an event hour complete: every partition's event time is past the
    hour's end by ``allowed_lateness`` (or the partition is idle that long), and nothing of the
    hour is still staged. Records arriving later still land in the hour and mark it dirty."""

    allowed_lateness: Duration = timedelta(hours=1)

    @field_validator("allowed_lateness")
    @classmethod
    def _lateness(cls, value: timedelta) -> timedelta:
        if not timedelta(0) <= value <= timedelta(days=7):
            raise ValueError("must be between 0s and 7d")
        return value

    @property
    def allowed_lateness_ms(self) -> int:
        return to_ms(self.allowed_lateness)


class StreamConfig(_Model):
    name: str = Field(pattern=STREAM_NAME)
    source: SourceConfig
    event_time: EventTimeConfig = EventTimeConfig()
    encoding: EncodingConfig = EncodingConfig()
    flush: FlushPolicyConfig = FlushPolicyConfig()
    format: FormatConfig = FormatConfig()
    dead_letter: DeadLetterConfig = DeadLetterConfig()
    aggregations: list[AggregationConfig] = Field(default_factory=list)
    completeness: CompletenessConfig = CompletenessConfig()
    archiver: ArchiverFunctionSettings = ArchiverFunctionSettings()

    @model_validator(mode="after")
    def _json_needs_json(self) -> StreamConfig:
        if self.event_time.source == "json_field" and self.encoding.value != "json":
            raise ValueError("event_time.source 'json_field' needs encoding.value 'json'")
        if self.aggregations and self.encoding.value != "json":
            raise ValueError("aggregations need encoding.value 'json' (they read the value's fields)")
        return self


class ArchiveSettings(_Model):
    """Settings shared by every stream."""

    raw_prefix: str = Field(default="raw", pattern=S3_PREFIX)
    errors_prefix: str = Field(default="errors", pattern=S3_PREFIX)
    # Unaccepted segments younger than this are left alone: they may belong to an invocation
    # that is still running. Must exceed the Lambda timeout (at most 15 minutes).
    segment_grace: Duration = timedelta(minutes=30)
    multipart_threshold: Bytes = Field(default=ByteSize(16 * MiB), ge=5 * MiB)
    multipart_chunksize: Bytes = Field(default=ByteSize(8 * MiB), ge=5 * MiB)
    max_accept_attempts: int = Field(default=5, ge=1, le=50)
    #: the largest ledger item a writer may write (DynamoDB's limit is 400 KB). A batch whose
    #: records would grow the partition's item past it is accepted in chunks, with flushes between.
    ledger_item_budget: Bytes = Field(default=ByteSize(300 * 1024), ge=4 * 1024, le=380 * 1024)
    #: storage-class transitions of archived objects (raw/ and errors/), in ascending order
    transitions: list[StorageTransition] = Field(default_factory=list)

    @field_validator("transitions")
    @classmethod
    def _ascending(cls, value: list[StorageTransition]) -> list[StorageTransition]:
        days = [transition.days for transition in value]
        if days != sorted(set(days)):
            raise ValueError(f"transitions must be in ascending order of 'after', without repeats, got days {days}")
        for before, after in itertools.pairwise(value):
            if STORAGE_CLASS_ORDER.index(after.storage_class) <= STORAGE_CLASS_ORDER.index(before.storage_class):
                raise ValueError(
                    f"S3 cannot move objects from {before.storage_class} to {after.storage_class} "
                    f"(the order is {', '.join(STORAGE_CLASS_ORDER)})"
                )
            if before.storage_class in ("STANDARD_IA", "ONEZONE_IA") and after.days - before.days < IA_MIN_STAY_DAYS:
                raise ValueError(
                    f"objects must stay {IA_MIN_STAY_DAYS}d in {before.storage_class} before moving on "
                    f"({before.days}d -> {after.days}d)"
                )
        return value

    @field_validator("segment_grace")
    @classmethod
    def _grace(cls, value: timedelta) -> timedelta:
        if value <= timedelta(minutes=15):
            raise ValueError("must exceed 15m, the longest a Lambda invocation can run")
        return value

    @property
    def segment_grace_ms(self) -> int:
        return to_ms(self.segment_grace)


class SweeperSettings(_Model):
    """The scheduled sweeper (Step Functions): idle flushes, orphan cleanup, reconciliation,
    hour completeness."""

    interval: Duration = timedelta(minutes=5)
    reconcile_lookback: Duration = timedelta(hours=48)  # hours re-listed against S3 on every sweep
    max_concurrency: int = Field(default=8, ge=1, le=40)  # partitions swept at once
    manifests_prefix: str = Field(default="manifests", pattern=S3_PREFIX)

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: timedelta) -> timedelta:
        if not timedelta(minutes=1) <= value <= timedelta(hours=24) or value.total_seconds() % 60:
            raise ValueError("must be whole minutes between 1m and 24h (an EventBridge rate)")
        return value

    @field_validator("reconcile_lookback")
    @classmethod
    def _lookback(cls, value: timedelta) -> timedelta:
        if not timedelta(hours=1) <= value <= timedelta(days=31):
            raise ValueError("must be between 1h and 31d")
        return value

    @property
    def interval_ms(self) -> int:
        return to_ms(self.interval)

    @property
    def reconcile_lookback_ms(self) -> int:
        return to_ms(self.reconcile_lookback)


class TidemarkConfig(_Model):
    version: Literal[1] = 1
    archive: ArchiveSettings = ArchiveSettings()
    sweeper: SweeperSettings = SweeperSettings()
    streams: list[StreamConfig] = Field(min_length=1)
    # Deployment-only sections (tidemark.config.deployment): the CDK app reads them, nothing else.
    network: NetworkSettings = NetworkSettings()
    dev_cluster: DevClusterSettings = DevClusterSettings()
    pipeline: PipelineSettings = PipelineSettings()
    alarms: AlarmSettings = AlarmSettings()

    @model_validator(mode="after")
    def _unique(self) -> TidemarkConfig:
        names = [stream.name for stream in self.streams]
        topics = [stream.source.topic for stream in self.streams]
        if len(set(names)) != len(names):
            raise ValueError(f"stream names must be unique, got {names}")
        if len(set(topics)) != len(topics):
            raise ValueError(f"each topic may feed one stream only, got {topics}")
        prefixes = [self.archive.raw_prefix, self.archive.errors_prefix, self.sweeper.manifests_prefix]
        if len(set(prefixes)) != len(prefixes):
            raise ValueError("archive.raw_prefix, archive.errors_prefix and sweeper.manifests_prefix must differ")
        for index, stream in enumerate(self.streams):
            source = stream.source
            if source.kind == "msk" and source.cluster_arn is None and not self.dev_cluster.enabled:
                raise ValueError(
                    f"streams[{index}].source.cluster_arn is required when kind is 'msk' "
                    "(or set dev_cluster.enabled to read from a dev MSK Serverless cluster)"
                )
            if stream.flush.max_age < self.sweeper.interval:
                raise ValueError(
                    f"streams[{index}].flush.max_age ({stream.flush.max_age}) is shorter than sweeper.interval "
                    f"({self.sweeper.interval}): a quiet partition's buffer would wait up to the interval anyway"
                )
        return self

    def runtime_json(self) -> str:
        """The configuration as the Lambdas and the Spark job get it: without the deployment-only
        sections, which keeps it small (Lambda allows 4 KB of environment in all)."""
        return self.model_dump_json(
            exclude={
                "network": True,
                "pipeline": True,
                "alarms": True,
                "streams": {"__all__": {"archiver"}},
            }
        )

    def stream(self, name: str) -> StreamConfig:
        for stream in self.streams:
            if stream.name == name:
                return stream
        raise KeyError(name)

    def stream_for_topic(self, topic: str) -> StreamConfig | None:
        for stream in self.streams:
            if stream.source.topic == topic:
                return stream
        return None
