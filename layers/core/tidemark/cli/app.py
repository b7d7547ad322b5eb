"""``tidemark``: the command-line entry point (console script ``tidemark = tidemark.cli.app:main``).

Every command turns a Tidemark error into one line on stderr and exit code 2, an interrupt
(Ctrl-C or SIGTERM) into exit code 130 -- in both cases after every process it started is gone.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Annotated

import typer

from tidemark.cli import epoch
from tidemark.cli.abandon import abandon
from tidemark.cli.audit import audit
from tidemark.cli.cost import cost
from tidemark.cli.demo import demo
from tidemark.cli.invoke import invoke
from tidemark.cli.rearchive import rearchive
from tidemark.cli.recover import recover
from tidemark.cli.replay import replay
from tidemark.cli.status import status

app = typer.Typer(
    name="tidemark",
    help="Tidemark: exactly-once archiving of Kafka topics into event-hour S3 objects. "
    "These commands run the real pipeline on this machine, with no AWS account.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tidemark {package_version()}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print tidemark's version and exit."),
    ] = False,
) -> None:
    """Tidemark: exactly-once archiving of Kafka topics into event-hour S3 objects."""


def package_version() -> str:
    """The installed distribution's version (``pyproject.toml``'s ``version``): the one number
    the package, this command and the CHANGELOG's releases use."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tidemark")
    except PackageNotFoundError:  # run from a checkout without installing
        return "unknown (not installed)"


app.command(no_args_is_help=False)(demo)
app.command()(invoke)
app.add_typer(epoch.app, name="epoch")
app.command()(audit)
app.command()(status)
app.command()(replay)
app.command()(rearchive)
app.command()(recover)
app.command()(abandon)
app.command()(cost)


def _terminate(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through every context manager, which stop their processes


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    app()


if __name__ == "__main__":
    main()
