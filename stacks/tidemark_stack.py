"""The Tidemark stack: one per deployment, built from the one stream configuration.

Its resources are ``stacks.archive.ArchiveBuilder``'s, the code behind ``TidemarkArchive`` (which
another CDK app adds to a stack of its own): the same parts, validation and outputs, built
directly in the stack's scope, as they always were, so construct paths -- and with them logical
IDs and the properties CDK derives from paths -- are unchanged (a deployed stack updates in place).
The stack adds its description and cdk-nag's checks over the whole stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import Stack
from constructs import Construct

from stacks.archive import ENV_AGGREGATES_TABLE, MAX_CONFIG_ENV_BYTES, ArchiveBuilder
from stacks.nag import apply_nag
from stacks.paths import PACKAGE_PARENT, ProjectSources
from tidemark.config import TidemarkConfig

__all__ = ["DESCRIPTION", "ENV_AGGREGATES_TABLE", "MAX_CONFIG_ENV_BYTES", "ROOT", "TidemarkStack"]

#: the checkout (or, installed, ``site-packages``): ``ProjectSources.locate`` decides what it holds
ROOT = PACKAGE_PARENT

DESCRIPTION = "Tidemark: exactly-once archive of Kafka/MSK topics into event-hour S3 objects"


class TidemarkStack(ArchiveBuilder, Stack):
    """Everything one ``cdk deploy`` stands up. ``root`` is the repository (asset directories);
    by default the checkout this module is in, or the installed package.

    The parts are the stack's attributes (``stack.archiver``, ``stack.network``, ...) and the
    properties ``TidemarkArchive`` has (``bucket``, ``ledger_table``, ``functions``, ...).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: TidemarkConfig,
        root: Path | ProjectSources | None = None,
        layer_cache: Path | None = None,
        nag: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("description", DESCRIPTION)
        # `cdk destroy` is refused until it is lifted (README: "What destroy keeps"): the stack
        # holds the archive's ledger, whose loss would archive retained records again.
        kwargs.setdefault("termination_protection", True)
        super().__init__(scope, construct_id, **kwargs)
        self._build_archive(self, config=config, root=root, layer_cache=layer_cache, outputs=True, pin_output_ids=False)
        if nag:
            apply_nag(self)
