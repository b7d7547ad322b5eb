"""Wide-batch benchmark: one ESM event whose every record lies in another event hour, end to end
through the real CLI (``tidemark invoke -e EVENT --drain``).

Scenario
    ONE MSK event of ``--records`` (default 9,000) records on topic ``orders`` partition 0; each
    value is a JSON order whose ``created_at`` is a random 32-bit number (``random.Random(seed)
    .randrange(2**32)``: epoch seconds under ``format: auto``, 1970..2106), so the batch spans
    about as many distinct event hours as it has records. The config is ``config/tidemark.yaml``
    with ``streams[0].source.batch_size`` raised to 10,000 (and, with ``--ledger-item-budget``,
    another ``archive.ledger_item_budget``). The writer must accept such a batch in chunks of at
    most ``max_open_buffers`` new buffers, flushing between them, so the partition's ledger item
    never outgrows its budget.

    With ``--spread values`` every record is in ONE event hour but of its own tenant
    (``"tenant": "t-<offset>"``, ``partition_by: [_value.tenant]``, Hive style): the same
    bound, reached through partition values instead of hours. ``--format`` picks the format.

Baseline
    The same number of records through the same command, all in ONE event hour and of one
    tenant (one object).
    ``ratio = wide elapsed / baseline elapsed`` is what the width costs.

Measured
    ``elapsed_s`` is the wall time of the ``tidemark invoke`` subprocess (interpreter start-up,
    the handler, the drain and the CLI's object listing included) against a moto server this
    script starts (one per run, outside the timed region). Afterwards every object is read back
    (gzip JSON lines): ``records_found`` must equal the records sent, with no offset twice, none
    missing and every archived record in its own event hour's folder (``exactly_once``). The
    partition's STATE item is measured at the end (``item_size`` of the stored item; the largest
    one written during the run cannot be read back afterwards) next to the budget.

moto
    Two moto artefacts would otherwise swamp what is measured (and, at 9,000 objects, exhaust the
    machine's memory): every ``TransactWriteItems`` (each ledger commit is one) deep-copies the
    whole table first, to roll back on failure -- O(items committed so far) per commit -- and
    every model instance moto ever creates, those copies included, stays referenced from
    ``BaseModel.instances_tracked``. By default (``--moto patched``) the server is
    ``tidemark.embedded.moto_server``'s, started by this script in a child process with both
    removed: a transaction backs up only the items it touches (and restores them on failure,
    as moto's rollback does), and instances are not tracked. ``--moto plain`` runs the server
    unchanged (``tidemark.embedded.moto_server.moto_server``).

Output
    Progress on stderr; one JSON object on stdout.

Run: ``.venv/bin/python bench/wide_batch.py [--records 9000 --seed 1 --timeout 3000]``; ``--smoke``
(what ``make test`` runs, so the bench cannot rot): 60 records (still more event hours than
``max_open_buffers``, so the batch is accepted in chunks), 300 s per CLI run.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import orjson
import yaml
from boto3.dynamodb.types import Binary, TypeDeserializer

from tidemark.clock import SystemClock
from tidemark.config import load_config, parse_config
from tidemark.config.model import ArchiveSettings
from tidemark.embedded.invoke import InvokeOptions
from tidemark.embedded.moto_server import moto_server, serve
from tidemark.eventtime import hour_path
from tidemark.formats import RenderSpec, format_of
from tidemark.ledger.dynamodb import STATE_SK, item_size
from tidemark.objects.keys import folders_of_key, hour_of_key, positions_of_key
from tidemark.records.esm import EventSource, build_event
from tidemark.records.model import Record
from tidemark.verify import spec_of_key
from tidemark.writer.stream import StreamContext

ROOT = Path(__file__).resolve().parents[1]
CONFIG_PATH = ROOT / "config" / "tidemark.yaml"
ENVELOPE_PATH = ROOT / "events" / "msk-orders.json"
BUCKET = InvokeOptions.bucket  # what `tidemark invoke` provisions and writes to
TABLE = InvokeOptions.table
TOPIC = "orders"
BATCH_SIZE = 10_000
ONE_HOUR_S = 1_795_244_400  # 2026-11-21T07:00:00Z: the baseline's single event hour
PRODUCED_MS = 1_795_248_000_000
#: ``--smoke``: both runs on a small event (60 hours: three chunks of the default 24 open buffers)
SMOKE = {"records": 60, "timeout": 300.0}


def log(message: str) -> None:
    print(f"[wide_batch] {message}", file=sys.stderr, flush=True)


# -- moto ------------------------------------------------------------------------------------


STATS_ENV = "WIDE_BATCH_STATE_STATS"  # where the server child keeps its STATE item statistics


class StateStats:
    """Sizes (``item_size``) of the partition STATE items the server is asked to put: every
    PutItem and every Put of a transaction, landed or refused by its condition."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.puts = 0
        self.total = 0
        self.largest = 0
        self._deserializer = TypeDeserializer()

    def add(self, attributes: dict[str, Any]) -> None:
        if attributes.get("sk") != {"S": STATE_SK}:
            return
        plain = {name: self._deserializer.deserialize(value) for name, value in attributes.items()}
        size = item_size({name: bytes(v) if isinstance(v, Binary) else v for name, v in plain.items()})  # type: ignore[call-overload]
        self.puts += 1
        self.total += size
        if size > self.largest:
            self.largest = size
            self.save()

    def save(self) -> None:
        self.path.write_text(
            json.dumps({"puts": self.puts, "bytes": self.total, "largest": self.largest}), encoding="utf-8"
        )


