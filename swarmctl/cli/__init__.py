"""The swarmctl command line: one module per command, each a thin wrapper over a library function.

:func:`main` is the `swarmctl` program. It installs its SIGINT/SIGTERM handler before the commands load,
so that a signal during start-up ends with the same one-line message and exit code 130 as one during a
command (not a bare exit 143, or a traceback from inside an import). The command modules import no
PyTorch (their help comes from :mod:`swarmctl.catalog`); a command loads the library, which takes seconds,
when it runs. ``app``, the Typer application with every command, is loaded on first use.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

from swarmctl import signals

if TYPE_CHECKING:  # typer itself takes a while to import: after the handler
    from typer.main import Typer


def _load_app() -> Typer:
    from swarmctl.cli import (  # noqa: F401  (each module registers one command)
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
    atexit.register(signals.ignore)  # registered first, so run last: the teardown after it saves nothing
    from swarmctl import threads

    start = threads.cpu_times()  # the window over which the other processes' CPU time is measured begins
    signals.install(_stopped_while_loading)
    app = _load_app()  # loads no PyTorch: the count below is set before it reads its variables
    threads.apply(threads.choose(since=start))  # the cores free to this process now
    signals.install(signals.Interruption().handle)  # parsing the options, printing a result: nothing half-written
    try:
        app()
    except SystemExit as done:
        signals.install(_finished(done.code))
        raise


def _finished(code: object) -> signals.Handler:
    """The handler once the command has ended and printed its last line: the interpreter's teardown (over
    half a second with PyTorch loaded) has nothing left to save, so a signal ends the process at once with
    the command's own exit code, not the bare 143 of a signal's default action (and after the exit handlers,
    where Python restores that action, the signals are ignored)."""
    status = 0 if code is None else code if isinstance(code, int) else 1

    def stop(signum: int, frame: Any) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                if stream is not None:
                    stream.flush()
        os._exit(status)

    return stop


def __getattr__(name: str) -> Any:
    if name == "app":
        return _load_app()
    raise AttributeError(f"module 'swarmctl.cli' has no attribute {name!r}")


__all__ = ["app", "main"]
