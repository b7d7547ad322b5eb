"""A local SparkSession for laptops and tests (EMR Serverless configures its own)."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


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
