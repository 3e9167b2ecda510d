"""Shared CLI helpers: turning user-facing errors into one line and exit code 1, the console, and
the options several commands share."""

from __future__ import annotations

import contextlib
import math
import re
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from swarmctl import signals
from swarmctl.cli._app import RUNNING
from swarmctl.cli._streams import stdout_failed, stdout_line
from swarmctl.config import SEED_RANGE, check_device
from swarmctl.errors import ConfigError, SwarmctlError, SwarmctlWarning, describe_os_error


class _Console(Console):
    """A rich console whose broken pipe is an error like any other failed write (rich's own handling
    silences the console for the rest of the process and exits without a word)."""

    def on_broken_pipe(self) -> None:
        raise  # the BrokenPipeError being handled: user_errors names it


console = _Console()
err_console = _Console(stderr=True)


_PARAMETER = re.compile(r"`([a-z][a-z0-9_]*)`")


def help_flags(text: str) -> str:
    """A help text from the library (the catalog's) with its backticked parameters (```data_dir```) written as
    flags (``--data-dir``): help is built before any command runs, so by the flag rule, not a command's table."""
    return _PARAMETER.sub(lambda m: "--" + m.group(1).replace("_", "-"), text)


def option(*param_decls: str, help: str | None = None, **kwargs: Any) -> Any:
    """typer.Option whose help's backticked parameters show as flags (:func:`help_flags`)."""
    return typer.Option(*param_decls, help=None if help is None else help_flags(help), **kwargs)


def argument(*, help: str | None = None, **kwargs: Any) -> Any:
    """typer.Argument whose help's backticked parameters show as flags (:func:`help_flags`)."""
    return typer.Argument(help=None if help is None else help_flags(help), **kwargs)


def checked(check: Any) -> Any:
    """An option callback running ``check(value, flag)`` for a value whose check is the library's (a device
    name, a choice among names known at run time); its ConfigError becomes a usage error (exit 2) naming
    the option. Numbers are checked by :func:`number`."""
    def callback(param: typer.CallbackParam, value: Any) -> Any:
        if value is not None:
            flag = max((o for o in param.opts if o.startswith("--")), key=len, default=param.name or "value")
            try:
                check(value, flag)
            except SwarmctlError as exc:
                raise typer.BadParameter(str(exc).replace(f"`{flag}`", flag).replace(f"`{param.name}`", flag)) from None
        return value
    return callback


device_name = checked(lambda value, flag: check_device(value))
_WHOLE = re.compile(r"\s*[+-]?[0-9]+\s*")


class Number:
    """The parser of a numeric option (Typer's ``parser=``): a whole number in digits for ``int`` (Typer's
    own conversion takes ``8.0`` and ``8_000``), a finite number for ``float``, within ``low``..``high``
    (``low`` itself excluded when ``above``). A value outside is a usage error (exit 2) naming the option."""

    def __init__(self, kind: type, low: float | None = None, high: float | None = None, *, above: bool = False):
        self.kind, self.low, self.high, self.above = kind, low, high, above

    def __call__(self, text: Any) -> Any:
        if not isinstance(text, str):  # a default
            return text
        if self.kind is int and not _WHOLE.fullmatch(text):
            raise typer.BadParameter(f"give a whole number such as 8, got {text!r}")
        try:
            value = self.kind(text)
        except ValueError:
            raise typer.BadParameter(f"give a number such as 0.5, got {text!r}") from None
        if not math.isfinite(value):
            raise typer.BadParameter(f"give a finite number, got {text}")
        low, high = self.low, self.high
        if (low is not None and (value <= low if self.above else value < low)) or (high is not None and value > high):
            raise typer.BadParameter(f"must be {' and '.join(_bounds(low, high, self.above))}, got {text.strip()}")
        return value


def _bounds(low: float | None, high: float | None, above: bool) -> list[str]:
    """``low`` and ``high`` as a reader reads them: ``>= 1``, ``> 0``, ``<= 4294967295``."""
    return ([f"{'>' if above else '>='} {low:g}"] if low is not None else []) + \
        ([f"<= {high:g}" if isinstance(high, float) else f"<= {high}"] if high is not None else [])


def number(kind: type, *param_decls: str, help: str | None = None, low: float | None = None,
           high: float | None = None, above: bool = False, **kwargs: Any) -> Any:
    """A numeric option: its value checked by :class:`Number`, its bounds shown in its help."""
    bounds = _bounds(low, high, above)
    shown = f"{help} [{', '.join(bounds)}]" if bounds and help else help
    return option(*param_decls, help=shown, parser=Number(kind, low, high, above=above), **kwargs)


def count(help: str, low: int = 1, **kwargs: Any) -> Any:
    """A whole-number option of at least ``low``."""
    return number(int, help=help, low=low, **kwargs)


def seed_option(help: str, **kwargs: Any) -> Any:
    """A seed option: an integer NumPy and torch accept (0 .. 2^32 - 1)."""
    return number(int, help=help, low=SEED_RANGE[0], high=SEED_RANGE[1], **kwargs)


def positive_number(help: str, **kwargs: Any) -> Any:
    """A finite float option > 0."""
    return number(float, help=help, low=0, above=True, **kwargs)


Force = Annotated[bool, option("--force", help="Replace the command's files in an existing --out folder.")]


