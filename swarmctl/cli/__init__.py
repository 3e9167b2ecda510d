"""The swarmctl command line: one module per command, each a thin wrapper over a library function."""

from swarmctl.cli import (  # noqa: F401  (each module registers one command)
    cluster,
    eval,
    gen_data,
    models,
    plot_entropy,
    report,
    sample,
    shuffle_variance,
    sweep,
    train,
)
from swarmctl.cli import main as _main  # noqa: F401  (registers --version)
from swarmctl.cli._app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
