"""Shared fixtures: fake AWS credentials, one moto server per session, a fresh archive per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import settings

from tidemark.clock import ManualClock
from tidemark.config import TidemarkConfig, load_config
from tidemark.embedded.broker import kafka_broker
from tidemark.embedded.moto_server import moto_server
from tidemark.faults import CrashPoints
from tidemark.ledger.dynamodb import ledger_table_schema
from tidemark.runtime import Runtime

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_CONFIG = REPO / "config" / "tidemark.yaml"

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_METRICS_NAMESPACE": "Tidemark",
    }
)


# No timing assertions: hypothesis' default 200 ms deadline per example fails a property test
# on a busy shared machine (two xdist workers, a JVM, brokers) for no fault of the code.
settings.register_profile("tidemark", deadline=None)
settings.load_profile("tidemark")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``), the tests on the Spark session share one worker: one
    JVM for the run, as without workers."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def example_config() -> TidemarkConfig:
    return load_config(EXAMPLE_CONFIG)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def spark(moto_endpoint: str) -> Iterator[Any]:
    """One local[2] SparkSession for the session. Its Python workers import the job modules and
    reach moto through the environment they inherit at start-up."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    os.environ["AWS_ENDPOINT_URL"] = moto_endpoint
    from jobs.aggregation.session import local_session

    session = local_session("tidemark-tests", shuffle_partitions=4)
    try:
        yield session
    finally:
        session.stop()
        os.environ.pop("AWS_ENDPOINT_URL", None)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """One embedded Kafka-protocol broker for the session; tests use topics of their own."""
    with kafka_broker() as bootstrap:
        yield bootstrap


@dataclass
class Archive:
    """One test's AWS resources and staging directory, and a way to build runtimes over them."""

    endpoint: str
    bucket: str
    table: str
    staging_root: Path
    clock: ManualClock
    s3: Any
    dynamodb: Any

    def runtime(
        self, config: TidemarkConfig, crash_points: CrashPoints | None = None, *, s3: Any = None, dynamodb: Any = None
    ) -> Runtime:
        """A runtime over this archive, with these clients (``s3``/``dynamodb`` by default)."""
        return Runtime.build(
            config,
            bucket=self.bucket,
            table=self.table,
            staging_root=str(self.staging_root),
            clock=self.clock,
            crash_points=crash_points,
            s3_client=s3 or self.s3,
            dynamodb_client=dynamodb or self.dynamodb,
        )

    def env(self) -> dict[str, str]:
        return {
            "TIDEMARK_BUCKET": self.bucket,
            "TIDEMARK_LEDGER_TABLE": self.table,
            "TIDEMARK_STAGING_ROOT": str(self.staging_root),
            "AWS_ENDPOINT_URL": self.endpoint,
        }


def make_archive(endpoint: str, root: Path, *, session: boto3.Session | None = None) -> Archive:
    """A fresh bucket, ledger table (same schema as the stack's) and staging directory, made and
    checked with ``session``'s credentials (the environment's by default)."""
    maker: Any = session or boto3
    s3 = maker.client("s3", endpoint_url=endpoint)
    dynamodb = maker.client("dynamodb", endpoint_url=endpoint)
    suffix = uuid.uuid4().hex[:10]
    bucket, table = f"tidemark-archive-{suffix}", f"tidemark-ledger-{suffix}"
    s3.create_bucket(Bucket=bucket)
    dynamodb.create_table(**ledger_table_schema(table))
    staging = root / f"staging-{suffix}"
    staging.mkdir(parents=True)
    return Archive(endpoint, bucket, table, staging, ManualClock(), s3, dynamodb)


@pytest.fixture(scope="module")
def iam_server() -> Iterator[Any]:
    """A moto server of the test module's own with IAM enforced (``tests.support.iam``): moto's
    switch is server-wide, so never the session's server."""
    from tests.support.iam import IamServer

    with moto_server() as endpoint:
        yield IamServer(endpoint)


@pytest.fixture
def archive(moto_endpoint: str, tmp_path: Path) -> Archive:
    return make_archive(moto_endpoint, tmp_path)