def patch_moto(stats: StateStats | None = None) -> None:
    """Remove the two moto artefacts described in the module docstring (in the server process);
    with ``stats``, measure every STATE item put."""
    import moto.dynamodb.models as dynamodb_models
    from moto.core.common_models import BaseModel
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    def untracked(cls: type[Any], *_args: Any, **_kwargs: Any) -> Any:
        return super(BaseModel, cls).__new__(cls)

    BaseModel.__new__ = untracked  # type: ignore[method-assign]

    in_transaction = {"on": False}

    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        if in_transaction["on"] and isinstance(value, Table):
            return value  # the backup below replaces moto's whole-table copy
        return copy.deepcopy(value, memo)

    dynamodb_models.copy = types.SimpleNamespace(deepcopy=deepcopy)  # type: ignore[assignment,attr-defined]
    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        for entry in transact_items:
            _kind, op = next(iter(entry.items()))
            table = self.tables.get(op.get("TableName"))
            if table is None:
                continue
            attrs = op.get("Item")
            key = (
                op.get("Key")
                if attrs is None
                else {
                    name: attrs[name] for name in (table.hash_key_attr, table.range_key_attr) if name and name in attrs
                }
            )
            if key:
                current = self.get_item(op["TableName"], key)
                saved.append((op["TableName"], key, None if current is None else current.to_json()["Attributes"]))
        in_transaction["on"] = True
        try:
            original(self, transact_items)
        except BaseException:
            for table_name, key, attributes in reversed(saved):  # moto's rollback, item by item
                if attributes is None:
                    self.delete_item(table_name, key)
                else:
                    self.put_item(table_name, attributes)
            raise
        finally:
            in_transaction["on"] = False

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    if stats is not None:
        original_put = DynamoDBBackend.put_item

        def put_item(self: Any, table_name: str, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            stats.add(item_attrs)
            return original_put(self, table_name, item_attrs, *args, **kwargs)

        DynamoDBBackend.put_item = put_item  # type: ignore[method-assign]


@contextlib.contextmanager
def patched_moto_server(stats: Path) -> Iterator[str]:
    """``tidemark.embedded.moto_server.moto_server`` running this script's ``--serve-moto`` (the
    same server with ``patch_moto`` applied); the STATE item statistics are in the file ``stats``
    once the server has stopped."""
    command = [sys.executable, str(Path(__file__).resolve()), "--serve-moto"]
    with moto_server(command=command, env={STATS_ENV: str(stats)}) as endpoint:
        yield endpoint


# -- scenario --------------------------------------------------------------------------------


def tidemark_cli() -> Path:
    """The venv's console script next to this interpreter (``.venv/bin/tidemark``)."""
    beside = Path(sys.executable).parent / "tidemark"
    return beside if beside.exists() else ROOT / ".venv" / "bin" / "tidemark"


def hour_folder(created_s: int) -> str:
    return datetime.fromtimestamp(created_s, UTC).strftime("%Y/%m/%d/%H")


def tenant(offset: int, spread: str) -> str:
    """The order's tenant: its own with ``--spread values``, one for all otherwise."""
    return f"t-{offset:05d}" if spread == "values" else "t-one"


def order(offset: int, created_s: int, spread: str) -> Record:
    value = orjson.dumps(
        {
            "order_id": f"o-{offset}",
            "customer_id": f"c-{offset % 97}",
            "product_id": f"p-{offset % 13}",
            "price": 12.5,
            "quantity": 1 + offset % 3,
            "created_at": created_s,
            "tenant": tenant(offset, spread),
        }
    )
    return Record(TOPIC, 0, offset, PRODUCED_MS, value, f"o-{offset}".encode())


def wide_times(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2**32) for _ in range(count)]


