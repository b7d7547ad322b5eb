"""Pydantic model of the stream configuration (``config/tidemark.yaml``).

Every model forbids unknown fields, so a typo fails loudly with the field's path instead of
being silently ignored.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from datetime import datetime, timedelta
from typing import Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ByteSize, ConfigDict, Field, field_validator, model_validator

from tidemark.config.deployment import (
    IA_MIN_STAY_DAYS,
    STORAGE_CLASS_ORDER,
    AlarmSettings,
    ArchiverFunctionSettings,
    CatalogSettings,
    DevClusterSettings,
    NetworkSettings,
    PipelineSettings,
    StagingSettings,
    StorageTransition,
)
from tidemark.config.units import Bytes, Duration, to_ms
from tidemark.names import S3_PREFIX, STREAM_NAME, TOPIC_NAME
from tidemark.sources import ALL_ENVELOPE_COLUMNS, KAFKA_SHAPE, KINESIS_STREAM_ARN, SourceShape, shape_of

MSK_CLUSTER_ARN = r"^arn:aws[a-z-]*:kafka:[a-z0-9-]+:\d{12}:cluster/[A-Za-z0-9-]{1,64}/[A-Za-z0-9-]+$"
#: an Amazon MQ broker's ARN (arn:aws:mq:<region>:<account>:broker:<name>:<id>)
MQ_BROKER_ARN = r"^arn:aws[a-z-]*:mq:[a-z0-9-]+:\d{12}:broker:[A-Za-z0-9_-]{1,50}:b-[0-9a-z-]{1,64}$"
#: a RabbitMQ virtual host: the broker's rule is any string; these are the ones an ESM names safely
VIRTUAL_HOST = r"^(/|[A-Za-z0-9._-][A-Za-z0-9._/-]{0,254})$"
GLUE_REGISTRY_ARN = r"^arn:aws[a-z-]*:glue:[a-z0-9-]+:\d{12}:registry/[A-Za-z0-9_$#-]{1,255}$"
SECRET_ARN = r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]{1,512}$"
KMS_KEY_ARN = r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]{1,64}$"
BOOTSTRAP_SERVER = r"^[A-Za-z0-9.-]{1,253}:\d{1,5}$"
#: how an event source mapping authenticates to each Kafka kind (the first is the default)
KAFKA_AUTH_MECHANISMS = {
    "msk": ("iam", "sasl_scram_512", "mtls"),
    "kafka": ("none", "sasl_scram_256", "sasl_scram_512", "plain", "mtls"),
}
#: MSK only reads SASL/SCRAM credentials from secrets whose names start with this
MSK_SCRAM_SECRET_PREFIX = "AmazonMSK_"
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"

MiB = 1024 * 1024
GiB = 1024 * MiB


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaAuthConfig(_Model):
    """How the event source mapping authenticates to the brokers (the stack's setting: the
    embedded runner reads a local broker without authentication).

    ``mechanism``: MSK ``iam`` (the default), ``sasl_scram_512`` or ``mtls``; self-managed Kafka
    ``none`` (the default), ``sasl_scram_256``, ``sasl_scram_512``, ``plain`` (SASL/PLAIN, e.g.
    Confluent Cloud's API keys) or ``mtls``. ``secret_arn``: the Secrets Manager secret with the
    credentials (``username``/``password``) or the client certificate (``certificate``,
    ``privateKey``) -- required for every mechanism but ``iam`` and ``none``. ``root_ca_secret_arn``
    (self-managed only): the brokers' certificate authority, when a private CA signed their
    certificates. ``kms_key_arn``: the customer-managed key the secrets are encrypted with (MSK
    requires one for SASL/SCRAM secrets)."""

    mechanism: Literal["iam", "sasl_scram_256", "sasl_scram_512", "plain", "mtls", "none"]
    secret_arn: str | None = Field(default=None, pattern=SECRET_ARN)
    root_ca_secret_arn: str | None = Field(default=None, pattern=SECRET_ARN)
    kms_key_arn: str | None = Field(default=None, pattern=KMS_KEY_ARN)

    @model_validator(mode="after")
    def _secret(self) -> KafkaAuthConfig:
        keyless = self.mechanism in ("iam", "none")
        if keyless and self.secret_arn is not None:
            raise ValueError(f"secret_arn: mechanism {self.mechanism!r} uses no secret")
        if not keyless and self.secret_arn is None:
            raise ValueError(f"secret_arn is required with mechanism {self.mechanism!r}")
        if self.kms_key_arn is not None and self.secret_arn is None and self.root_ca_secret_arn is None:
            raise ValueError("kms_key_arn: there is no secret it would decrypt")
        return self


class KafkaNetworkConfig(_Model):
    """Self-managed brokers in a VPC: the subnets and security groups the event source mapping's
    pollers join to reach them (they also need Lambda, STS and, with a secret, Secrets Manager:
    a NAT gateway or interface endpoints in that VPC). Omitted: the brokers' public endpoint."""

    subnet_ids: list[str] = Field(min_length=1, max_length=16)
    security_group_ids: list[str] = Field(min_length=1, max_length=5)

    @field_validator("subnet_ids")
    @classmethod
    def _subnets(cls, value: list[str]) -> list[str]:
        for item in value:
            if not re.match(r"^subnet-[0-9a-f]{8,17}$", item):
                raise ValueError(f"{item!r} is not a subnet id (subnet-...)")
        return value

    @field_validator("security_group_ids")
    @classmethod
    def _groups(cls, value: list[str]) -> list[str]:
        for item in value:
            if not re.match(r"^sg-[0-9a-f]{8,17}$", item):
                raise ValueError(f"{item!r} is not a security group id (sg-...)")
        return value


def is_private_host(host: str) -> bool:
    """A host the public internet does not reach: a loopback, private or link-local address, or
    a name no public DNS resolves (``localhost``, one label, ``.internal``, ``.local``,
    ``.localhost``, ``.home.arpa``). Anything else is taken as public."""
    name = host.strip("[]").lower().rstrip(".")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return name == "localhost" or "." not in name or name.endswith(PRIVATE_SUFFIXES)
    return address.is_loopback or address.is_private or address.is_link_local


#: name suffixes no public DNS resolves (RFC 6761, RFC 6762, RFC 8375; ``.internal``: ICANN's
#: private-use TLD, and AWS's ``compute.internal``)
PRIVATE_SUFFIXES = (".internal", ".local", ".localhost", ".home.arpa")


class SchemaRegistryConfig(_Model):
    """The event source mapping's schema registry integration (AWS runs it; provisioned mode only).

    The mapping validates each record's ``validate`` parts (``value``, ``key``) against the
    registry -- an AWS Glue Schema Registry (``registry_arn``) or a Confluent Schema Registry
    (``url``, signed in with ``auth`` and its ``secret_arn``: basic credentials or a client
    certificate) -- for Avro, Protobuf and JSON Schema
    values, and delivers them as ``record_format``: ``json`` (the registry-decoded value as
    JSON text) or ``source`` (the bytes as produced, schema metadata removed)."""

    kind: Literal["glue", "confluent"]
    registry_arn: str | None = Field(default=None, pattern=GLUE_REGISTRY_ARN)
    url: str | None = Field(default=None, pattern=r"^https?://[A-Za-z0-9.-]+(:\d{1,5})?(/[^\s]*)?$")
    auth: Literal["basic", "client_certificate"] | None = None
    secret_arn: str | None = Field(default=None, pattern=SECRET_ARN)
    record_format: Literal["json", "source"] = "json"
    validate_parts: list[Literal["value", "key"]] = Field(default=["value"], alias="validate", min_length=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _registry(self) -> SchemaRegistryConfig:
        if self.kind == "glue":
            given = [name for name in ("url", "auth", "secret_arn") if getattr(self, name)]
            if self.registry_arn is None or given:
                raise ValueError(
                    "a glue registry takes registry_arn only (IAM signs it in)"
                    + (f"; not {', '.join(given)}" if given else "")
                )
        else:
            if self.url is None or self.registry_arn is not None:
                raise ValueError("a confluent registry takes url, not registry_arn")
            if self.auth is None or self.secret_arn is None:
                raise ValueError("a confluent registry needs auth (basic | client_certificate) and its secret_arn")
            self._check_url(self.url)
        if len(set(self.validate_parts)) != len(self.validate_parts):
            raise ValueError("validate: each part once")
        return self

    @staticmethod
    def _check_url(url: str) -> None:
        """https, without a query string (it would carry a credential into every log of the
        URL), unless the registry is on a loopback or private address (the Avro demo's)."""
        parsed = urlsplit(url)
        if is_private_host(parsed.hostname or ""):
            return
        if parsed.scheme != "https":
            raise ValueError(
                "url: a registry at a public address needs https (the mapping sends its credentials there)"
            )
        if parsed.query or parsed.fragment:
            raise ValueError("url: no query string or fragment (credentials go in secret_arn, not the URL)")


class SourceConfig(_Model):
    """Where the stream's records come from: an MSK cluster, a self-managed Kafka, a Kinesis
    data stream (whose name, taken from ``stream_arn``, stands in ``topic``), or a RabbitMQ queue
    on an Amazon MQ broker (``queue`` stands in ``topic``; the mapping names it
    ``<queue>::<virtual_host>``: ``match_name``)."""

    kind: Literal["msk", "kafka", "kinesis", "rabbitmq"] = "msk"
    topic: str = Field(pattern=TOPIC_NAME)
    cluster_arn: str | None = Field(default=None, pattern=MSK_CLUSTER_ARN)
    bootstrap_servers: list[str] | None = None
    consumer_group_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,200}$")
    stream_arn: str | None = Field(default=None, pattern=KINESIS_STREAM_ARN)
    batch_size: int = Field(default=1000, ge=1, le=10_000)
    batching_window: Duration = timedelta(seconds=1)
    starting_position: Literal["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"] = "TRIM_HORIZON"
    starting_position_timestamp: datetime | None = None
    consumer: Literal["shared", "efo"] = "shared"
    parallelization_factor: int = 1
    auth: KafkaAuthConfig | None = None  # Kafka kinds: how the mapping authenticates (default per kind)
    network: KafkaNetworkConfig | None = None  # self-managed Kafka in a VPC (default: a public endpoint)
    schema_registry: SchemaRegistryConfig | None = None  # Kafka kinds: the mapping validates and decodes values
    broker_arn: str | None = Field(default=None, pattern=MQ_BROKER_ARN)  # rabbitmq: the Amazon MQ broker
    virtual_host: str | None = Field(default=None, pattern=VIRTUAL_HOST)  # rabbitmq: default "/"
    credentials_secret_arn: str | None = Field(default=None, pattern=SECRET_ARN)  # rabbitmq: username, password
    # kafka: a public endpoint with auth.mechanism none, knowingly (refused otherwise)
    allow_plaintext_public: bool = False

    @model_validator(mode="before")
    @classmethod
    def _kinesis_topic(cls, data: object) -> object:
        # A RabbitMQ queue is its "topic" (a dumped config carries it back as topic: only that
        # same name is fine); a Kinesis stream's name is its "topic": the name events and object
        # keys carry.
        if isinstance(data, dict) and data.get("kind") == "rabbitmq":
            queue, topic = data.get("queue"), data.get("topic")
            if queue is None and topic is None:
                raise ValueError("queue is required when kind is 'rabbitmq'")
            if queue is not None and topic not in (None, queue):
                raise ValueError("topic is for Kafka sources; a RabbitMQ source names its queue")
            return {**{key: value for key, value in data.items() if key != "queue"}, "topic": queue or topic}
        if isinstance(data, dict) and data.get("kind") == "kinesis":
            arn = data.get("stream_arn")
            if not isinstance(arn, str) or not re.match(KINESIS_STREAM_ARN, arn):
                raise ValueError(
                    "stream_arn is required when kind is 'kinesis' (arn:aws:kinesis:<region>:<account>:stream/<name>)"
                )
            name = arn.rsplit("/", 1)[1]
            # A dumped config (what the Lambdas get) carries the derived name back: only that is fine.
            if data.get("topic") not in (None, name):
                raise ValueError("topic is for Kafka sources; a Kinesis stream's name comes from stream_arn")
            return {**data, "topic": name}
        return data

    @field_validator("batching_window")
    @classmethod
    def _window_limit(cls, value: timedelta) -> timedelta:
        if not timedelta(0) <= value <= timedelta(seconds=300):
            raise ValueError("must be between 0s and 300s (the ESM's limit)")
        return value

    @model_validator(mode="after")
    def _source_kind(self) -> SourceConfig:
        # An msk source without cluster_arn reads from the dev cluster; TidemarkConfig checks that.
        rabbitmq_only = {
            "broker_arn": self.broker_arn is not None,
            "virtual_host": self.virtual_host is not None,
            "credentials_secret_arn": self.credentials_secret_arn is not None,
        }
        if self.kind == "rabbitmq":
            return self._check_rabbitmq()
        wrong = [name for name, given in rabbitmq_only.items() if given]
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: only for kind 'rabbitmq'")
        if self.kind == "kafka" and not self.bootstrap_servers:
            raise ValueError("bootstrap_servers is required when kind is 'kafka'")
        kinesis_only = {
            "stream_arn": self.stream_arn is not None,
            "consumer": self.consumer != "shared",
            "parallelization_factor": self.parallelization_factor != 1,
            "starting_position AT_TIMESTAMP": self.starting_position == "AT_TIMESTAMP",
            "starting_position_timestamp": self.starting_position_timestamp is not None,
        }
        if self.kind != "kinesis":
            wrong = [name for name, given in kinesis_only.items() if given]
            if wrong:
                raise ValueError(f"{', '.join(wrong)}: only for kind 'kinesis'")
            self._check_kafka_access()
            return self
        kafka_only = {
            "schema_registry": self.schema_registry is not None,
            "cluster_arn": self.cluster_arn is not None,
            "bootstrap_servers": self.bootstrap_servers is not None,
            "auth": self.auth is not None,
            "network": self.network is not None,
            "allow_plaintext_public": self.allow_plaintext_public,
        }
        for name, given in kafka_only.items():
            if given:
                raise ValueError(f"{name} is for Kafka sources, not kind 'kinesis'")
        if self.consumer_group_id is not None:
            raise ValueError("consumer_group_id is for Kafka sources, not kind 'kinesis'")
        if self.parallelization_factor != 1:
            raise ValueError(
                "parallelization_factor must be 1: with more, the mapping processes one shard in several "
                "concurrent batches (by partition key), sequence numbers no longer arrive in order, and "
                "the ledger could not drop redeliveries by position"
            )
        if (self.starting_position == "AT_TIMESTAMP") != (self.starting_position_timestamp is not None):
            raise ValueError("starting_position_timestamp goes with starting_position AT_TIMESTAMP, and only with it")
        return self

    def _check_rabbitmq(self) -> SourceConfig:
        if self.broker_arn is None or self.credentials_secret_arn is None:
            raise ValueError(
                "kind 'rabbitmq' needs broker_arn (the Amazon MQ broker) and credentials_secret_arn "
                "(a secret holding the broker user's username and password)"
            )
        others = {
            "cluster_arn": self.cluster_arn,
            "bootstrap_servers": self.bootstrap_servers,
            "consumer_group_id": self.consumer_group_id,
            "stream_arn": self.stream_arn,
            "auth": self.auth,
            "network": self.network,
            "schema_registry": self.schema_registry,
            "starting_position_timestamp": self.starting_position_timestamp,
        }
        wrong = [name for name, given in others.items() if given is not None]
        wrong += ["allow_plaintext_public"] if self.allow_plaintext_public else []
        wrong += ["consumer"] if self.consumer != "shared" else []
        wrong += ["parallelization_factor"] if self.parallelization_factor != 1 else []
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: not for kind 'rabbitmq'")
        return self

    @property
    def match_name(self) -> str:
        """How events name this source: a Kafka topic, a Kinesis stream's name, or a RabbitMQ
        queue as ``<queue>::<virtual host>`` (the key of the mapping's ``rmqMessagesByQueue``)."""
        if self.kind == "rabbitmq":
            return f"{self.topic}::{self.virtual_host or '/'}"
        return self.topic

    def _check_kafka_access(self) -> None:
        allowed = KAFKA_AUTH_MECHANISMS[self.kind]
        auth = self.auth
        if auth is not None and auth.mechanism not in allowed:
            raise ValueError(f"auth.mechanism {auth.mechanism!r}: kind {self.kind!r} takes one of {', '.join(allowed)}")
        if self.kind == "msk":
            if self.network is not None:
                raise ValueError("network is for self-managed Kafka: an MSK mapping reaches the cluster in its own VPC")
            if auth is not None and auth.root_ca_secret_arn is not None:
                raise ValueError("auth.root_ca_secret_arn is for self-managed Kafka: MSK's certificates are public")
            if auth is not None and auth.mechanism == "sasl_scram_512":
                name = (auth.secret_arn or "").split(":secret:", 1)[-1]
                if not name.startswith(MSK_SCRAM_SECRET_PREFIX):
                    raise ValueError(
                        f"auth.secret_arn: MSK reads SASL/SCRAM credentials only from secrets named "
                        f"{MSK_SCRAM_SECRET_PREFIX}..., got {name!r}"
                    )
        if self.kind == "kafka":
            for server in self.bootstrap_servers or ():
                if not re.match(BOOTSTRAP_SERVER, server):
                    raise ValueError(f"bootstrap_servers: {server!r} is not host:port")
            public = [
                server for server in self.bootstrap_servers or () if not is_private_host(server.rsplit(":", 1)[0])
            ]
            if self.auth_mechanism == "none" and self.network is None and public and not self.allow_plaintext_public:
                raise ValueError(
                    f"self-managed Kafka at a public endpoint ({', '.join(public)}) with auth.mechanism none: anyone "
                    "can read the topic, and records cross the internet unencrypted unless the brokers require TLS. "
                    "Use auth.mechanism sasl_scram_256/512, plain or mtls (the mapping then uses TLS), reach the "
                    "brokers in their VPC (network), or set source.allow_plaintext_public: true"
                )
        elif self.allow_plaintext_public:
            raise ValueError("allow_plaintext_public is for self-managed Kafka (kind 'kafka')")

    @property
    def auth_mechanism(self) -> str:
        """How the mapping authenticates: ``auth.mechanism``, or the kind's default (MSK ``iam``,
        self-managed ``none``); ``""`` for Kinesis."""
        if self.kind in ("kinesis", "rabbitmq"):
            return ""
        return self.auth.mechanism if self.auth is not None else KAFKA_AUTH_MECHANISMS[self.kind][0]

    @property
    def shape(self) -> SourceShape:
        """Names and widths of this source kind below the adapters (``tidemark.sources``)."""
        return shape_of(self.kind)


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
    """How key, value and header bytes are validated and rendered in the archive envelope.

    ``wire_format: confluent``: the producers' serializers write Confluent's wire format (magic
    byte 0, a 4-byte schema id, the payload) and no registry integration decodes it; the bytes
    are kept as produced (``value``/``key`` ``bytes``) and each record's schema id is recorded
    in the envelope (``tidemark.wireformat``)."""

    value: Literal["json", "text", "bytes"] = "json"
    key: Literal["text", "bytes"] = "text"
    headers: Literal["text", "bytes"] = "text"
    wire_format: Literal["none", "confluent"] = "none"

    @model_validator(mode="after")
    def _binary_wire_format(self) -> EncodingConfig:
        if self.wire_format != "none" and "bytes" not in (self.value, self.key):
            raise ValueError(
                "wire_format confluent: the wire format is binary; set encoding.value (or key) to bytes to keep it"
            )
        return self


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


FormatType = Literal["jsonl", "parquet", "avro", "csv", "text", "bytes"]
#: the formats whose envelope keeps each record's schema references (``tidemark.formats.schema_refs``)
SCHEMA_REF_FORMATS = ("jsonl", "parquet", "avro", "csv")
SCHEMA_REF_COLUMNS = ("key_schema", "value_schema")
#: the codecs each format accepts, the first being the default
COMPRESSIONS: dict[str, tuple[str, ...]] = {
    "jsonl": ("zstd", "gzip", "none"),
    "csv": ("zstd", "gzip", "none"),
    "text": ("zstd", "gzip", "none"),
    "bytes": ("zstd", "gzip", "none"),
    "parquet": ("snappy", "zstd", "gzip", "none"),
    "avro": ("deflate", "snappy", "zstandard", "null"),
}
#: the zstd level of a stream that does not set one: the fastest level whose objects stay within
#: 10% of gzip-6's size (``bench/flush.py``: JSON Lines of orders at level 1 are ~0.87 of gzip-6's
#: size, rendered and compressed ~4x faster). Level 3 is what buffers staged before the level was
#: configurable render at (``tidemark.formats.compression.ZSTD_LEVEL``).
DEFAULT_ZSTD_LEVEL = 1
#: the levels zstd compresses at (its negative "fast" levels are not offered)
MAX_ZSTD_LEVEL = 22
#: what a CSV column may name besides ``value.<dotted path>``
ENVELOPE_COLUMNS = KAFKA_SHAPE.envelope.columns  # Kafka's; tidemark.sources has every kind's
VALUE_COLUMN = r"^value(\.[A-Za-z_][A-Za-z0-9_]*)+$"
_AVRO_TYPES = {
    "string": "string",
    "long": "long",
    "int": "long",
    "double": "double",
    "float": "double",
    "boolean": "boolean",
}


class ValueField(_Model):
    """One top-level field of a JSON value, archived as a typed column."""

    name: str = Field(pattern=IDENTIFIER)
    type: Literal["string", "long", "double", "boolean"]
    nullable: bool = False

    @property
    def encoded(self) -> str:
        return f"{self.name}:{self.type}{'?' if self.nullable else ''}"


def _fields_of_avro(schema: object) -> list[dict[str, object]]:
    """The fields of an Avro record schema of primitives (``["null", T]`` unions are nullable)."""
    if not isinstance(schema, dict) or schema.get("type") != "record" or not isinstance(schema.get("fields"), list):
        raise ValueError("avro: must be an Avro record schema with a 'fields' list")
    fields: list[dict[str, object]] = []
    for item in schema["fields"]:
        kind = item.get("type") if isinstance(item, dict) else None
        nullable = isinstance(kind, list) and "null" in kind and len(kind) == 2
        if nullable and isinstance(kind, list):
            kind = next(part for part in kind if part != "null")
        if not isinstance(kind, str) or kind not in _AVRO_TYPES:
            name = item.get("name") if isinstance(item, dict) else item
            raise ValueError(
                f"avro: field {name!r} has type {kind!r}; only string, long, int, double, float and boolean"
                " (or a union of one of them with null) can be archived as typed columns"
            )
        fields.append({"name": item.get("name"), "type": _AVRO_TYPES[kind], "nullable": nullable})
    return fields


class ValueSchemaConfig(_Model):
    """A declared schema for JSON values: ``fields``, or ``avro`` (an Avro record schema; in YAML,
    ``avro_schema: <file>`` next to the config is read into it by the loader).

    A value that does not conform -- not an object, a declared field missing (unless nullable) or
    of another type, or a field the schema does not declare -- is dead-lettered with reason
    ``schema_mismatch``: never dropped, never nulled."""

    fields: list[ValueField] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _from_avro(cls, data: object) -> object:
        if isinstance(data, dict) and "avro" in data:
            if "fields" in data:
                raise ValueError("give fields or avro, not both")
            return {"fields": _fields_of_avro(data["avro"])}
        return data

    @field_validator("fields")
    @classmethod
    def _unique(cls, value: list[ValueField]) -> list[ValueField]:
        names = [field.name for field in value]
        if len(set(names)) != len(names):
            raise ValueError(f"field names must be unique, got {names}")
        return value

    @property
    def encoded(self) -> str:
        return ",".join(field.encoded for field in self.fields)


class FormatConfig(_Model):
    """How a buffer is rendered into an S3 object (README: "Formats")."""

    type: FormatType = "jsonl"
    compression: str = ""  # empty: the format's default (the first of COMPRESSIONS[type])
    gzip_level: int = Field(default=6, ge=1, le=9)  # gzip and Avro's deflate
    zstd_level: int = Field(default=DEFAULT_ZSTD_LEVEL, ge=1, le=MAX_ZSTD_LEVEL)  # zstd, Avro's zstandard
    value_schema: ValueSchemaConfig | None = None  # parquet and avro: typed value columns
    columns: list[str] | None = None  # csv: envelope fields and value.<dotted path>, in order

    @model_validator(mode="before")
    @classmethod
    def _default_codec(cls, data: object) -> object:
        if isinstance(data, dict) and not data.get("compression"):
            codecs = COMPRESSIONS.get(str(data.get("type", "jsonl")))
            if codecs:
                return {**data, "compression": codecs[0]}
        return data

    @model_validator(mode="after")
    def _fits_the_format(self) -> FormatConfig:
        codecs = COMPRESSIONS[self.type]
        if self.compression not in codecs:
            raise ValueError(f"compression {self.compression!r} is not one {self.type} supports ({', '.join(codecs)})")
        if self.value_schema is not None and self.type not in ("parquet", "avro"):
            raise ValueError("value_schema is for parquet and avro (typed value columns)")
        if self.columns is not None:
            if self.type != "csv":
                raise ValueError("columns is for csv")
            if not self.columns:
                raise ValueError("columns must name at least one column")
            for column in self.columns:
                if column not in ALL_ENVELOPE_COLUMNS + SCHEMA_REF_COLUMNS and not re.match(VALUE_COLUMN, column):
                    raise ValueError(
                        f"column {column!r} is neither an envelope field "
                        f"({', '.join(ALL_ENVELOPE_COLUMNS + SCHEMA_REF_COLUMNS)}) nor value.<dotted path>"
                    )
            if len(set(self.columns)) != len(self.columns):
                raise ValueError(f"columns must be unique, got {self.columns}")
        return self


#: names a partition-by field may not take: envelope columns and the hour's (Hive) folder names
RESERVED_PARTITION_NAMES = (*ENVELOPE_COLUMNS, "year", "month", "day", "hour")
PARTITION_SELECTOR = r"^(_key|_topic|_partition|_value(\.[A-Za-z_][A-Za-z0-9_]*)+|_header\.[A-Za-z0-9._-]{1,128})$"
_DEFAULT_NAMES = {"_key": "record_key", "_topic": "source_topic", "_partition": "source_partition"}


class PartitionField(_Model):
    """One partition-by field: where its value comes from and the name its folder level takes."""

    field: str = Field(pattern=PARTITION_SELECTOR)
    name: str = Field(default="", pattern=r"^$|^[a-z_][a-z0-9_]{0,63}$")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: object) -> object:
        return {"field": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _default_name(self) -> PartitionField:
        if not self.name:
            last = self.field.rsplit(".", 1)[-1].lower()
            default = _DEFAULT_NAMES.get(self.field) or re.sub(r"[^a-z0-9_]", "_", last)
            if not re.match(r"^[a-z_]", default):
                default = f"_{default}"
            object.__setattr__(self, "name", default[:64])
        if self.name in RESERVED_PARTITION_NAMES:
            raise ValueError(
                f"partition name {self.name!r} is taken by an archive column or hour folder; set name: for {self.field}"
            )
        return self


class PartitionByConfig(_Model):
    """Content partitioning: folders between the stream and the hour (README: "Partitioning").

    ``raw/<stream>/<folders>/<yyyy>/<mm>/<dd>/<hh>/``; ``style: keys_and_values`` writes Hive's
    ``name=value`` folders; ``hour_folders: hive`` writes ``year=/month=/day=/hour=``. A record
    without the field goes to ``__missing__`` (or is dead-lettered, ``missing: dead_letter``)."""

    fields: list[PartitionField] = Field(default_factory=list, max_length=8)
    style: Literal["values", "keys_and_values"] = "values"
    hour_folders: Literal["plain", "hive"] = "plain"
    missing: Literal["folder", "dead_letter"] = "folder"
    max_value_length: int = Field(default=64, ge=24, le=256)  # longer values are cut and get a hash suffix

    @field_validator("fields")
    @classmethod
    def _unique(cls, value: list[PartitionField]) -> list[PartitionField]:
        names = [field.name for field in value]
        if len(set(names)) != len(names):
            raise ValueError(f"partition names must be unique, got {names} (set name: to tell them apart)")
        return value

    @property
    def max_folders_length(self) -> int:
        """No record's partition-by folders are longer (``name=`` and ``/`` included)."""
        return sum(len(field.name) + 2 + self.max_value_length for field in self.fields)


#: S3's limit on a key's length (UTF-8 bytes; every character of a Tidemark key is ASCII)
S3_MAX_KEY = 1024
#: an object key besides its prefix, the stream name (twice) and its partition-by folders: the
#: Hive hour folders (35), partition (10 digits), epoch (``e`` + 10 digits + ``+``), two 20-digit
#: offsets, separators and the longest extension
KEY_FIXED_PART = 130


def key_fixed_part(shape: SourceShape) -> int:
    """``KEY_FIXED_PART`` for a source kind: its partition ids and positions may be wider."""
    return KEY_FIXED_PART + (shape.max_partition_length - 10) + 2 * (shape.position_digits - 20)


class DeadLetterConfig(_Model):
    """Bad records go to ``<errors_prefix>/<stream>/...`` with their original bytes and a reason."""

    max_record_bytes: Bytes = Field(default=ByteSize(1 * MiB), ge=1, le=64 * MiB)


class DedupeConfig(_Model):
    """How a source without offsets (RabbitMQ) tells a redelivery from a new message.

    ``id``: ``message_id`` (the AMQP property), ``header:<name>`` (a header's value) or
    ``content_sha256`` (the body's digest: identical bodies are one message). A message id seen
    within ``window`` of its first acceptance is archived at most once (``tidemark.dedupe``)."""

    id: str = Field(default="message_id", pattern=r"^(message_id|content_sha256|header:[^\s]{1,255})$")
    window: Duration = timedelta(hours=24)

    @field_validator("window")
    @classmethod
    def _window_range(cls, value: timedelta) -> timedelta:
        if not timedelta(minutes=1) <= value <= timedelta(days=14):
            raise ValueError("must be between 1m and 14d")
        return value

    @property
    def window_ms(self) -> int:
        return to_ms(self.window)


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
    partition_by: PartitionByConfig = PartitionByConfig()
    dead_letter: DeadLetterConfig = DeadLetterConfig()
    aggregations: list[AggregationConfig] = Field(default_factory=list)
    completeness: CompletenessConfig = CompletenessConfig()
    archiver: ArchiverFunctionSettings = ArchiverFunctionSettings()
    dedupe: DedupeConfig | None = None  # rabbitmq: how redeliveries are told apart (default: message_id, 24h)

    @model_validator(mode="after")
    def _dedupe_for_rabbitmq(self) -> StreamConfig:
        if self.dedupe is not None and self.source.kind != "rabbitmq":
            raise ValueError("dedupe is for RabbitMQ sources (a Kafka or Kinesis position already tells a redelivery)")
        if self.aggregations and self.source.kind == "rabbitmq":
            raise ValueError("aggregations: the Spark job reads Kafka and Kinesis archives; not yet a RabbitMQ queue's")
        return self

    @property
    def dedupe_settings(self) -> DedupeConfig:
        """``dedupe``, or its defaults (message_id, 24h)."""
        return self.dedupe if self.dedupe is not None else DedupeConfig()

    @model_validator(mode="after")
    def _json_needs_json(self) -> StreamConfig:
        if self.source.schema_registry is not None and self.archiver.provisioned_pollers is None:
            raise ValueError(
                "source.schema_registry needs archiver.provisioned_pollers: the mapping's registry "
                "integration runs in provisioned mode only"
            )
        if self.encoding.wire_format != "none":
            if self.source.schema_registry is not None:
                raise ValueError(
                    "encoding.wire_format is for streams the mapping does not decode: with source.schema_registry "
                    "the mapping strips the wire format and reports each record's schema itself"
                )
            if self.source.shape.kind != "kafka":
                raise ValueError("encoding.wire_format confluent is for Kafka sources")
            if self.format.type not in SCHEMA_REF_FORMATS:
                raise ValueError(
                    f"encoding.wire_format: format {self.format.type} keeps no schema ids; "
                    f"use one of {', '.join(SCHEMA_REF_FORMATS)}"
                )
            if self.format.type == "csv" and not set(SCHEMA_REF_COLUMNS) <= set(self.csv_columns):
                raise ValueError(f"encoding.wire_format: format.columns must include {', '.join(SCHEMA_REF_COLUMNS)}")
        if len(set(SCHEMA_REF_COLUMNS) & set(self.format.columns or ())) == 1:
            raise ValueError(f"format.columns: {' and '.join(SCHEMA_REF_COLUMNS)} go together (a record's references)")
        if not self.schema_refs and set(SCHEMA_REF_COLUMNS) & set(self.format.columns or ()):
            raise ValueError(
                f"format.columns {', '.join(SCHEMA_REF_COLUMNS)} hold schema references: they need "
                "source.schema_registry or encoding.wire_format"
            )
        if self.event_time.source == "json_field" and self.encoding.value != "json":
            raise ValueError("event_time.source 'json_field' needs encoding.value 'json'")
        if self.aggregations and self.encoding.value != "json":
            raise ValueError("aggregations need encoding.value 'json' (they read the value's fields)")
        if self.aggregations and not self.keeps_positions:
            raise ValueError(
                f"aggregations need a format that keeps each record's partition and offset (the job dedupes on"
                f" them): {self.format.type} {'without those columns ' if self.format.type == 'csv' else ''}does not"
            )
        if self.format.value_schema is not None and self.encoding.value != "json":
            raise ValueError("format.value_schema needs encoding.value 'json' (it types the value's fields)")
        if any(f.field.startswith("_value.") for f in self.partition_by.fields) and self.encoding.value != "json":
            raise ValueError("partition_by on _value.<path> needs encoding.value 'json'")
        envelope = self.source.shape.envelope
        taken = [f.name for f in self.partition_by.fields if f.name in envelope.columns]
        if taken:
            raise ValueError(f"partition names {taken} are taken by {self.source.kind} archive columns; set name:")
        if self.format.columns is not None:
            foreign = [c for c in self.format.columns if c in ALL_ENVELOPE_COLUMNS and c not in envelope.columns]
            if foreign:
                raise ValueError(
                    f"format.columns {foreign} are not fields of a {self.source.kind} envelope "
                    f"({', '.join(envelope.columns)})"
                )
        if envelope.headers is None:
            if self.event_time.source == "header":
                raise ValueError(f"event_time.source 'header': {self.source.kind} records have no headers")
            if any(f.field.startswith("_header.") for f in self.partition_by.fields):
                raise ValueError(f"partition_by on _header.<name>: {self.source.kind} records have no headers")
        return self

    @property
    def schema_refs(self) -> bool:
        """Whether records may carry schema references (a registry integration, a wire format)."""
        return self.source.schema_registry is not None or self.encoding.wire_format != "none"

    @property
    def csv_columns(self) -> tuple[str, ...]:
        """The CSV columns: as configured, or every envelope field of the stream's source kind
        (and the schema references, when records may carry them)."""
        if self.format.columns:
            return tuple(self.format.columns)
        return self.source.shape.envelope.columns + (SCHEMA_REF_COLUMNS if self.schema_refs else ())

    @property
    def keeps_positions(self) -> bool:
        """Whether each record's partition and position can be read back from the object."""
        if self.format.type == "text":
            return False
        envelope = self.source.shape.envelope
        return self.format.type != "csv" or {envelope.partition, envelope.position} <= set(self.csv_columns)


#: an IAM role's ARN as IAM shows it, path included (``aws:PrincipalArn`` of its sessions); no ``*``
#: or ``?``, which an ARN condition would read as wildcards
IAM_ROLE_ARN = r"^arn:aws[a-z-]*:iam::\d{12}:role/([A-Za-z0-9+=,.@_-]+/)*[A-Za-z0-9+=,.@_-]{1,64}$"
#: S3 Object Lock's longest default retention CloudFormation takes in days (100 years)
OBJECT_LOCK_MAX_DAYS = 36_500
#: ``archive.protection``: what keeps an object version the archive wrote, beyond the bucket policy
Protection = Literal["none", "versioning", "object_lock"]


class ObjectLockSettings(_Model):
    """S3 Object Lock's default retention for every object version written to the archive bucket
    (``archive.protection: object_lock``). No one can delete a version before its retention ends:
    in ``COMPLIANCE`` mode not even the account's root user; in ``GOVERNANCE`` mode only a
    principal allowed ``s3:BypassGovernanceRetention`` that asks for the bypass."""

    mode: Literal["GOVERNANCE", "COMPLIANCE"] = "GOVERNANCE"
    #: how long each object version stays locked after it is written, in whole days
    retention: Duration
    #: ``true`` confirms that this stack creates the bucket with Object Lock on (its first deploy)
    #: or already did. CloudFormation replaces a bucket whose ``ObjectLockEnabled`` changes, so
    #: turning Object Lock on for a deployed stack, or off again, would move the archive to a new,
    #: empty bucket: README "Security" says how to lock an existing archive instead.
    created_with_bucket: bool = Field(default=False, validate_default=True)

    @field_validator("retention")
    @classmethod
    def _whole_days(cls, value: timedelta) -> timedelta:
        days = value.total_seconds() / 86_400
        if days != int(days) or not 1 <= days <= OBJECT_LOCK_MAX_DAYS:
            raise ValueError(f"must be whole days between 1d and {OBJECT_LOCK_MAX_DAYS}d, got {value}")
        return value

    @field_validator("created_with_bucket")
    @classmethod
    def _confirmed(cls, value: bool) -> bool:
        if not value:
            raise ValueError(
                "Object Lock can only be set when the stack creates the archive bucket: CloudFormation "
                "replaces a bucket whose ObjectLockEnabled changes, which would leave the archive behind in "
                "the old bucket. Set created_with_bucket: true for a stack that is not deployed yet (or was "
                "deployed with Object Lock); for a deployed archive see README 'Security'"
            )
        return value

    @property
    def retention_days(self) -> int:
        return int(self.retention.total_seconds() // 86_400)


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
    #: (stack only) the one role the bucket policy lets delete objects under the archive's
    #: prefixes (raw/, errors/, manifests/, the mappings' aws/lambda/); none: no one may
    break_glass_role_arn: str | None = Field(default=None, pattern=IAM_ROLE_ARN)
    #: (stack only) what keeps an object version beyond the bucket policy: ``none``, ``versioning``
    #: (a deleted or replaced version stays, as a noncurrent version) or ``object_lock`` (versions
    #: cannot be deleted before ``object_lock.retention``; only when the stack creates the bucket)
    protection: Protection = "none"
    #: (stack only) the default retention with ``protection: object_lock``
    object_lock: ObjectLockSettings | None = None

    @model_validator(mode="after")
    def _object_lock_with_its_settings(self) -> ArchiveSettings:
        if self.protection == "object_lock" and self.object_lock is None:
            raise ValueError("protection 'object_lock' needs object_lock: {mode, retention, created_with_bucket}")
        if self.protection != "object_lock" and self.object_lock is not None:
            raise ValueError(
                f"object_lock is set but protection is {self.protection!r}: Object Lock cannot be turned off for a "
                "bucket, and CloudFormation would replace the bucket (the archive stays in the old one); keep "
                "protection: object_lock, or remove object_lock for a stack that never had it"
            )
        return self

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
    catalog: CatalogSettings = CatalogSettings()
    staging: StagingSettings = StagingSettings()

    @model_validator(mode="after")
    def _unique(self) -> TidemarkConfig:
        names = [stream.name for stream in self.streams]
        topics = [(stream.source.shape.kind, stream.source.match_name) for stream in self.streams]
        if len(set(names)) != len(names):
            raise ValueError(f"stream names must be unique, got {names}")
        if len(set(topics)) != len(topics):
            raise ValueError(f"each topic (or Kinesis stream) may feed one stream only, got {[t for _, t in topics]}")
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
            longest_key = (
                max(len(self.archive.raw_prefix), len(self.archive.errors_prefix))
                + 2 * len(stream.name)
                + stream.partition_by.max_folders_length
                + key_fixed_part(source.shape)
            )
            if longest_key > S3_MAX_KEY:
                raise ValueError(
                    f"streams[{index}].partition_by: object keys could be {longest_key} characters, over S3's "
                    f"{S3_MAX_KEY}: use fewer fields, shorter names or a smaller max_value_length"
                )
            if stream.flush.max_age < self.sweeper.interval:
                raise ValueError(
                    f"streams[{index}].flush.max_age ({stream.flush.max_age}) is shorter than sweeper.interval "
                    f"({self.sweeper.interval}): a quiet partition's buffer would wait up to the interval anyway"
                )
        return self

    def runtime_json(self) -> str:
        """The configuration as the Lambdas and the Spark job get it: without the deployment-only
        sections and without settings left at their defaults (the same code parses it back into
        the same values), which keeps it small: Lambda allows 4 KB of environment in all, and a
        Kafka and two Kinesis streams in full would not fit."""
        return self.model_dump_json(
            exclude_defaults=True,
            exclude={
                "network": True,
                "pipeline": True,
                "alarms": True,
                "catalog": True,
                "staging": True,
                "streams": {"__all__": {"archiver"}},
                # the bucket's protection is the stack's (its policy, versioning, Object Lock)
                "archive": {"break_glass_role_arn", "protection", "object_lock"},
            },
        )

    def stream(self, name: str) -> StreamConfig:
        for stream in self.streams:
            if stream.name == name:
                return stream
        raise KeyError(name)

    def stream_for_topic(self, topic: str, kind: str = "kafka") -> StreamConfig | None:
        """The stream that archives ``topic`` (a Kinesis stream's name, with ``kind='kinesis'``; a
        RabbitMQ ``<queue>::<virtual host>`` with ``kind='rabbitmq'``)."""
        for stream in self.streams:
            if stream.source.match_name == topic and stream.source.shape.kind == kind:
                return stream
        return None
