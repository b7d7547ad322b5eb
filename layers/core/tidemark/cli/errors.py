"""One-line, actionable errors for the command line."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer

from tidemark.exceptions import TidemarkError

EXIT_FAILED = 1  # the command ran and its check failed
EXIT_ERROR = 2  # the command could not run


@contextmanager
def one_line_errors() -> Iterator[None]:
    try:
        yield
    except TidemarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_ERROR) from None
