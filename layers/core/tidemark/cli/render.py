"""Drawing the demo for a terminal: progress while it runs, tables and a verdict at the end."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from tidemark.embedded.demo import DemoResult


class RichUI:
    """``DemoUI`` on a rich console: one line per step, a bar per long phase."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress = Progress(
            TextColumn("{task.description:>10}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> RichUI:
        self._progress.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._progress.stop()

    def step(self, text: str) -> None:
        self.console.print(f"[bold]•[/bold] {text}")

    def progress(self, task: str, done: int, total: int) -> None:
        if task not in self._tasks:
            self._tasks[task] = self._progress.add_task(task, total=total)
        self._progress.update(self._tasks[task], completed=done, total=total)


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    return table


def render_result(console: Console, result: DemoResult) -> None:
    data: dict[str, Any] = result.to_dict()
    report = result.verification
    check = data["verification"]

    kinesis = data.get("source") == "kinesis"
    queue = data.get("queue")  # a RabbitMQ source
    partitions = _table(
        "Produced vs archived (read back from S3)" + (", by message id" if queue is not None else ""),
        "shard" if kinesis else "queue partition" if queue is not None else "partition",
        "produced",
        "archived",
        "dead-lettered",
    )
    for partition, row in data["partitions"].items():
        partitions.add_row(partition, str(row["produced"]), str(row["archived"]), str(row["dead_lettered"]))
    partitions.add_row("all", str(check["produced"]), str(check["archived"]), str(check["dead_lettered"]), style="bold")
    console.print(partitions)

    hours = _table("Event hours", "hour (UTC folder)", "objects", "records")
    for hour, objects in data["objects_per_hour"].items():
        hours.add_row(hour, str(objects), str(data["records_per_hour"].get(hour, 0)))
    console.print(hours)
    console.print(f"late records produced: {data['late_produced']} (each filed under its own event hour)")
    tombstones = data["tombstones"]
    if tombstones is not None and tombstones["produced"]:
        replayed = tombstones["replayed"]
        console.print(
            f"tombstones produced: {tombstones['produced']} (null values deleting earlier orders' keys); "
            f"archived as null values: {tombstones['archived']}"
            + ("" if replayed is None else f"; replayed as null values: {replayed}"),
            markup=False,
        )

    if report.dead_letter_reasons:
        reasons = _table("Dead letters (errors/ prefix)", "reason", "records")
        for reason, count in data["dead_letter_reasons"].items():
            reasons.add_row(reason, str(count))
        console.print(reasons)

    delivery = data["delivery"]
    console.print(
        f"delivery: {delivery['batches']} batches (largest {delivery['largest_batch']}), "
        f"{delivery['invocations']} invocations, {delivery['failed_invocations']} failed "
        f"({delivery['crashed_invocations']} killed), {delivery['rebalances']} "
        f"{'shard restarts from a checkpoint' if kinesis else 'reconnects' if queue is not None else 'rebalances'}; "
        f"drain wrote {data['drained_objects']} objects"
    )
    if queue is not None:
        console.print(
            f"queue {queue['queue']!r} on RabbitMQ {queue['broker']}: {queue['published']} messages published "
            f"persistent with publisher confirms ({queue['orders']} orders; {queue['publisher_retries']} published "
            f"twice, as a publisher's retry; {queue['without_message_id']} without a message id), "
            f"{queue['distinct_messages']} distinct",
            markup=False,
        )
        console.print(
            f"acks: {queue['acked']} acked after a successful invocation, {queue['nacked']} nacked and requeued after "
            f"a failed one, {queue['lost_acks']} lost (connection closed, the broker requeued), "
            f"{queue.get('dropped', 0)} dropped unprocessed (too large for an invocation); the broker redelivered "
            f"{queue['redelivered']}; the archiver's dedupe index dropped {queue['duplicates_dropped']} (redeliveries "
            f"and publisher retries, by {queue['dedupe_id']}); {queue['left_in_queue']} left in the queue",
            markup=False,
        )
    for error in delivery["function_errors"]:
        console.print(f"[yellow]function error seen:[/yellow] {error}")
    registry = data.get("schema_registry")
    if registry is not None:
        rejected_by = ", ".join(f"{reason} {count}" for reason, count in registry["reasons"].items())
        console.print(
            f"schema registry: {registry['url']} (subject {registry['subject']}, schema id {registry['schema_id']}); "
            f"the mapping's integration delivered the values as {registry['record_format']}, "
            f"{registry['rejected']} records rejected{' (' + rejected_by + ')' if rejected_by else ''}",
            markup=False,
        )
    if data.get("epochs") is not None:
        epochs = data["epochs"]
        started = ", ".join(f"partition {p}: epoch {e}" for p, e in sorted(epochs["started"].items())) or "none"
        console.print(
            f"topic recreated mid-run: the archiver refused {epochs['refused_invocations']} invocation(s) of the new "
            f"log (nothing dropped); the operator started {started}"
        )
    shards = data.get("shards")
    if shards and shards["closed"]:
        order = "after" if shards.get("parent_before_children") else "[red]NOT after[/red]"
        console.print(
            f"shards: {', '.join(shards['initial'])}; {shards['closed'][0]} split mid-run "
            f"({shards['parent_undelivered_at_split']} of its records still undelivered) into "
            f"{' and '.join(shards['children'])}, read {order} their parent ended"
        )
    if data["chaos"] is not None:
        chaos = data["chaos"]
        points = ", ".join(f"{point} x{count}" for point, count in chaos["crash_points"].items()) or "none"
        console.print(
            f"chaos: {chaos['crashes']} processes killed ({points}); {chaos['not_reached']} armed but finished; "
            f"{chaos['lost_commits']} {'checkpoints' if kinesis else 'acks' if queue is not None else 'commits'} lost"
        )
    sweeper = data["sweeper"]
    completeness = sweeper["completeness"]
    findings = sweeper["reconcile"]["findings"]
    console.print(
        f"sweeper: {sweeper['partitions']} partitions swept ({sweeper['flushed']} objects flushed, "
        f"{sweeper['garbage_deleted']} orphan segments removed, {sweeper['directories_removed']} staging "
        f"directories removed); reconciliation: {sweeper['reconcile']['objects_checked']} objects checked, "
        f"{sum(findings.values())} findings {findings or ''}"
    )
    console.print(
        f"hour completeness: {len(completeness['completed'])} hours complete with manifests, "
        f"{completeness['waiting']} waiting for every partition's event time to pass their end + allowed lateness"
    )
    if data["staging_segments_left"]:
        console.print(
            f"staging: {data['staging_segments_left']} orphaned segment(s) of killed processes, never accepted by "
            "the ledger; removed after archive.segment_grace"
        )
    if data["aggregation"] is not None:
        aggregated = data["aggregation"]
        run = aggregated["run"]
        sample_hour = aggregated["sample"][0]["hour"] if aggregated["sample"] else "-"
        table = _table(
            f"Aggregates in DynamoDB (Spark job: {len(run['hours'])} dirty hours, {run['records']} records, "
            f"{run['duplicates']} duplicates dropped; top rows of hour {sample_hour})",
            "aggregation",
            "group",
            "metrics",
        )
        for row in data["aggregation"]["sample"]:
            group = ", ".join(f"{k}={v}" for k, v in row["group"].items()) or "all"
            metrics = ", ".join(
                f"{k}={v:,.0f}" if float(v).is_integer() else f"{k}={v:,.2f}" for k, v in row["metrics"].items()
            )
            table.add_row(row["aggregation"], group, metrics)
        console.print(table)
        matches = data["aggregation"]["counts_match"]
        console.print(f"aggregate counts equal the produced records: {matches or 'no count(*) metric to check'}")
    console.print(
        f"ledger vs S3: {len(result.ledger_only)} committed but missing, {len(result.s3_only)} unknown to the ledger"
    )
    audit = result.audit
    explained = f", {audit['gaps_explained']} offset gaps Kafka holds no records in" if audit["gaps_explained"] else ""
    console.print(
        f"audit: {_audit_verdict(audit)} ({audit['objects']} objects, "
        f"{audit['records']} records, {audit['partitions']} partitions{explained})"
    )
    for line in audit["findings"][:20]:
        console.print(f"  {line}", markup=False)
    replay = result.replay
    if replay is not None and "not_run" in replay:
        console.print(f"replay: not run ({replay['not_run']})", markup=False)
    elif replay is not None:
        killed = replay["killed"]
        rerun = ""
        if killed is not None:
            how = "finished before the kill" if killed["finished_first"] else f"killed at {killed['held_when_killed']}"
            rerun = f"; a first replay process {how}, the rerun skipped {replay['skipped']} already there"
        faults = ", ".join(
            f"{kind} {replay[kind]['count']}"
            for kind in ("missing", "duplicated", "out_of_order", "different", "unexpected")
            if replay[kind]["count"]
        )
        against = "the archived (registry-decoded) values" if "compared_with" in replay else "the source"
        console.print(
            f"replay into {replay['topic']}: {replay['records']} records, "
            f"{f'equal to {against} record by record' if replay['equal'] else 'DIFFERENT: ' + faults}{rerun}",
            markup=False,
        )
    timings = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in data["timings_s"].items())
    console.print(f"timings: {timings}")
    console.print(f"logs and staging: {result.workdir}")
    verdict = (
        f"lost {check['lost']}, duplicated {check['duplicated']}, misfiled {check['misfiled']}, "
        f"corrupted {check['corrupted']}, unexpected {check['unexpected']}"
    )
    if result.ok:
        console.print(f"[bold green]PASS[/bold green]: {check['produced']} records exactly once ({verdict})")
    else:
        console.print(f"[bold red]FAIL[/bold red]: {verdict}")


def _audit_verdict(audit: dict[str, Any]) -> str:
    if not audit["clean"]:
        return "FINDINGS"
    return (
        "clean" if audit["complete"] else f"no findings, but not proven whole ({audit['unchecked']} ranges not checked)"
    )
