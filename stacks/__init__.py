"""Tidemark's CDK constructs: the public API for another CDK app.

    from stacks import TidemarkArchive
    TidemarkArchive(stack, "Archive", config=tidemark.config.load_config("tidemark.yaml"))

``TidemarkArchive`` is the whole deployment; ``SweeperConstruct`` and ``PipelineConstruct`` are
its parts that make sense on their own; ``TidemarkStack`` is the stack this repository deploys.
Imported lazily, so ``import stacks.layer`` (the layer build, benches) does not load them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stacks.archive import TidemarkArchive
    from stacks.paths import ProjectSources
    from stacks.pipeline import PipelineConstruct
    from stacks.sweeper import SweeperConstruct
    from stacks.tidemark_stack import TidemarkStack

__all__ = ["PipelineConstruct", "ProjectSources", "SweeperConstruct", "TidemarkArchive", "TidemarkStack"]

_MODULES = {
    "TidemarkArchive": "stacks.archive",
    "ProjectSources": "stacks.paths",
    "PipelineConstruct": "stacks.pipeline",
    "SweeperConstruct": "stacks.sweeper",
    "TidemarkStack": "stacks.tidemark_stack",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'stacks' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
