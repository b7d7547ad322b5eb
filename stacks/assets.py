"""Helpers shared by the constructs that stage code and run workflows."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct


def tree_hash(root: Path, directories: Iterable[Path], *, salt: Iterable[str] = ()) -> str:
    """A content hash of the source files under ``directories`` (paths relative to ``root``), so an
    asset changes exactly when what it is built from changes; bytecode is left out."""
    digest = hashlib.sha256("\n".join(salt).encode())
    for directory in directories:
        for path in sorted(directory.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                digest.update(path.relative_to(root).as_posix().encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def workflow(scope: Construct, chain: sfn.IChainable, *, timeout: Duration, comment: str) -> sfn.StateMachine:
    """A traced state machine logging every event (without execution data) for a month."""
    return sfn.StateMachine(
        scope,
        "StateMachine",
        definition_body=sfn.DefinitionBody.from_chainable(chain),
        timeout=timeout,
        tracing_enabled=True,
        logs=sfn.LogOptions(
            destination=logs.LogGroup(
                scope, "Executions", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
            ),
            level=sfn.LogLevel.ALL,
            include_execution_data=False,
        ),
        comment=comment,
    )
