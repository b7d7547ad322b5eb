"""Helpers shared by the constructs that stage code and run workflows."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

#: parts of the core package that run on a laptop only (the embedded runner and the CLI import
#: moto, Kafka clients and Typer): never shipped to Lambda or EMR
CORE_LOCAL_ONLY = ("embedded", "cli")


@dataclass(frozen=True)
class ShippedPackage:
    """A Python package as it is shipped: its source files, bytecode and ``leave_out`` aside
    (names of entries directly under the package)."""

    directory: Path
    leave_out: tuple[str, ...] = ()

    def files(self) -> list[Path]:
        return [
            path
            for path in sorted(self.directory.rglob("*"))
            if path.is_file()
            and "__pycache__" not in path.parts
            and path.suffix != ".pyc"
            and path.relative_to(self.directory).parts[0] not in self.leave_out
        ]

    def copy_into(self, target: Path) -> None:
        """Copy the shipped files to ``target/<package name>/``."""
        for path in self.files():
            destination = target / self.directory.name / path.relative_to(self.directory)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)


def tree_hash(packages: Iterable[ShippedPackage], *, salt: Iterable[str] = ()) -> str:
    """A content hash of what ``packages`` ship, so an asset changes exactly when what it is built
    from changes."""
    digest = hashlib.sha256("\n".join(salt).encode())
    for package in packages:
        for path in package.files():
            digest.update(f"{package.directory.name}/{path.relative_to(package.directory).as_posix()}".encode())
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
