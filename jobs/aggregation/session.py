"""A local SparkSession for laptops and tests (EMR Serverless configures its own), and the
Spark settings the job itself needs on any session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

#: Spark settings the job's queries need, on EMR and locally alike. Value field names that differ
#: only in case (``price``, ``Price``) are different fields, as they are in JSON and in the Arrow
#: reader: Spark resolves names case-insensitively by default (``AMBIGUOUS_REFERENCE``, or two CSV
#: columns renamed). So aggregations name fields exactly as the values spell them. ANSI mode stays
#: off (Spark 4 turns it on by default, so it is set): under it one text ``"—"`` in a field summed as
#: numbers fails its hour at every run; integer sums are guarded against overflow instead
#: (``jobs.aggregation.exact_sums``).
JOB_CONF: dict[str, str] = {"spark.sql.caseSensitive": "true", "spark.sql.ansi.enabled": "false"}


@contextmanager
def job_conf(spark: SparkSession) -> Iterator[None]:
    """:data:`JOB_CONF` on ``spark`` for the block (the job's session has them from the start;
    a shared session -- a test's, the demo's -- gets its own settings back afterwards)."""
    before = {key: spark.conf.get(key, None) for key in JOB_CONF}
    for key, value in JOB_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, setting in before.items():
            if setting is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, setting)


def local_session(
    app_name: str, *, master: str = "local[2]", shuffle_partitions: int = 8, driver_memory: str = "1g"
) -> SparkSession:
    """Loopback only, no UI, quiet logs; Python workers run this interpreter (its venv has
    pyarrow and boto3) and inherit the environment, including ``AWS_ENDPOINT_URL``."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", driver_memory)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
