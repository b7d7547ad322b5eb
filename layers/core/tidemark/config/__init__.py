"""The one validated stream configuration, read by the CDK app, the Lambdas and the Spark job."""

from __future__ import annotations

from tidemark.config.loader import load_config, load_config_from_env, parse_config
from tidemark.config.model import (
    ArchiveSettings,
    DeadLetterConfig,
    EncodingConfig,
    EventTimeConfig,
    FlushPolicyConfig,
    FormatConfig,
    SourceConfig,
    StreamConfig,
    TidemarkConfig,
)

__all__ = [
    "ArchiveSettings",
    "DeadLetterConfig",
    "EncodingConfig",
    "EventTimeConfig",
    "FlushPolicyConfig",
    "FormatConfig",
    "SourceConfig",
    "StreamConfig",
    "TidemarkConfig",
    "load_config",
    "load_config_from_env",
    "parse_config",
]
