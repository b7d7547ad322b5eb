"""``tidemark invoke``: run a function's handler with an event file against the embedded stack.

The no-Docker counterpart of ``sam local invoke``: the handler module is loaded the way Lambda
loads it, with the environment the stack gives it, but S3 and DynamoDB are moto on loopback (or
any endpoint) and the EFS mount is a local directory. Optionally the invocation is followed by
a drain, so the objects the event produces can be looked at right away.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tidemark.config.loader import ENV_JSON, load_config
from tidemark.embedded.aws import local_aws
from tidemark.embedded.esm.invokers import InProcessInvoker, Invocation
from tidemark.embedded.lambda_runtime import HandlerRef, patched_environ
from tidemark.exceptions import MalformedEventError
from tidemark.records.events import parse_event
from tidemark.records.kinesis import is_kinesis_event
from tidemark.records.rabbitmq import is_rabbitmq_event
from tidemark.runtime import Runtime

#: the example configurations (relative to the working directory, like the CLI's paths): the
#: MSK stream's, and the Kinesis stream's that ``events/kinesis-orders.json`` names
KAFKA_CONFIG = Path("config/tidemark.yaml")
KINESIS_CONFIG = Path("config/kinesis.yaml")
RABBITMQ_CONFIG = Path("config/rabbitmq.yaml")


@dataclass(frozen=True)
class InvokeOptions:
    project_dir: Path
    function: str
    event_path: Path
    config_path: Path | None  # None: the example config for the event's source kind (default_config)
    endpoint_url: str | None = None  # default: start moto for this invocation
    moto_port: int = 0
    workdir: Path | None = None  # holds the staging directory; default: a new temporary one
    bucket: str = "tidemark-local-archive"
    table: str = "tidemark-local-ledger"
    drain: bool = False
    verbose: bool = False  # also log a function error's traceback


@dataclass
class InvokeResult:
    invocation: Invocation
    objects: list[dict[str, Any]] = field(default_factory=list)  # what is in the bucket afterwards
    staging_root: Path | None = None


def read_event(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MalformedEventError(f"{path}: cannot read the event ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise MalformedEventError(f"{path}: not valid JSON ({exc})") from None


def default_config(event: Any) -> Path:
    """The example config matching the event: a Kinesis event's stream is not in the MSK one, and
    the archiver refuses records of a stream no config names."""
    if is_rabbitmq_event(event):
        return RABBITMQ_CONFIG
    return KINESIS_CONFIG if is_kinesis_event(event) else KAFKA_CONFIG


def invoke_local(options: InvokeOptions, log: IO[str]) -> InvokeResult:
    handler = HandlerRef.for_function(options.project_dir, options.function).check()
    event = read_event(options.event_path)
    config = load_config(options.config_path or default_config(event))
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="tidemark-invoke-"))
    with contextlib.ExitStack() as stack:
        aws = stack.enter_context(
            local_aws(
                workdir,
                bucket=options.bucket,
                table=options.table,
                endpoint_url=options.endpoint_url,
                port=options.moto_port,
            )
        )
        stack.enter_context(patched_environ({**aws.environment(), ENV_JSON: config.model_dump_json()}))
        invocation = InProcessInvoker(handler, log, print_traceback=options.verbose).invoke(event)
        if invocation.ok and options.drain:
            runtime = Runtime.from_env()
            for batch in parse_event(event):
                stream = config.stream_for_topic(batch.topic, batch.kind)
                if stream is not None:
                    runtime.writer(stream, batch.partition).drain()
        s3 = aws.s3()
        objects = [
            {"key": item["Key"], "size": item["Size"]}
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=aws.bucket)
            for item in page.get("Contents", [])
        ]
        return InvokeResult(invocation, objects, aws.staging_root)
