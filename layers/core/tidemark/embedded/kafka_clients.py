"""Settings shared by every Kafka client the embedded runner creates.

librdkafka logs straight to stderr by default, which would tear through the demo's progress
display; here its log lines go to the ``tidemark.embedded.kafka`` logger instead (the demo
writes that logger to a file in its working directory).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LOGGER_NAME = "tidemark.embedded.kafka"


def client_settings(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "logger": logging.getLogger(LOGGER_NAME), **extra}


@contextmanager
def kafka_client_log(path: Path) -> Iterator[None]:
    """While inside, the Kafka clients' log lines go to ``path`` (and nowhere else)."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    kafka_logger = logging.getLogger(LOGGER_NAME)
    kafka_logger.addHandler(handler)
    kafka_logger.propagate = False
    try:
        yield
    finally:
        kafka_logger.removeHandler(handler)
        handler.close()
