"""Deployment settings: what the CDK app needs beyond the streams themselves.

These sections shape the AWS resources only (network, the dev MSK cluster, the archiver
functions' size, storage-class transitions, the Spark pipeline, alarms). The Lambdas and the Spark
job never read them, so the stack leaves them out of the configuration it passes at run time.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tidemark.config.units import Duration

VPC_ID = r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$"
SUBNET_ID = r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$"
PREFIX_LIST_ID = r"^pl-[0-9a-f]{8}([0-9a-f]{9})?$"
#: an ECR image by digest (``<repo>@sha256:<64 hex>``: CloudFormation's ImageUri takes a tag or a
#: digest, not both): a tag can be moved to another image, a digest cannot, so a redeploy runs
#: exactly the image that was tested
ECR_IMAGE_URI = r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/[a-z0-9._/-]+@sha256:[0-9a-f]{64}$"
#: EMR Serverless 7.x releases ship Spark 3.5.x, the minor version the job is tested on
EMR_7_RELEASE = r"^emr-7\.\d+\.\d+$"
EMAIL = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"

#: the Lambda event source mapping for Kafka gives up on an invocation after 14 minutes
ESM_MAX_INVOCATION = timedelta(minutes=14)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NetworkSettings(_Model):
    """Where the functions and the EFS staging file system live.

    Without ``vpc_id`` the stack creates a VPC with isolated subnets only: the functions reach S3
    and DynamoDB through gateway endpoints, and STS and Lambda (which the MSK event source
    mapping needs) through interface endpoints, so no NAT gateway is needed. With ``vpc_id`` the
    stack looks the VPC up at synth (``cdk.context.json`` caches it) and uses ``subnet_ids``, or
    the VPC's private subnets.
    """

    vpc_id: str | None = Field(default=None, pattern=VPC_ID)
    subnet_ids: list[str] = Field(default_factory=list)
    cidr: str = "10.40.0.0/16"
    max_azs: int = Field(default=2, ge=2, le=3)
    #: gateway endpoints for S3 and DynamoDB, interface endpoints for STS and Lambda; default: on
    #: for a created VPC, off for an existing one (which usually has its own)
    create_endpoints: bool | None = None
    #: the region's managed prefix lists of the S3 and DynamoDB gateway endpoints
    #: (``{s3: pl-63a5400a, dynamodb: pl-02cd2c6b}``), to which the functions' HTTPS egress is
    #: limited (with the VPC's own range, for interface endpoints); without them the stack looks
    #: them up at synth when it has an account and region, else HTTPS may go anywhere (a warning)
    prefix_list_ids: dict[Literal["s3", "dynamodb"], str] | None = None

    @field_validator("subnet_ids")
    @classmethod
    def _subnets(cls, value: list[str]) -> list[str]:
        for subnet in value:
            if not re.match(SUBNET_ID, subnet):
                raise ValueError(f"{subnet!r} is not a subnet id (subnet-0123abcd...)")
        if len(set(value)) != len(value):
            raise ValueError("subnet ids must be unique")
        return value

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            network = ipaddress.IPv4Network(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IPv4 CIDR block: {exc}") from None
        if not 16 <= network.prefixlen <= 24:
            raise ValueError("must be a /16 to /24 block")
        return value

    @model_validator(mode="after")
    def _existing(self) -> NetworkSettings:
        if self.prefix_list_ids is not None:
            if set(self.prefix_list_ids) != {"s3", "dynamodb"}:
                raise ValueError("prefix_list_ids: give both s3 and dynamodb")
            for name, value in self.prefix_list_ids.items():
                if not re.match(PREFIX_LIST_ID, value):
                    raise ValueError(f"prefix_list_ids.{name}: {value!r} is not a prefix list id (pl-...)")
        if self.subnet_ids and self.vpc_id is None:
            raise ValueError("subnet_ids needs vpc_id (they select subnets of an existing VPC)")
        if self.subnet_ids and len(self.subnet_ids) < 2:
            raise ValueError("subnet_ids needs at least two subnets in different availability zones")
        return self

    @property
    def endpoints(self) -> bool:
        return self.create_endpoints if self.create_endpoints is not None else self.vpc_id is None


class DevClusterSettings(_Model):
    """An MSK Serverless cluster created by the stack for a dev environment (IAM auth).

    Streams with ``source.kind: msk`` and no ``cluster_arn`` read from it. Topics are not created
    by the stack: create them with a Kafka client from inside the VPC.
    """

    enabled: bool = False


class ProvisionedPollersSettings(_Model):
    """Provisioned mode of the event source mapping: pollers kept warm between these bounds."""

    minimum: int = Field(default=1, ge=1, le=200)
    maximum: int = Field(default=200, ge=1, le=2000)

    @model_validator(mode="after")
    def _bounds(self) -> ProvisionedPollersSettings:
        if self.minimum > self.maximum:
            raise ValueError(f"minimum ({self.minimum}) is above maximum ({self.maximum})")
        return self


class ArchiverFunctionSettings(_Model):
    """The archiver Lambda of one stream."""

    memory_mb: int = Field(default=2048, ge=256, le=10240)
    timeout: Duration = timedelta(minutes=5)
    reserved_concurrency: int | None = Field(default=None, ge=1, le=1000)
    provisioned_pollers: ProvisionedPollersSettings | None = None
    #: None retries a failing batch until it succeeds, with no on-failure destination (the
    #: exactly-once default: with a destination, AWS caps unbounded Kafka retries at 10). A number
    #: sends the batch's records to the on-failure destination (the bucket's aws/lambda/ prefix)
    #: after that many retries, alarmed; Lambda supports this for Kafka only in provisioned mode.
    #: A schema registry stream gets 10,000 (AWS's largest) when unset (stacks.archiver).
    retry_attempts: int | None = Field(default=None, ge=0, le=10_000)
    #: auto: the formats layer (pyarrow, fastavro, zstandard) only while the stream's format needs
    #: it; always: keep it -- when moving a stream off Parquet, Avro, CSV or zstd, until the
    #: buffers staged under the old format are flushed (a flush without its library waits, alarmed)
    formats_layer: Literal["auto", "always"] = "auto"

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=30) <= value < ESM_MAX_INVOCATION:
            raise ValueError("must be at least 30s and below 14m (the Kafka event source mapping's limit)")
        return value

    @model_validator(mode="after")
    def _retries_need_provisioned_mode(self) -> ArchiverFunctionSettings:
        if self.retry_attempts is not None and self.provisioned_pollers is None:
            raise ValueError(
                "retry_attempts needs provisioned_pollers "
                "(Kafka event source mappings bound their retries only in provisioned mode)"
            )
        return self


StorageClass = Literal["STANDARD_IA", "INTELLIGENT_TIERING", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"]
#: S3's transition waterfall: an object only ever moves to a class further down this list
STORAGE_CLASS_ORDER = ("STANDARD_IA", "INTELLIGENT_TIERING", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE")
#: S3 refuses transitions to the infrequent-access classes before 30 days, and moves objects out
#: of them only after 30 days there
_MIN_DAYS = {"STANDARD_IA": 30, "ONEZONE_IA": 30}
IA_MIN_STAY_DAYS = 30


class StorageTransition(_Model):
    """Archived objects move to ``storage_class`` this long after they were written."""

    storage_class: StorageClass
    after: Duration

    @model_validator(mode="after")
    def _days(self) -> StorageTransition:
        days = self.after.total_seconds() / 86_400
        if days != int(days) or days < 1:
            raise ValueError(f"after must be whole days (1d or more), got {self.after}")
        minimum = _MIN_DAYS.get(self.storage_class, 0)
        if days < minimum:
            raise ValueError(f"S3 moves objects to {self.storage_class} after {minimum}d at the earliest")
        return self

    @property
    def days(self) -> int:
        return int(self.after.total_seconds() // 86_400)


class PipelineSettings(_Model):
    """The EMR Serverless Spark application and the schedule that runs the aggregation job."""

    release_label: str = Field(default="emr-7.5.0", pattern=EMR_7_RELEASE)
    #: an image built from jobs/image/Dockerfile, by digest (``...@sha256:...``): EMR's own image
    #: has Python 3.9, the job needs 3.11
    image_uri: str | None = Field(default=None, pattern=ECR_IMAGE_URI)
    schedule: Duration = timedelta(hours=1)
    # CloudFormation's own patterns for MaximumAllowedResources
    max_cpu: str = Field(default="16 vCPU", pattern=r"^[1-9][0-9]*\s?(vCPU|vcpu|VCPU)?$")
    max_memory: str = Field(default="64 GB", pattern=r"^[1-9][0-9]*\s?(GB|gb|gB|Gb)?$")
    idle_timeout: Duration = timedelta(minutes=15)
    job_timeout: Duration = timedelta(minutes=50)
    #: read Parquet, JSON Lines and CSV (gzip or none) objects with Spark's own readers through
    #: EMRFS (``--archive-root s3://<bucket>``); false: every format through the job's boto3 +
    #: Arrow reader (which Avro, zstd and bytes objects always use)
    spark_readers: bool = True

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: timedelta) -> timedelta:
        if not timedelta(minutes=5) <= value <= timedelta(days=1) or value.total_seconds() % 60:
            raise ValueError("must be whole minutes between 5m and 24h (an EventBridge rate)")
        return value

    @field_validator("job_timeout")
    @classmethod
    def _job_timeout(cls, value: timedelta) -> timedelta:
        if value < timedelta(minutes=1) or value.total_seconds() % 60:
            raise ValueError("must be whole minutes, at least 1m (EMR Serverless's ExecutionTimeoutMinutes)")
        return value

    @field_validator("idle_timeout")
    @classmethod
    def _idle(cls, value: timedelta) -> timedelta:
        if not timedelta(minutes=1) <= value <= timedelta(days=7) or value.total_seconds() % 60:
            raise ValueError("must be whole minutes between 1m and 7d")
        return value

    @model_validator(mode="after")
    def _no_overlap(self) -> PipelineSettings:
        # Two runs over one hour could leave the older result last; runs must not overlap.
        if self.job_timeout >= self.schedule:
            raise ValueError(
                f"job_timeout ({self.job_timeout}) must be shorter than schedule ({self.schedule}) "
                "so runs never overlap"
            )
        return self


class AlarmSettings(_Model):
    """Alarms publish to one SNS topic; these addresses are subscribed to it."""

    emails: list[str] = Field(default_factory=list)
    #: offset lag (records) above which the lag alarm fires, when it also grew over the window
    offset_lag: int = Field(default=100_000, ge=1)
    #: Kinesis streams: the mapping's iterator age above which the lag alarm fires, when it also
    #: grew over the window (a quarter of an hour behind is an incident well before the stream's
    #: retention, 24 hours at least, drops records)
    iterator_age: Duration = timedelta(minutes=15)
    evaluation_periods: int = Field(default=3, ge=1, le=24)

    @field_validator("iterator_age")
    @classmethod
    def _age(cls, value: timedelta) -> timedelta:
        if not timedelta(minutes=1) <= value <= timedelta(days=7):
            raise ValueError("must be between 1m and 7d")
        return value

    @field_validator("emails")
    @classmethod
    def _emails(cls, value: list[str]) -> list[str]:
        for address in value:
            if not re.match(EMAIL, address):
                raise ValueError(f"{address!r} is not an email address")
        return value


#: what Glue and Athena accept without quoting: lowercase letters, digits and underscores
GLUE_DATABASE_NAME = r"^[a-z][a-z0-9_]{0,254}$"


class CatalogSettings(_Model):
    """A Glue Data Catalog database with one table per stream (not for ``format: bytes``), with
    Athena partition projection: queries see new hours without a crawler (README: "Query the
    archive with Athena")."""

    enabled: bool = False
    database: str = "tidemark"
    #: the event years partition projection enumerates (a query without a year filter lists them all)
    first_year: int = Field(default=2020, ge=1970, le=9999)
    last_year: int = Field(default=2099, ge=1970, le=9999)

    @field_validator("database")
    @classmethod
    def _database(cls, value: str) -> str:
        if not re.match(GLUE_DATABASE_NAME, value):
            raise ValueError(
                f"{value!r} is not a database name Glue and Athena accept unquoted "
                "(lower-case letters, digits and _, starting with a letter, at most 255 characters)"
            )
        return value

    @model_validator(mode="after")
    def _years(self) -> CatalogSettings:
        if self.first_year > self.last_year:
            raise ValueError(f"first_year ({self.first_year}) is after last_year ({self.last_year})")
        return self


class StagingSettings(_Model):
    """The EFS staging file system's throughput mode (``tidemark cost`` recommends one for a load).

    Each staged byte is written once and read once at flush. ``elastic`` (the default) bills
    those bytes ($0.06/GB written, $0.03/GB read) and follows any burst; ``provisioned`` bills
    ``provisioned_mibps`` for the month ($6.00 per MiB/s) and caps throughput there: cheaper for
    a steady load, throttling above it (the dashboard's EFS throughput alarm fires at 80%).
    """

    throughput: Literal["elastic", "provisioned"] = "elastic"
    #: MiB/s provisioned (writes + reads); required with ``provisioned``, refused with ``elastic``
    provisioned_mibps: int | None = Field(default=None, ge=1, le=10_240)

    @model_validator(mode="after")
    def _mibps(self) -> StagingSettings:
        if self.throughput == "provisioned" and self.provisioned_mibps is None:
            raise ValueError("provisioned_mibps is required when throughput is 'provisioned'")
        if self.throughput == "elastic" and self.provisioned_mibps is not None:
            raise ValueError("provisioned_mibps applies only when throughput is 'provisioned'")
        return self
