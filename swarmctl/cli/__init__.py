"""The swarmctl command line: one module per command, each a thin wrapper over a library function."""

from swarmctl.cli import eval, gen_data, models, train  # noqa: F401  (each registers a command)
from swarmctl.cli import main as _main  # noqa: F401  (registers --version)
from swarmctl.cli._app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