def one_hour_times(count: int) -> list[int]:
    return [ONE_HOUR_S + offset % 3600 for offset in range(count)]


def write_event(times: list[int], path: Path, spread: str) -> None:
    template = json.loads(ENVELOPE_PATH.read_text(encoding="utf-8"))
    source = EventSource(
        bootstrap_servers=template["bootstrapServers"],
        event_source=template["eventSource"],
        event_source_arn=template.get("eventSourceArn"),
    )
    event = build_event((order(offset, created, spread) for offset, created in enumerate(times)), source)
    path.write_bytes(orjson.dumps(event))


def write_config(path: Path, budget: str | None, fmt: str, spread: str) -> int:
    """The example config with a 10k batch size, the format, partitioned by tenant with
    ``--spread values`` (and optionally another item budget); returns the budget in bytes."""
    data: dict[str, Any] = yaml.safe_load(CONFIG_PATH.read_text(encoding="utf-8"))
    data["streams"][0]["source"]["batch_size"] = BATCH_SIZE
    data["streams"][0]["format"] = {"type": fmt}
    if spread == "values":
        data["streams"][0]["partition_by"] = {"fields": ["_value.tenant"], "style": "keys_and_values"}
    if budget is not None:
        data["archive"]["ledger_item_budget"] = budget
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return int(parse_config(data).archive.ledger_item_budget)


def read_back(s3: Any, times: list[int], config: Path, spread: str) -> dict[str, Any]:
    """Every record of every object (read with its format's reader), checked against what was
    sent: its hour folder, and with ``--spread values`` its tenant's folder."""
    stream = load_config(config).streams[0]
    spec = RenderSpec.decode(StreamContext.build(stream, ArchiveSettings(), SystemClock()).spec)
    errors = RenderSpec.decode(StreamContext.build(stream, ArchiveSettings(), SystemClock()).errors_spec)
    keys = [
        item["Key"]
        for prefix in ("raw/", "errors/")
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        for item in page.get("Contents", [])
    ]

    def records_of(key: str) -> list[tuple[int, int, str, bool]]:
        body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        dead = key.startswith("errors/")
        folder = hour_path(hour_of_key(key))
        object_spec = spec_of_key(key, errors if dead else spec)
        partition = positions_of_key(key)[0]
        found = []
        for envelope in format_of(object_spec).read(body, object_spec.context(partition, key)):
            offset = envelope.offset if envelope.offset is not None else -1
            tenant_folder = f"tenant={tenant(offset, spread)}" if spread == "values" else ""
            placed = folder if folders_of_key(key) == tenant_folder else f"{folder} under {folders_of_key(key)}"
            found.append((envelope.partition if envelope.partition is not None else partition, offset, placed, dead))
        return found

    with ThreadPoolExecutor(max_workers=8) as pool:
        found = [record for records in pool.map(records_of, keys) for record in records]
    copies = Counter(offset for _partition, offset, _folder, _dead in found)
    misfiled = sum(1 for _p, offset, folder, dead in found if not dead and folder != hour_folder(times[offset]))
    return {
        "objects": len(keys),
        "records_found": len(found),
        "duplicated": sum(1 for count in copies.values() if count > 1),
        "missing": sum(1 for offset in range(len(times)) if offset not in copies),
        "unexpected": sum(1 for partition, offset, _f, _d in found if partition != 0 or offset >= len(times)),
        "misfiled": misfiled,
        "dead_lettered": sum(1 for *_rest, dead in found if dead),
        "hours_archived": len({folder for *_rest, folder, dead in found if not dead}),
    }


