"""Top-level options: --version."""

from __future__ import annotations

from typing import Annotated

import typer

from swarmctl import __version__
from swarmctl.cli._app import app
from swarmctl.cli._options import option


def _version(value: bool) -> None:
    if value:
        typer.echo(f"swarmctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """SWARM mappings: set-equivariant recurrent layers, baselines, and the paper's experiments."""
