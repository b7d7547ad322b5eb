"""One-line, actionable errors for the command line."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer

from tidemark.exceptions import TidemarkError

EXIT_FAILED = 1  # the command ran and its check failed
EXIT_ERROR = 2  # the command could not run
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM, as a shell reports SIGINT


@contextmanager
def one_line_errors() -> Iterator[None]:
    try:
        yield
    except TidemarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_ERROR) from None
    except KeyboardInterrupt:  # by now every context manager has stopped what it started
        print("interrupted: every process this command started has been stopped", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED) from None


def progress(command: str, unit: str) -> Callable[[int, int], None] | None:
    """``done/total <unit>`` on stderr, rewritten in place, when stderr is a terminal (reports go
    to stdout, so they stay clean to pipe)."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done >= total else ""
        print(f"\r{command}: {done}/{total} {unit}", end=end, file=sys.stderr, flush=True)

    return show
