"""The operator of the embedded stack: answers the ``PositionResets`` alarm as the runbook says.

In AWS, an archiver that meets positions no redelivery explains (here: a topic recreated
mid-run) fails its invocations, the mapping retries, an alarm fires, and a person runs
``tidemark epoch start``. The demo puts that person in the loop as an invoker wrapper: on the
first refused invocation it starts a new epoch for every partition of the recreated topic, at
offset 0 (where a recreated topic begins), and lets the mapping's retry go through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidemark.config.model import StreamConfig
from tidemark.embedded.esm.invokers import Invocation, Invoker
from tidemark.runtime import Runtime

REFUSED = "tidemark epoch start"  # every PositionResetsError message names the command


@dataclass
class EpochOperator:
    inner: Invoker
    stream: StreamConfig
    partitions: list[int]
    reason: str = "topic recreated"
    refused: int = 0  # invocations the archiver refused before the operator acted
    epochs: dict[int, int] = field(default_factory=dict)  # partition -> epoch started

    def invoke(self, event: dict[str, Any]) -> Invocation:
        result = self.inner.invoke(event)
        if not result.ok and REFUSED in (result.error or ""):
            self.refused += 1
            if not self.epochs:
                runtime = Runtime.from_env()
                for partition in self.partitions:
                    start = runtime.writer(self.stream, partition).start_epoch(0, reason=self.reason)
                    self.epochs[partition] = start.epoch
        return result
