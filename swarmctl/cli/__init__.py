"""The swarmctl command line: one module per command, each a thin wrapper over a library function.

:func:`main` is the `swarmctl` program. It installs its SIGINT/SIGTERM handler before the commands load,
so that a signal during start-up ends with the same one-line message and exit code 130 as one during a
command (not a bare exit 143, or a traceback from inside an import). The command modules import no
PyTorch (their help comes from :mod:`swarmctl.catalog`); a command loads the library, which takes seconds,
when it runs. ``app``, the Typer application with every command, is loaded on first use.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

from swarmctl import signals

if TYPE_CHECKING:  # typer itself takes a while to import: after the handler
    from typer.main import Typer


def _load_app() -> Typer:
    from swarmctl.cli import (  # noqa: F401  (each module registers one command)
        campaign,
        cluster,
        eval,
        gen_data,
        models,
        plot_entropy,
        report,
        root,  # --version
        sample,
        shuffle_variance,
        sweep,
        train,
    )
    from swarmctl.cli._app import app

    return app


def _stopped_while_loading(signum: int, frame: Any) -> None:
    """Nothing is written while the commands load: say so and end the process at once."""
    if sys.stderr is not None:
        with contextlib.suppress(OSError):
            sys.stderr.write(f"error: {signals.starting_line(signals.name(signum))}\n")
            sys.stderr.flush()
    os._exit(signals.EXIT_CODE)


def main() -> None:
    from swarmctl.cli._streams import prepare

    prepare()  # closed streams reopened, any text printable, a usable terminal width: before anything loads
    from swarmctl import threads

    threads.apply(threads.choose())  # the cores free to this process, before PyTorch reads its variables
    signals.install(_stopped_while_loading)
    app = _load_app()
    signals.install(signals.Interruption().handle)  # parsing the options, printing a result: nothing half-written
    app()


def __getattr__(name: str) -> Any:
    if name == "app":
        return _load_app()
    raise AttributeError(f"module 'swarmctl.cli' has no attribute {name!r}")


__all__ = ["app", "main"]