RUNS_DIR = Path("runs")  # default folder holding the runs
RunsDir = Annotated[Path, option(help="Folder holding the runs.")]
Device = Annotated[str, option(help="auto, cpu, cuda or cuda:N.", callback=device_name)]


def flush_output() -> None:
    """Push everything printed so far to standard output, so that a stream that cannot take it (a full
    disk, a closed pipe) fails here, inside the command's work, before its files appear."""
    if sys.stdout is not None:
        sys.stdout.flush()


def stop_if_interrupted(message: str | None) -> None:
    """After `train` or `sweep` (:func:`swarmctl.runs.finish_runs`): for an interrupted run, ``message`` (where
    it was saved and how to continue) on stderr and exit 130."""
    if message is not None:
        err_console.print(message, markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(signals.EXIT_CODE)


def say(text: str) -> None:
    """Print plain text (paths, run names, numbers): brackets in it are shown, never read as markup. A
    terminal gets it wrapped to its width; a pipe or a file gets each line whole (a path never broken)."""
    console.print(text, markup=False, highlight=False, soft_wrap=not console.is_terminal)


# Library messages name an option by its parameter or config field in backticks (`force`, `dim_hidden`);
# the fields whose option has another name, beyond the model hyper-parameters of the catalog:
FIELD_OPTIONS = {"n_tasks": "tasks"}
_BACKTICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")


def command_flags() -> dict[str, str]:
    """The running command's parameters by name: an option's longest flag (``--runs-dir``; ``no_NAME``: a
    switch's off side, ``--no-NAME``), an argument's metavar (``RUN``), and each config field whose option
    has another name mapped to that option's flag."""
    ctx = RUNNING.get()
    if ctx is None:
        return {}
    names: dict[str, str] = {}
    for param in ctx.command.params:
        if param.name is None:
            continue
        if getattr(param, "param_type_name", "") == "argument":
            names[param.name] = getattr(param, "metavar", None) or param.name.upper()
        else:
            longs = [o for o in param.opts if o.startswith("--")]
            if longs:
                names[param.name] = max(longs, key=len)
            offs = [o for o in getattr(param, "secondary_opts", ()) if o.startswith("--")]
            if offs:  # a switch's off side: `no_standardize` is --no-standardize
                names["no_" + param.name] = max(offs, key=len)
    from swarmctl.catalog import catalog

    fields = {h["field"]: h["option"] for h in catalog()["hyperparameters"]} | FIELD_OPTIONS
    for field, option_name in fields.items():
        if field not in names and option_name in names:
            names[field] = names[option_name]
    return names


def flag_names(text: str) -> str:
    """``text`` with every backticked parameter of the running command (```force```) written as its flag
    (``--force``); other backticked words stay as they are."""
    if "`" not in text:
        return text
    names = command_flags()
    return _BACKTICKED.sub(lambda m: names.get(m.group(1), m.group(0)), text)


def _error(text: str) -> None:
    text = flag_names(text)
    with contextlib.suppress(OSError):  # a standard error that cannot take it: the exit code still says
        err_console.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    err_console.print(f"[yellow]warning:[/] {escape(flag_names(' '.join(str(message).split())))}", highlight=False,
                      soft_wrap=True)


@contextmanager
def user_errors() -> Iterator[signals.Interruption]:
    """Run a command's work so that every failure the user can act on ends in one line on stderr: a
    ConfigError (an option value wrong in itself, see :mod:`swarmctl.errors`) exits 2 like a value Typer
    refuses, any other SwarmctlError or an OSError exits 1, MemoryError 1, SIGINT or SIGTERM 130
    (temporary files removed on the way out; the yielded :class:`swarmctl.signals.Interruption`'s ``hint``,
    when the command set it, says how to continue). A signal whose exception Python had to drop (raised
    inside a weakref callback) still stops the command with exit 130 once the work returns, instead of being
    swallowed.
    Warnings of the library (a damaged run skipped) print as one line each. Bugs keep their traceback."""
    state = signals.Interruption()
    with ExitStack() as stack:
        stack.enter_context(signals.handled(state.handle))
        if threading.current_thread() is threading.main_thread():
            stack.callback(setattr, sys, "unraisablehook", sys.unraisablehook)
            sys.unraisablehook = state.unraisable(sys.unraisablehook)
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("always", SwarmctlWarning)
        warnings.showwarning = _show_warning
        try:
            yield state
        except SwarmctlError as exc:
            _error(" ".join(str(exc).split()))
            raise typer.Exit(2 if isinstance(exc, ConfigError) else 1) from None  # 2: as click's usage errors
        except OSError as exc:
            failed = stdout_failed(exc)
            _error(stdout_line(failed) if failed is not None else describe_os_error(exc))
            raise typer.Exit(1) from None
        except MemoryError:
            _error("out of memory; choose smaller sizes (fewer tasks, points, hidden units or grid locations)")
            raise typer.Exit(1) from None
        except KeyboardInterrupt as exc:
            _error(signals.interrupted_line(signals.signal_of(exc), state.hint))
            raise typer.Exit(signals.EXIT_CODE) from None
        if state.signal is not None:  # raised where Python could only drop it: stop now
            _error(signals.interrupted_line(state.signal, state.hint))
            raise typer.Exit(signals.EXIT_CODE)
