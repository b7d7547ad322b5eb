"""One invocation in a fresh process (a cold container), for ``ChildInvoker``.

``invoke`` runs the function's handler with an event file; ``drain`` writes every open buffer
of some partitions through the core writer. Either may be armed with ``TIDEMARK_CRASH_AT``
and then dies at that point with exit code 137 -- for real, with no cleanup of any kind.
Internal: users run ``tidemark invoke``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tidemark.embedded.lambda_runtime import HandlerRef, LocalContext, load_handler
from tidemark.exceptions import ConfigError
from tidemark.runtime import Runtime
from tidemark.sources import PartitionId, partition_of_text


def _drain(stream_name: str, partitions: list[PartitionId]) -> dict[str, Any]:
    runtime = Runtime.from_env()
    try:
        stream = runtime.config.stream(stream_name)
    except KeyError:
        raise ConfigError(f"no stream named {stream_name!r} in the config") from None
    flushed = {p: len(runtime.writer(stream, p).drain().flushes) for p in partitions}
    return {"status": "ok", "flushed": flushed}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--code-dir", type=Path, required=True)
    parser.add_argument("--handler", default="handler.lambda_handler")
    parser.add_argument("--response", type=Path, required=True)
    actions = parser.add_subparsers(dest="action", required=True)
    invoke = actions.add_parser("invoke")
    invoke.add_argument("--event", type=Path, required=True)
    drain = actions.add_parser("drain")
    drain.add_argument("--stream", required=True)
    # a Kafka partition number or a Kinesis shard id
    drain.add_argument("--partition", type=partition_of_text, action="append", default=[])
    args = parser.parse_args(argv)
    if args.action == "invoke":
        handler = load_handler(HandlerRef(args.code_dir, args.handler))
        response = handler(json.loads(args.event.read_text()), LocalContext())
    else:
        response = _drain(args.stream, args.partition)
    args.response.write_text(json.dumps(response))


if __name__ == "__main__":
    main()
