"""Shared CLI helpers: turning user-facing errors into one line and exit code 1, the console, and
the options several commands share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from swarmctl.errors import SwarmctlError

console = Console()
err_console = Console(stderr=True)



def option(*param_decls: str, help: str | None = None, **kwargs: Any) -> Any:
    """typer.Option with a plain-text help: brackets such as "[default: ...]" show as written (Typer
    would read them as rich markup)."""
    return typer.Option(*param_decls, help=None if help is None else escape(help), **kwargs)


def argument(*, help: str | None = None, **kwargs: Any) -> Any:
    """typer.Argument with a plain-text help (see :func:`option`)."""
    return typer.Argument(help=None if help is None else escape(help), **kwargs)


RUNS_DIR = Path("runs")  # default folder holding the runs
RunsDir = Annotated[Path, option(help="Folder holding the runs.")]
Device = Annotated[str, option(help="auto, cpu, cuda or cuda:N.")]


def say(text: str) -> None:
    """Print plain text (paths, run names, numbers): brackets in it are shown, never read as markup."""
    console.print(text, markup=False, highlight=False)


@contextmanager
def user_errors() -> Iterator[None]:
    """Print a SwarmctlError as one line on stderr and exit 1; bugs keep their traceback."""
    try:
        yield
    except SwarmctlError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
