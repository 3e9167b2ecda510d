"""Top-level options: --version, --threads."""

from __future__ import annotations

from typing import Annotated

import typer

from swarmctl import __version__, threads
from swarmctl.cli._app import app
from swarmctl.cli._options import number, option


def _threads(value: int | None) -> int | None:
    if value is not None:
        threads.apply(threads.choose(value))
    return value


def _version(value: bool) -> None:
    if value:
        typer.echo(f"swarmctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    threads: Annotated[
        int | None,
        number(int, "--threads", low=1, high=threads.MAX_COUNT, callback=_threads, metavar="N",
               help="CPU threads for PyTorch and the fused kernels [default: the cores free to this process: "
                    "its usable cores less those a high load keeps busy; SWARMCTL_THREADS or OMP_NUM_THREADS "
                    "when set]."),
    ] = None,
) -> None:
    """SWARM mappings: set-equivariant recurrent layers, baselines, and the paper's experiments."""
