#!/usr/bin/env python3
"""CDK entry point: load and validate the stream configuration, then build the Tidemark stack.

Context keys (``cdk.json`` sets the defaults, ``cdk synth -c key=value`` overrides them):

* ``config``: path of the stream configuration, relative paths resolved against this directory
  (default ``config/tidemark.yaml``);
* ``stack_name``: name of the CloudFormation stack (default ``Tidemark``);
* ``account`` / ``region``: the stack's environment (default: ``CDK_DEFAULT_ACCOUNT`` and
  ``CDK_DEFAULT_REGION``, which the CDK CLI sets from your credentials). Only looking up an
  existing VPC (``network.vpc_id``) needs them; without them the stack is environment-agnostic.

A wrong configuration stops synth with the loader's message, which names the offending field.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import App, Environment

from stacks.tidemark_stack import TidemarkStack
from tidemark.config import load_config
from tidemark.exceptions import ConfigError

ROOT = Path(__file__).resolve().parent
DEFAULT_CONFIG = "config/tidemark.yaml"
DEFAULT_STACK_NAME = "Tidemark"


def _context_str(app: App, key: str, default: str) -> str:
    value = app.node.try_get_context(key)
    if value is None:
        return default
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"CDK context {key!r} must be a non-empty string, got {value!r}")
    return value


def build_app(
    config_path: str | Path | None = None,
    *,
    context: Mapping[str, Any] | None = None,
    outdir: str | None = None,
) -> App:
    """Build (but do not synthesize) the CDK app.

    ``config_path`` wins over the ``config`` context key. ``context`` is added to what the CDK CLI
    passes (cdk.json and ``-c``); tests use it instead of the CLI. Raises ``ConfigError`` for a bad
    configuration before any construct exists.
    """
    app = App(context=dict(context) if context else None, outdir=outdir)
    path = Path(config_path if config_path is not None else _context_str(app, "config", DEFAULT_CONFIG))
    config = load_config(path if path.is_absolute() else ROOT / path)
    account = app.node.try_get_context("account") or os.environ.get("CDK_DEFAULT_ACCOUNT")
    region = app.node.try_get_context("region") or os.environ.get("CDK_DEFAULT_REGION")
    TidemarkStack(
        app,
        _context_str(app, "stack_name", DEFAULT_STACK_NAME),
        config=config,
        env=Environment(account=account, region=region) if account and region else None,
    )
    return app


def main(context: Mapping[str, Any] | None = None) -> None:
    try:
        app = build_app(context=context)
    except ConfigError as exc:
        # A one-line message naming the field beats a traceback through the CDK CLI; exit status 1.
        sys.exit(f"tidemark: invalid configuration: {exc}")
    app.synth()


if __name__ == "__main__":
    main()
