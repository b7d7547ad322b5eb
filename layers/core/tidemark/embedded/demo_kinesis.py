"""The demo's Kinesis source: a stream on moto, the producer, a shard split mid-run, and the
local Kinesis event source mapping.

The split is driven by the script, between two runs of the same mapping (which keeps its
iterators and checkpoints across them, as a running ESM does):

1. put the first half of the orders and archive until about half of them are checkpointed;
2. split the shard with the most records still undelivered, at the midpoint of its hash range:
   it closes with records the mapping has not delivered yet;
3. put the other half -- the keys of the split range now land in the two children;
4. archive to the end. The mapping must finish the parent before it reads either child; the
   report says whether it did (from the order of the invocations), and which shards were split.
"""

from __future__ import annotations

import bisect
import contextlib
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidemark.embedded.aws import LocalAws
from tidemark.embedded.demo_common import DemoError, DemoOptions, DemoUI, Feed, FeedContext
from tidemark.embedded.demo_kafka import batch_limits
from tidemark.embedded.esm.kinesis_mapping import KinesisEventSourceMapping, KinesisMappingConfig
from tidemark.embedded.kinesis_stream import StreamRef, create_stream, kinesis_client, put_orders, split_shard
from tidemark.sources import KINESIS
from tidemark.verify import ExpectedRecord


class Checkpointed:
    """How many of the expected records a mapping's checkpoints cover (sequence numbers are not
    contiguous, so a shard's count is found by bisection, not by subtraction)."""

    def __init__(self) -> None:
        self._positions: dict[str, list[int]] = defaultdict(list)

    def add(self, expected: list[ExpectedRecord]) -> None:
        for item in expected:
            bisect.insort(self._positions[str(item.partition)], item.offset)

    @property
    def total(self) -> int:
        return sum(len(positions) for positions in self._positions.values())

    def ends(self) -> dict[str, int]:
        """Each shard's last expected sequence number (what the mapping must checkpoint)."""
        return {shard: positions[-1] for shard, positions in self._positions.items() if positions}

    def done(self, checkpoints: Mapping[str, int], shard: str | None = None) -> int:
        shards = [shard] if shard is not None else list(self._positions)
        return sum(bisect.bisect_right(self._positions[s], checkpoints.get(s, -1)) for s in shards)

    def pending(self, checkpoints: Mapping[str, int], shard: str) -> int:
        return len(self._positions[shard]) - self.done(checkpoints, shard)


def parent_before_children(deliveries: list[tuple[str, int, int]], parent: str, children: list[str]) -> bool:
    """Whether every invocation with records of ``parent`` came before the first one of a child."""
    shards = [shard for shard, _first, _last in deliveries]
    last_parent = max((i for i, shard in enumerate(shards) if shard == parent), default=-1)
    first_child = min((i for i, shard in enumerate(shards) if shard in children), default=len(shards))
    return last_parent < first_child


class KinesisRunner:
    kind = KINESIS

    def __init__(self, options: DemoOptions, ui: DemoUI) -> None:
        for given, option in (
            (options.bootstrap_servers, "--bootstrap-servers"),
            (options.broker_port, "--broker-port"),
            (options.recreate_topic, "--recreate-topic"),
        ):
            if given:
                raise DemoError(f"{option} is for Kafka sources; the Kinesis demo's stream lives on moto")
        self.options = options
        self.ui = ui
        self.endpoint = ""

    def start(self, stack: contextlib.ExitStack, workdir: Path) -> str:
        return "starting moto (S3 + DynamoDB + Kinesis)"

    def connect(self, aws: LocalAws) -> None:
        self.endpoint = aws.endpoint

    def feed(self, context: FeedContext) -> Feed:
        options, stream, orders, ui = context.options, context.stream, context.orders, self.ui
        assert stream.source.stream_arn is not None  # a kinesis source has one
        ref = StreamRef.of_arn(stream.source.stream_arn)
        client = kinesis_client(self.endpoint, ref.region)
        ui.step(f"creating Kinesis stream {ref.name!r} ({options.shards} shards); putting {len(orders)} orders")
        initial = create_stream(client, ref, options.shards)
        split = options.split and len(orders) >= 2
        first = orders[: len(orders) // 2] if split else orders
        expected = put_orders(client, ref, first, on_progress=lambda n: ui.progress("produce", n, len(orders)))
        progress = Checkpointed()
        progress.add(expected)
        context.lap("produce")

        ui.step("archiving through the local Kinesis event source mapping" + (" with chaos" if options.chaos else ""))
        config = KinesisMappingConfig(
            stream.source.stream_arn,
            limits=batch_limits(options, stream),
            # The workload is put before the mapping starts, so it reads from the beginning
            # whatever the stream's starting_position (LATEST would see nothing).
            starting_position="TRIM_HORIZON",
        )
        mapping = KinesisEventSourceMapping(
            config,
            client,
            context.invoker,
            lose_checkpoint=context.chaos.lose_commit if options.chaos else (lambda: False),
            on_delivered=lambda _r, _i: ui.progress("archive", progress.done(mapping.checkpoints), len(orders)),
        )
        shards: dict[str, Any] = {"initial": initial, "closed": [], "children": []}
        with mapping:
            if split:
                mapping.run(lambda: progress.done(mapping.checkpoints) >= len(expected) // 2)
                context.lap("archive")
                open_shards = [s for s in initial if s not in shards["closed"]]
                parent = max(open_shards, key=lambda s: progress.pending(mapping.checkpoints, s))
                undelivered = progress.pending(mapping.checkpoints, parent)
                ui.step(
                    f"splitting {parent} mid-run ({undelivered} of its records not yet delivered): it closes, "
                    "and the rest of the orders go to its two children"
                )
                children = split_shard(client, ref, parent)
                context.lap("split")
                done = len(first)
                rest = put_orders(
                    client,
                    ref,
                    orders[done:],
                    on_progress=lambda n: ui.progress("produce", done + n, len(orders)),
                )
                expected += rest
                progress.add(rest)
                context.lap("produce")
                shards.update(
                    closed=[parent],
                    children=children,
                    split_after_records=len(first),
                    parent_undelivered_at_split=undelivered,
                    children_records=sum(1 for item in rest if item.partition in children),
                )
            mapping.run(lambda: mapping.caught_up(progress.ends()))
        ui.progress("archive", len(orders), len(orders))
        context.lap("archive")
        if shards["closed"]:
            shards["parent_before_children"] = parent_before_children(
                mapping.deliveries, shards["closed"][0], shards["children"]
            )
        return Feed(ref.arn, expected, mapping.stats, shards=shards)
