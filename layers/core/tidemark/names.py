"""The one definition of every name that reaches a file path or an S3 key.

The config model validates with these patterns, and every module that builds a path or a key
checks again with the compiled forms (``fullmatch``), so nothing outside them can escape the
staging root or a stream's prefix.
"""

from __future__ import annotations

import re

STREAM_NAME = r"^[a-z][a-z0-9_-]{0,62}$"
TOPIC_NAME = r"^[A-Za-z0-9._-]{1,249}$"  # Kafka's own rule
S3_PREFIX = r"^[a-z0-9][a-z0-9_-]{0,62}$"
HOUR_LABEL = r"^\d{4}-\d{2}-\d{2}T\d{2}$"

STREAM = re.compile(STREAM_NAME)
TOPIC = re.compile(TOPIC_NAME)
PREFIX = re.compile(S3_PREFIX)
HOUR = re.compile(HOUR_LABEL)


def matches(pattern: re.Pattern[str], value: object) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None
