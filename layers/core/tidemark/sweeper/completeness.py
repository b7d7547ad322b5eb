"""Hour completeness: when may a reader treat an event hour as done?

An hour of a stream is complete when, for every partition the sweeper knows of (for a Kinesis
stream: every shard ``ListShards`` names, except closed shards read to their end and idle --
see ``tidemark.sweeper.lineage``),

* nothing of that hour is still staged (no OPEN or SEALED buffer of the hour, either kind), and
* the partition has moved past the hour: its watermark (latest archived event time) is at least
  the hour's end plus ``completeness.allowed_lateness`` -- or the partition is idle (nothing
  staged) and has not accepted anything for ``allowed_lateness`` of processing time after the
  hour's end, so a quiet partition does not hold every hour back forever.

The sweeper then writes ``<manifests_prefix>/<stream>/<yyyy>/<mm>/<dd>/<hh>/manifest-<commits>.json``
listing the hour's committed objects (keys, offsets, counts, digests) and records in the ledger
that this manifest covers ``commits`` objects -- conditionally, so a commit racing the sweep
leaves the hour incomplete until the next one. A late record committed afterwards bumps the
hour's ``commits``: the hour is *reopened* (dirty) and the next sweep writes a new manifest.
Readers take the manifest the ledger's hour mark names (``manifest_key``); older ones stay as
history and are never rewritten.

A time budget (``deadline_ms``, ``tidemark.sweeper.budget``): no manifest is started after it;
the hours left are counted (``deferred``) and the next run completes them, one hour at a time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson
from botocore.exceptions import ClientError

from tidemark.config.model import StreamConfig
from tidemark.eventtime import hour_end_ms, hour_path, iso_utc
from tidemark.ledger.model import CommittedObject, HourMark, PartitionState
from tidemark.objects.writer import precondition_failed
from tidemark.runtime import Runtime
from tidemark.sources import partition_sort_key
from tidemark.sweeper.budget import passed
from tidemark.sweeper.discovery import discover
from tidemark.sweeper.lineage import finished_shards, try_list_shards

logger = logging.getLogger(__name__)


@dataclass
class CompletenessReport:
    completed: list[str] = field(default_factory=list)  # "<stream>/<hour>" newly complete
    reopened: list[str] = field(default_factory=list)  # complete before, dirty now, complete again
    waiting: dict[str, str] = field(default_factory=dict)  # "<stream>/<hour>" -> why not yet
    manifests: list[str] = field(default_factory=list)
    deferred: int = 0  # hours not looked at: the step's deadline had passed (the next run does)

    def summary(self) -> dict[str, Any]:
        return {
            "completed": self.completed,
            "reopened": self.reopened,
            "waiting": len(self.waiting),
            "deferred": self.deferred,
            "manifests": self.manifests,
        }


def manifest_key(prefix: str, stream: str, hour: str, commits: int) -> str:
    """One immutable manifest per ``commits`` value: a slower, overlapping sweep can never
    overwrite a newer manifest with an older object list."""
    return f"{prefix}/{stream}/{hour_path(hour)}/manifest-{commits:08d}.json"


def why_not_past(hour_end: int, lateness: int, state: PartitionState, now_ms: int) -> str | None:
    """``None`` if the partition has moved past the hour, else the reason it has not."""
    if state.watermark_ms >= hour_end + lateness:
        return None
    if state.idle and now_ms >= hour_end + lateness and now_ms - state.updated_ms >= lateness:
        return None
    return f"partition {state.partition} watermark {iso_utc(max(state.watermark_ms, 0))}"


def manifest_body(
    stream: StreamConfig, mark: HourMark, objects: list[CommittedObject], states: list[PartitionState], now_ms: int
) -> bytes:
    ordered = sorted(objects, key=lambda item: (item.kind, partition_sort_key(item.partition), item.first))
    # Kinesis sequence numbers overflow JSON's integers in most readers: written as strings there.
    position = str if stream.source.shape.envelope.position_is_text else int
    return orjson.dumps(
        {
            "stream": stream.name,
            "hour": mark.hour,
            "timezone": stream.event_time.timezone,
            "commits": mark.commits,
            "completed_at": iso_utc(now_ms),
            "allowed_lateness_s": stream.completeness.allowed_lateness_ms // 1000,
            "watermarks": {str(state.partition): state.watermark_ms for state in states},
            "records": {kind: sum(item.records for item in ordered if item.kind == kind) for kind in ("raw", "errors")},
            "objects": [
                {
                    "key": item.key,
                    "kind": item.kind,
                    "partition": item.partition,
                    "first_offset": position(item.first),
                    "last_offset": position(item.last),
                    "records": item.records,
                    "size": item.size,
                    "sha256": item.sha256,
                }
                for item in ordered
            ],
        },
        option=orjson.OPT_INDENT_2,
    )


class CompletenessTracker:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def run(self, now_ms: int, deadline_ms: int | None = None) -> CompletenessReport:
        report = CompletenessReport()
        for stream in self.runtime.config.streams:
            self.stream(stream, now_ms, report, deadline_ms)
        return report

    def stream(
        self, stream: StreamConfig, now_ms: int, report: CompletenessReport, deadline_ms: int | None = None
    ) -> None:
        ledger = self.runtime.ledger
        pending = [mark for mark in ledger.hour_marks(stream.name) if not mark.complete]
        if not pending:
            return
        # at least one manifest per stream and run, whatever the time: a backlog never stops a
        # stream's completeness
        written_before = len(report.manifests)
        shards = None  # a Kinesis stream's shards: every one counts, finished ones are told apart
        if stream.source.stream_arn is not None:
            shards = try_list_shards(self.runtime.kinesis, stream.source.stream_arn)
        refs = discover(self.runtime, stream.name, shards or ())
        states = [ledger.load(stream.name, ref.partition) for ref in refs]
        finished: set[str] = set()
        if shards:
            finished = finished_shards(shards, {s.partition: s for s in states if isinstance(s.partition, str)})
        lateness = stream.completeness.allowed_lateness_ms
        for index, mark in enumerate(pending):
            if len(report.manifests) > written_before and passed(self.runtime.clock.now_ms(), deadline_ms):
                report.deferred += len(pending) - index
                return
            name = f"{stream.name}/{mark.hour}"
            end = hour_end_ms(mark.hour, stream.event_time.timezone)
            blockers: list[str] = []
            for state in states:
                if state.holds_hour(mark.hour):  # open, sealed or quarantined: never complete over it
                    blockers.append(f"partition {state.partition} still stages the hour")
                elif state.partition in finished and state.idle:
                    continue  # a closed shard read to its end: it can never move past anything again
                elif (reason := why_not_past(end, lateness, state, now_ms)) is not None:
                    blockers.append(reason)
            if blockers:
                report.waiting[name] = "; ".join(blockers[:3])
                continue
            self._complete(stream, mark, states, now_ms, report)

    def _complete(
        self,
        stream: StreamConfig,
        mark: HourMark,
        states: list[PartitionState],
        now_ms: int,
        report: CompletenessReport,
    ) -> None:
        objects = self.runtime.ledger.committed_objects(stream.name, mark.hour)
        key = manifest_key(self.runtime.config.sweeper.manifests_prefix, stream.name, mark.hour, mark.commits)
        # A manifest is never rewritten: overlapping executions (or a retried step) that complete
        # the same hour at the same commits would write other bytes (its times) under one key.
        # The bucket policy refuses a manifest put without If-None-Match (stacks/storage.py), so
        # the header is what lets this write through at all. On 412 the manifest of these commits
        # is there already, listing the same objects: a commit adds its object and bumps
        # ``commits`` in one transaction, so every run that completes the hour at this value saw
        # the same object list, and ``record_manifest`` below records it only if ``commits`` has
        # not moved since (one written after a later commit is never recorded). Only its times
        # differ, so it is taken as done, unread (the step's role may only put manifests).
        try:
            self.runtime.objects.client.put_object(
                Bucket=self.runtime.objects.bucket,
                Key=key,
                Body=manifest_body(stream, mark, objects, states, now_ms),
                ContentType="application/json",
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if not precondition_failed(exc):
                raise
            logger.info("manifest already written for these commits", extra={"hour": mark.hour, "manifest": key})
        if not self.runtime.ledger.record_manifest(mark, key, now_ms):
            logger.info("hour got a new object while completing; next sweep", extra={"hour": mark.hour})
            return
        name = f"{stream.name}/{mark.hour}"
        (report.reopened if mark.reopened else report.completed).append(name)
        report.manifests.append(key)
        logger.info(
            "hour complete",
            extra={"stream": stream.name, "hour": mark.hour, "objects": len(objects), "manifest": key},
        )
