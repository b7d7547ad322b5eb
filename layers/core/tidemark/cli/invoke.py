"""``tidemark invoke``: a function with an event file against the embedded stack."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from tidemark.cli.errors import EXIT_FAILED, one_line_errors
from tidemark.embedded.invoke import InvokeOptions, invoke_local


def invoke(
    event: Annotated[
        Path,
        typer.Option(
            "--event", "-e", help="Event JSON file, e.g. events/msk-orders.json (as for sam local invoke -e)."
        ),
    ],
    function: Annotated[
        str, typer.Argument(help="Function to run: a directory under functions/ (its handler.lambda_handler).")
    ] = "archiver",
    config: Annotated[
        Path | None,
        typer.Option(
            help="Stream configuration the function gets. Default: config/kinesis.yaml for a Kinesis event "
            "(eventSource aws:kinesis), config/rabbitmq.yaml for an Amazon MQ one (aws:rmq), config/tidemark.yaml "
            "for any other."
        ),
    ] = None,
    drain: Annotated[
        bool,
        typer.Option(help="Afterwards, write every open buffer of the event's partitions to S3 and list the objects."),
    ] = False,
    endpoint_url: Annotated[
        str | None,
        typer.Option(help="Use this S3/DynamoDB endpoint (e.g. a running moto server) instead of starting moto."),
    ] = None,
    moto_port: Annotated[int, typer.Option(help="Port for the moto server; 0 picks a free one.")] = 0,
    workdir: Annotated[
        Path | None,
        typer.Option(help="Directory for the staging root (the EFS mount); default: a new temporary directory."),
    ] = None,
    project_dir: Annotated[Path, typer.Option(help="Project root holding functions/.")] = Path("."),
    verbose: Annotated[
        bool, typer.Option("--verbose", help="If the function fails, also print its traceback on stderr.")
    ] = False,
) -> None:
    """Run a Lambda handler with an event file against the embedded stack (no Docker, no AWS).

    The no-Docker counterpart of `sam local invoke`: S3 and DynamoDB are moto on loopback, the
    EFS mount is a local directory. The handler's response is printed on stdout as JSON; its logs
    and metrics (EMF) go to stderr. Exit code 1 if the function failed, with its error as one
    {"errorMessage": ...} line on stdout (and its traceback on stderr with --verbose).
    """
    with one_line_errors():
        options = InvokeOptions(
            project_dir=project_dir.resolve(),
            function=function,
            event_path=event,
            config_path=config,
            endpoint_url=endpoint_url,
            moto_port=moto_port,
            workdir=workdir,
            drain=drain,
            verbose=verbose,
        )
        result = invoke_local(options, sys.stderr)
    if not result.invocation.ok:
        print(json.dumps({"errorMessage": result.invocation.error}), flush=True)
        raise typer.Exit(EXIT_FAILED)
    print(json.dumps(result.invocation.response, indent=2), flush=True)
    print(f"staging root: {result.staging_root}", file=sys.stderr)
    for item in result.objects:
        print(f"s3://{options.bucket}/{item['key']}  ({item['size']} bytes)", file=sys.stderr)
