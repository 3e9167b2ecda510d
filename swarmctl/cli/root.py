"""Top-level options: --version, --threads."""

from __future__ import annotations

from typing import Annotated

import typer

from swarmctl import __version__
from swarmctl.cli._app import app
from swarmctl.cli._options import option


def _threads(value: int | None) -> int | None:
    if value is not None:
        from swarmctl import threads

        if value > threads.MAX_COUNT:
            raise typer.BadParameter(f"{value} is more than PyTorch can use (at most {threads.MAX_COUNT}); give "
                                     "at most the number of cores")
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
        option("--threads", min=1, callback=_threads, metavar="N",
               help="CPU threads for PyTorch and the fused kernels [default: the cores free to this process: "
                    "its usable cores less those a high load keeps busy; SWARMCTL_THREADS or OMP_NUM_THREADS "
                    "when set]."),
    ] = None,
) -> None:
    """SWARM mappings: set-equivariant recurrent layers, baselines, and the paper's experiments."""
