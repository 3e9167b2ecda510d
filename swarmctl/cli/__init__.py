"""The swarmctl command line: one module per command, and :func:`run`, the one place where an exception becomes an exit
code and one line. Imports nothing heavy: the commands load on first use, after :func:`prepare`, without PyTorch."""

from __future__ import annotations

import codecs
import contextlib
import errno
import importlib
import os
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
    """Run the command ``work`` and end it as docs/guarantees.md promises ("Exit codes", "Signals"); ``starting``: the
    commands still load; ``last``: the process ends after it, so signals are ignored from then on."""
    global _state
    state = _state = signals.Interruption(starting)
    running, hook = RUNNING.set(None), sys.unraisablehook
    previous = signals.install(state)
    if previous:  # the main thread: the process's hook is this command's, quiet about an Interrupted dropped
        sys.unraisablehook = lambda args: None if issubclass(args.exc_type, signals.Interrupted) else hook(args)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", SwarmctlWarning)
            shown: set[str] = set()  # a warning said again (a record read once per row) is said once

            def show(message, *args, **kwargs) -> None:
                if (line := f"warning: {_flags(str(message))}") not in shown:
                    shown.add(line)
                    _say(line)

            warnings.showwarning = show
            try:
                try:
                    work()
                    if sys.stdout is not None:
                        sys.stdout.flush()  # what the command left buffered fails here, not at exit
                finally:
                    state.done = True  # the exit code is decided now: a signal from here on is dropped
                status = (SIGNAL, state.line()) if state.signal else (OK, None)  # a signal Python dropped
            except BaseException as exc:
                if (status := _status(exc, state)) is None:
                    raise  # a bug keeps its traceback
            _say(status[1])
    finally:
        sys.unraisablehook = hook
        RUNNING.reset(running)
        if last:
            signals.install(signal.SIG_IGN)  # kept through the teardown, where Python resets a handler's
        else:
            signals.restore(previous)
    return status[0]


def _status(exc: BaseException, state: signals.Interruption) -> tuple[int, str | None] | None:
    """"Exit codes": the code and line for ``exc``, by its kind; None for a bug."""
    typer = sys.modules.get("typer")  # not loaded: no Typer exception either
    if isinstance(exc, KeyboardInterrupt):
        return SIGNAL, state.line(exc)
    if typer is not None and isinstance(exc, typer.Exit):
        return exc.exit_code, None
    if typer is not None and isinstance(exc, typer.TyperException):  # click's usage errors and their kin
        return exc.exit_code, f"error: {_usage_line(exc)}"
    if isinstance(exc, SwarmctlError):
        return USAGE if isinstance(exc, ConfigError) else ERROR, f"error: {_flags(str(exc))}"
    if isinstance(exc, MemoryError):
        return ERROR, "error: out of memory; choose smaller sizes (fewer tasks, points, hidden units or grid locations)"
    if (failed := _stdout_failed(exc)) is not None:
        return ERROR, (f"error: cannot write to standard output ({failed.strerror.lower()}); send it somewhere "
                       "that takes it (a disk with free space, a pipe that is read to the end)")
    return (ERROR, f"error: {describe_os_error(exc)}") if isinstance(exc, OSError) else None


def _usage_line(exc: typer.TyperException) -> str:
    """A usage error in one line and where to read more; a root option after a command says where it goes."""
    ctx, name = getattr(exc, "ctx", None), getattr(exc, "option_name", None)
    own = [p for p in ctx.find_root().command.params if name in p.opts] if ctx is not None and ctx.parent else []
    if own:  # the fix as it works: the option's value, then the command (an eager one, --version, alone)
        root = ctx.find_root().command_path
        value = "" if own[0].is_flag else f" {own[0].metavar or 'VALUE'}"
        command = "" if own[0].is_eager else f" {ctx.command_path[len(root) + 1:]} ..."
        return f"{name} is an option of {root} itself: give it before the command, `{root} {name}{value}{command}`"
    return " ".join(exc.format_message().split()) + (f" (see `{ctx.command_path} --help`)" if ctx is not None else "")


def _flags(text: str) -> str:
    """A library message in one line, its backticked parameters as the running command's flags."""
    from swarmctl.cli._options import flag_names

    return flag_names(" ".join(text.split()))


def _say(line: str | None) -> None:
    """``line`` on stderr; a standard error that cannot take it changes nothing (the exit code still says)."""
    if line is not None and sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


_WRITE_ERRNOS = {errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG}  # what a failed write gives


def _stdout_failed(exc: BaseException) -> OSError | None:
    """"Outputs": a standard stream's failed write behind ``exc`` (an OSError of a write naming no file), or None;
    standard output then goes to /dev/null, so that it cannot fail again at exit."""
    error: BaseException | None = exc
    while error is not None and not (isinstance(error, OSError) and error.errno in _WRITE_ERRNOS):
        error = error.__context__
    if not isinstance(error, OSError) or error.filename is not None or error.strerror is None:
        return None
    with contextlib.suppress(OSError, ValueError, AttributeError):  # None; io.UnsupportedOperation: no descriptor
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd, null = sys.stdout.fileno(), os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    return error


def _escape(exc: UnicodeError) -> tuple[str | bytes, int]:
    """"Terminals": a byte of a name the locale could not decode (PEP 383) written back as that byte, else escaped."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    chunk = exc.object[exc.start:exc.end]
    if all("\udc80" <= c <= "\udcff" for c in chunk):
        return bytes(ord(c) - 0xDC00 for c in chunk), exc.end
    return chunk.encode("ascii", "backslashreplace").decode("ascii"), exc.end


codecs.register_error("swarmctl-escape", _escape)


def prepare() -> None:
    """"Terminals and environment": the standard streams and terminal settings made safe, before anything loads."""
    with contextlib.suppress(OSError):  # no /dev/null to open (a bare container): nothing to fill streams with
        while (fd := os.open(os.devnull, os.O_RDWR)) <= 2:  # a stream closed at start (``cmd >&-``) takes the
            pass  # lowest number free: on /dev/null, no file swarmctl opens takes it (``sys.stdin`` stays None)
        os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError):  # closed, or detached by a test harness
                stream.reconfigure(errors="swarmctl-escape")
    for name, least in {"COLUMNS": 40, "LINES": 1, "TERMINAL_WIDTH": 40}.items():  # 0 and 5 fold every line;
        # Typer cannot even start on TERMINAL_WIDTH=abc: without them, the terminal's width (or 80) is used
        value = os.environ.get(name)
        if value is not None and not (value.strip().isdigit() and int(value) >= least):
            del os.environ[name]


def main(load: Callable[[], Typer] | None = None) -> None:
    """The `swarmctl` program (``load``: another application of swarmctl's kind, run the same way)."""
    sys.exit(run(lambda: _start(load or _load_app), starting=True, last=True))


def _start(load: Callable[[], Typer]) -> None:
    prepare()
    from swarmctl import threads

    start = threads.cpu_times()  # the window over which the other processes' CPU time is measured begins
    app = load()  # loads no PyTorch: the count below is set before it reads its variables
    threads.apply(threads.choose(since=start))
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
