"""Shared CLI helpers: turning user-facing errors into one line and exit code 1, and the console."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console

from swarmctl.errors import SwarmctlError

console = Console()
err_console = Console(stderr=True)


@contextmanager
def user_errors() -> Iterator[None]:
    """Print a SwarmctlError as one line on stderr and exit 1; bugs keep their traceback."""
    try:
        yield
    except SwarmctlError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
