"""Synthesizing the stack in tests: cdk.json's feature flags, no bundling, no AWS, no Docker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template
from constructs import IConstruct

from stacks.tidemark_stack import TidemarkStack
from tidemark.config import TidemarkConfig, parse_config

REPO = Path(__file__).resolve().parents[2]
CDK_JSON = REPO / "cdk.json"
#: the CDK context key naming the stacks whose assets are bundled; empty skips every bundling
BUNDLING_STACKS = "aws:cdk:bundling-stacks"
TEST_ENV = Environment(account="123456789012", region="us-east-1")


def cdk_context(*, bundle: bool = False, **extra: Any) -> dict[str, Any]:
    """The context the CDK CLI passes from cdk.json (same feature flags), plus ``extra``.

    Bundling (the core layer's pip install) is skipped unless ``bundle``: wiring tests do not need
    the layer's contents, and one integration test builds it for real.
    """
    context: dict[str, Any] = json.loads(CDK_JSON.read_text(encoding="utf-8"))["context"]
    if not bundle:
        context[BUNDLING_STACKS] = []
    context.update(extra)
    return context


def synth_stack(
    config: TidemarkConfig, *, context: dict[str, Any] | None = None, **kwargs: Any
) -> tuple[TidemarkStack, Template]:
    app = App(context=context if context is not None else cdk_context())
    stack = TidemarkStack(app, "Tidemark", config=config, **kwargs)
    return stack, Template.from_stack(stack)


def with_changes(config: TidemarkConfig, **sections: Any) -> TidemarkConfig:
    """The configuration with top-level sections replaced (validated again)."""
    data = json.loads(config.model_dump_json())
    data.update(sections)
    return parse_config(data)


def logical_id(construct: IConstruct) -> str:
    """The template's logical id of an L2 construct (its default child) or an L1 resource."""
    resource = construct.node.default_child or construct
    return str(Stack.of(construct).resolve(resource.logical_id))  # type: ignore[attr-defined]
