"""Wiring: build the ledger, staging store and object store from the environment (Lambda)
or from explicit arguments (tests, the embedded runner)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from tidemark.clock import Clock, SystemClock
from tidemark.config.loader import load_config_from_env
from tidemark.config.model import StreamConfig, TidemarkConfig
from tidemark.dedupe import DedupeIndex
from tidemark.exceptions import ConfigError
from tidemark.faults import CrashPoints, NoCrashes, crash_points_from_env
from tidemark.ledger.base import Ledger
from tidemark.ledger.dynamodb import DynamoDBLedger
from tidemark.ledger.model import PartitionState
from tidemark.objects.writer import ObjectStore
from tidemark.sources import PartitionId
from tidemark.staging.store import SegmentStore
from tidemark.writer.partition import PartitionWriter
from tidemark.writer.stream import StreamContext

ENV_BUCKET = "TIDEMARK_BUCKET"
ENV_LEDGER_TABLE = "TIDEMARK_LEDGER_TABLE"
ENV_STAGING_ROOT = "TIDEMARK_STAGING_ROOT"
#: where the function's EFS access point is mounted, when that is not the staging root itself: an
#: archiver's stream access point at ``/mnt/<stream>``, below its staging root ``/mnt`` (which
#: exists whether or not anything is mounted)
ENV_STAGING_MOUNT = "TIDEMARK_STAGING_MOUNT"
ENV_SPOOL_DIR = "TIDEMARK_SPOOL_DIR"


@dataclass
class Runtime:
    config: TidemarkConfig
    ledger: Ledger
    staging: SegmentStore
    objects: ObjectStore
    clock: Clock = field(default_factory=SystemClock)
    crash_points: CrashPoints = field(default_factory=NoCrashes)
    _streams: dict[str, StreamContext] = field(default_factory=dict, init=False, repr=False)
    # Partition states last read or written by this process (see PartitionWriter).
    _states: dict[tuple[str, PartitionId], PartitionState] = field(default_factory=dict, init=False, repr=False)
    _gc_times: dict[tuple[str, PartitionId], int] = field(default_factory=dict, init=False, repr=False)
    # Open dedupe indexes of sources without offsets (RabbitMQ), kept across warm invocations.
    _dedupe: dict[tuple[str, PartitionId], DedupeIndex] = field(default_factory=dict, init=False, repr=False)
    kinesis_client: Any = None  # the sweeper's view of Kinesis shards; created on first use

    @property
    def kinesis(self) -> Any:
        """A Kinesis client (only the sweeper asks: shard lineage for hour completeness)."""
        if self.kinesis_client is None:
            self.kinesis_client = boto3.client(
                "kinesis",
                config=Config(connect_timeout=5, read_timeout=10, retries={"mode": "standard", "max_attempts": 3}),
            )
        return self.kinesis_client

    @classmethod
    def build(
        cls,
        config: TidemarkConfig,
        *,
        bucket: str,
        table: str,
        staging_root: str,
        spool_dir: str | None = None,
        clock: Clock | None = None,
        crash_points: CrashPoints | None = None,
        s3_client: object | None = None,
        dynamodb_client: object | None = None,
    ) -> Runtime:
        crash = crash_points or NoCrashes()
        transfer = TransferConfig(
            multipart_threshold=int(config.archive.multipart_threshold),
            multipart_chunksize=int(config.archive.multipart_chunksize),
        )
        return cls(
            config=config,
            ledger=DynamoDBLedger(table, client=dynamodb_client),  # type: ignore[arg-type]
            staging=SegmentStore(staging_root, crash),
            objects=ObjectStore(bucket, client=s3_client, transfer_config=transfer, spool_dir=spool_dir),  # type: ignore[arg-type]
            clock=clock or SystemClock(),
            crash_points=crash,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Runtime:
        """Cold start: a missing setting or a bad config fails here, naming what is wrong."""
        env = os.environ if environ is None else environ
        missing = [name for name in (ENV_BUCKET, ENV_LEDGER_TABLE, ENV_STAGING_ROOT) if not env.get(name)]
        if missing:
            raise ConfigError(f"missing environment variable(s): {', '.join(missing)}")
        for name in (ENV_STAGING_ROOT, ENV_STAGING_MOUNT):
            if name in env and not os.path.isdir(env[name]):
                # Never run on an unmounted staging file system: every accepted segment would look
                # missing, and flushes would be quarantined instead of archived.
                raise ConfigError(f"{name}={env[name]} is not a directory: is the EFS access point mounted?")
        return cls.build(
            load_config_from_env(dict(env)),
            bucket=env[ENV_BUCKET],
            table=env[ENV_LEDGER_TABLE],
            staging_root=env[ENV_STAGING_ROOT],
            spool_dir=env.get(ENV_SPOOL_DIR) or None,
            crash_points=crash_points_from_env(env),
        )

    def stream(self, config: StreamConfig) -> StreamContext:
        context = self._streams.get(config.name)
        if context is None:
            context = self._streams[config.name] = StreamContext.build(config, self.config.archive, self.clock)
        return context

    def writer(self, stream: StreamConfig, partition: PartitionId) -> PartitionWriter:
        return PartitionWriter(
            self.stream(stream),
            partition,
            ledger=self.ledger,
            staging=self.staging,
            objects=self.objects,
            clock=self.clock,
            crash_points=self.crash_points,
            state_cache=self._states,
            gc_times=self._gc_times,
            dedupe=self.dedupe_index(stream, partition) if stream.source.shape.assigns_positions else None,
        )

    def dedupe_index(self, stream: StreamConfig, partition: PartitionId) -> DedupeIndex:
        """The partition's dedupe index on the staging mount (opened once per process)."""
        key = (stream.name, partition)
        index = self._dedupe.get(key)
        if index is None:
            from tidemark.dedupe.sqlite import SqliteDedupeIndex  # queues only: not on every cold start

            index = self._dedupe[key] = SqliteDedupeIndex(self.staging.dedupe_path(stream.name, partition))
        return index