def state_items(dynamodb: Any) -> list[dict[str, Any]]:
    deserializer = TypeDeserializer()

    def plain(value: Any) -> Any:
        result = deserializer.deserialize(value)
        return bytes(result) if isinstance(result, Binary) else result  # type: ignore[call-overload]

    items = [
        {name: plain(value) for name, value in item.items()}
        for page in dynamodb.get_paginator("scan").paginate(TableName=TABLE)
        for item in page.get("Items", [])
    ]
    return [item for item in items if item["sk"] == STATE_SK]


def run(
    label: str, times: list[int], workdir: Path, config: Path, timeout_s: float, moto: str, spread: str
) -> dict[str, Any]:
    event_path = workdir / f"{label}-event.json"
    write_event(times, event_path, spread)
    log(f"{label}: {len(times)} records, {len({t // 3600 for t in times})} event hours, event {event_path}")
    stats_path = workdir / f"{label}-state-items.json"
    with patched_moto_server(stats_path) if moto == "patched" else moto_server() as endpoint:
        command = [
            str(tidemark_cli()),
            "invoke",
            "-e",
            str(event_path),
            "--drain",
            "--config",
            str(config),
            "--workdir",
            str(workdir / label),
            "--endpoint-url",
            endpoint,
            "--project-dir",
            str(ROOT),
        ]
        with (workdir / f"{label}-stderr.log").open("wb") as errors:
            started = time.perf_counter()
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=errors, cwd=ROOT, timeout=timeout_s)
            elapsed = time.perf_counter() - started
        log(f"{label}: exit code {done.returncode} after {elapsed:.1f} s; reading the archive back")
        try:
            response = json.loads(done.stdout)
        except json.JSONDecodeError:
            response = {"stdout_tail": done.stdout.decode(errors="replace")[-2000:]}
        session = boto3.Session(
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            aws_session_token="testing",
        )
        s3 = session.client("s3", endpoint_url=endpoint)
        dynamodb = session.client("dynamodb", endpoint_url=endpoint)
        found = read_back(s3, times, config, spread)
        states = state_items(dynamodb)
    stats = json.loads(stats_path.read_text(encoding="utf-8")) if stats_path.exists() else {}
    summary = response.get("streams", {}).get("orders", response) if isinstance(response, dict) else response
    result: dict[str, Any] = {
        "elapsed_s": round(elapsed, 3),
        "exit_code": done.returncode,
        **found,
        "state_item_bytes_final": max((item_size(item) for item in states), default=0),
        "state_item_bytes_largest_written": stats.get("largest"),  # None with --moto plain
        "state_item_puts": stats.get("puts"),
        "state_item_bytes_per_object": round(stats["bytes"] / found["objects"]) if stats and found["objects"] else None,
        "open_buffers_final": sum(int(item["open_buffers"]) for item in states),
        "sealed_flushes_final": sum(int(item["sealed_flushes"]) for item in states),
        "quarantined_final": sum(int(item["quarantined_flushes"]) for item in states),
        "handler": summary,
    }
    result["exactly_once"] = done.returncode == 0 and all(
        (
            found["records_found"] == len(times),
            found["duplicated"] == 0,
            found["missing"] == 0,
            found["unexpected"] == 0,
            found["misfiled"] == 0,
        )
    )
    return result


