"""The swarmctl command line: one module per command, each a thin wrapper over a library function, and
:func:`run`, the one place where an exception becomes an exit code and one line. The command modules import
no PyTorch (their help comes from :mod:`swarmctl.catalog`); ``app`` is loaded on first use."""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
import warnings
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from swarmctl import signals
from swarmctl.errors import ERROR, OK, SIGNAL, USAGE, ConfigError, SwarmctlError, SwarmctlWarning, describe_os_error

if TYPE_CHECKING:  # typer itself takes a while to import: after the handler
    import typer
    from typer.main import Typer

# the context of the command running now (its parameters name the flags in messages), None outside one
RUNNING: ContextVar[typer.Context | None] = ContextVar("swarmctl_command", default=None)
_state = signals.Interruption()  # the signal handling of the command running now


def continue_with(command: str) -> None:
    """The command line that continues the running command, for its message if a signal stops it."""
    _state.hint = command


def run(work: Callable[[], object], *, starting: bool = False, last: bool = False) -> int:
    """Run ``work`` (a command: its options parsed, its work, its output), its end as docs/guarantees.md
    promises: an exception becomes an exit code and one line on stderr (:func:`_status`; a bug keeps its
    traceback), and while ``work`` runs SIGINT and SIGTERM raise :class:`swarmctl.signals.Interrupted` (one
    Python drops, inside a ``__del__``, still ends it with 130). Library warnings print as one line each.
    ``starting``: the commands still load; ``last``: the process ends after it, and the signals are then
    ignored, so that its teardown keeps the exit code (else the handlers found before are back)."""
    global _state
    state = _state = signals.Interruption(starting)
    running, hook = RUNNING.set(None), sys.unraisablehook
    previous = signals.install(state.handle)
    if previous:  # the main thread: the process's hook is this command's
        sys.unraisablehook = state.unraisable(hook)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", SwarmctlWarning)
            warnings.showwarning = _show_warning
            try:
                try:
                    work()
                    if sys.stdout is not None:
                        sys.stdout.flush()  # what the command left buffered fails here, not at exit
                finally:
                    state.done = True  # the exit code is decided now: a signal from here on is dropped
            except BaseException as exc:
                status = _status(exc, state)
                if status is None:
                    raise
                code, line = status
            else:
                code, line = (SIGNAL, state.line()) if state.signal else (OK, None)
            _say(line)
    finally:
        sys.unraisablehook = hook
        RUNNING.reset(running)
        if last:
            signals.install(signal.SIG_IGN)  # kept through the teardown, where Python resets a handler's
        else:
            signals.restore(previous)
    return code


def _status(exc: BaseException, state: signals.Interruption) -> tuple[int, str | None] | None:
    """The exit code and line for ``exc``; None for a bug."""
    typer = sys.modules.get("typer")  # not loaded: no Typer exception either
    if isinstance(exc, KeyboardInterrupt):
        return SIGNAL, state.line(exc)
    if typer is not None and isinstance(exc, typer.Exit):
        return exc.exit_code, None
    if typer is not None and isinstance(exc, typer.TyperException):  # click's usage errors and their kin
        from swarmctl.cli._app import usage_line

        return exc.exit_code, f"error: {usage_line(exc)}"
    if isinstance(exc, SwarmctlError):
        return USAGE if isinstance(exc, ConfigError) else ERROR, f"error: {_flags(str(exc))}"
    if isinstance(exc, MemoryError):
        return ERROR, "error: out of memory; choose smaller sizes (fewer tasks, points, hidden units or grid locations)"
    from swarmctl.cli._streams import stdout_failed, stdout_line

    failed = stdout_failed(exc)
    if failed is not None:
        return ERROR, f"error: {stdout_line(failed)}"
    return (ERROR, f"error: {describe_os_error(exc)}") if isinstance(exc, OSError) else None


def _flags(text: str) -> str:
    """A library message in one line, its backticked parameters as the running command's flags."""
    from swarmctl.cli._options import flag_names

    return flag_names(" ".join(text.split()))


def _show_warning(message: Warning | str, *args: Any, **kwargs: Any) -> None:
    _say(f"warning: {_flags(str(message))}")


def _say(line: str | None) -> None:
    """``line`` on stderr; a standard error that cannot take it changes nothing (the exit code still says)."""
    if line is not None and sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


def main(load: Callable[[], Typer] | None = None) -> None:
    """The `swarmctl` program (``load``: another application of swarmctl's kind, run the same way)."""
    sys.exit(run(lambda: _start(load or _load_app), starting=True, last=True))


def _start(load: Callable[[], Typer]) -> None:
    from swarmctl.cli._streams import prepare

    prepare()  # closed streams reopened, any text printable, a usable terminal width: before anything loads
    from swarmctl import threads

    start = threads.cpu_times()  # the window over which the other processes' CPU time is measured begins
    app = load()  # loads no PyTorch: the count below is set before it reads its variables
    threads.apply(threads.choose(since=start))  # the cores free to this process now
    from typer.main import get_command

    group = get_command(app)
    _state.starting = False
    group.start()  # type: ignore[attr-defined]


# the modules that register a command each with the application (root: --version and --threads)
COMMANDS = ("cluster", "eval", "gen_data", "models", "plot_entropy", "report", "root", "sample", "shuffle_variance",
            "sweep", "train")


def _load_app() -> Typer:
    for name in COMMANDS:
        importlib.import_module(f"swarmctl.cli.{name}")
    from swarmctl.cli._app import app

    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _load_app()
    raise AttributeError(f"module 'swarmctl.cli' has no attribute {name!r}")


__all__ = ["app", "main", "run"]