def reported(label: str, action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    result = action()
    log(f"{label}: {json.dumps({k: v for k, v in result.items() if k != 'handler'})}")
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=9000, help="records in the one event (at most 10,000)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random event times")
    parser.add_argument("--ledger-item-budget", default=None, help="e.g. 64KiB (default: the config's)")
    parser.add_argument("--timeout", type=float, default=3000.0, help="seconds allowed per CLI run")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (events, staging, logs)")
    parser.add_argument("--moto", choices=("patched", "plain"), default="patched", help="see the module docstring")
    parser.add_argument(
        "--spread",
        choices=("hours", "values"),
        default="hours",
        help="hours: every record in another event hour; values: one hour, every record of another tenant "
        "(partition_by _value.tenant)",
    )
    parser.add_argument("--format", default="jsonl", help="the stream's format.type (default jsonl)")
    parser.add_argument("--serve-moto", action="store_true", help=argparse.SUPPRESS)  # the server child
    parser.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)  # (its moto_server arguments)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="60 records, 300 s per CLI run (unless given)")
    args = parser.parse_args(argv)
    if args.smoke:  # smaller defaults; options given still win
        parser.set_defaults(**SMOKE)
        args = parser.parse_args(argv)
    if not 1 <= args.records <= BATCH_SIZE:
        parser.error(f"--records must be 1..{BATCH_SIZE}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_moto:
        stats = StateStats(Path(os.environ[STATS_ENV]))
        patch_moto(stats)
        try:
            serve(args.host, args.port)
        finally:
            stats.save()
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="tidemark-wide-"))
    try:
        config = workdir / "tidemark.yaml"
        budget = write_config(config, args.ledger_item_budget, args.format, args.spread)
        times = wide_times(args.records, args.seed) if args.spread == "hours" else one_hour_times(args.records)
        wide = reported("wide", lambda: run("wide", times, workdir, config, args.timeout, args.moto, args.spread))
        one = workdir / "one-value.yaml"
        write_config(one, args.ledger_item_budget, args.format, "hours")
        baseline = reported(
            "baseline",
            lambda: run("baseline", one_hour_times(args.records), workdir, one, args.timeout, args.moto, "one"),
        )
    finally:
        if args.keep:
            log(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "records": args.records,
        "seed": args.seed,
        "moto": args.moto,
        "spread": args.spread,
        "format": args.format,
        "distinct_event_hours": len({created // 3600 for created in times}),
        "distinct_partition_values": args.records if args.spread == "values" else 1,
        "elapsed_s": wide["elapsed_s"],
        "objects": wide["objects"],
        "records_found": wide["records_found"],
        "hours_archived": wide["hours_archived"],
        "state_item_bytes_final": wide["state_item_bytes_final"],
        "state_item_bytes_largest_written": wide["state_item_bytes_largest_written"],
        "ledger_item_budget_bytes": budget,
        "within_budget": (wide["state_item_bytes_largest_written"] or wide["state_item_bytes_final"]) <= budget,
        "exactly_once": wide["exactly_once"],
        "baseline_one_hour_elapsed_s": baseline["elapsed_s"],
        "ratio_wide_to_one_hour": round(wide["elapsed_s"] / baseline["elapsed_s"], 2),
        "wide": wide,
        "baseline_one_hour": baseline,
    }
    print(json.dumps(result), flush=True)
    return 0 if wide["exactly_once"] and baseline["exactly_once"] else 1


if __name__ == "__main__":
    sys.exit(main())
