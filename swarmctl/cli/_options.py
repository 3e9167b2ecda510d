"""Shared CLI helpers: turning user-facing errors into one line and exit code 1, the console, and
the options several commands share."""

from __future__ import annotations

import contextlib
import importlib
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
from swarmctl.cli._streams import stdout_failed, stdout_line
from swarmctl.config import SEED_RANGE, check_device, check_finite, check_positive
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
    """typer.Option with a plain-text help: brackets such as "[default: ...]" show as written (Typer
    would read them as rich markup); backticked parameters show as flags (:func:`help_flags`)."""
    return typer.Option(*param_decls, help=None if help is None else escape(help_flags(help)), **kwargs)


def argument(*, help: str | None = None, **kwargs: Any) -> Any:
    """typer.Argument with a plain-text help (see :func:`option`)."""
    return typer.Argument(help=None if help is None else escape(help_flags(help)), **kwargs)


def checked(check: Any) -> Any:
    """An option callback running ``check(value, flag)`` (``flag``: the option's, e.g. ``--temperature``, for
    the message); a ConfigError becomes a usage error (exit 2)."""
    def callback(param: typer.CallbackParam, value: Any) -> Any:
        if value is not None:
            flag = max((o for o in param.opts if o.startswith("--")), key=len, default=param.name or "value")
            try:
                check(value, flag)
            except SwarmctlError as exc:
                raise typer.BadParameter(flag_names(str(exc).replace(f"`{flag}`", flag))) from None
        return value
    return callback


finite = checked(lambda v, flag: check_finite(flag, v))  # floats: no nan or inf
positive = checked(lambda v, flag: check_positive(flag, v))  # finite floats > 0
device_name = checked(lambda v, flag: check_device(v))


def seed_option(help: str, **kwargs: Any) -> Any:
    """A seed option: an integer NumPy and torch accept (0 .. 2^32 - 1)."""
    return option(help=help, min=SEED_RANGE[0], max=SEED_RANGE[1], **kwargs)


def float_option(*param_decls: str, help: str | None = None, **kwargs: Any) -> Any:
    """A float option that refuses nan and inf (exit 2)."""
    return option(*param_decls, help=help, callback=finite, **kwargs)


RUNS_DIR = Path("runs")  # default folder holding the runs
RunsDir = Annotated[Path, option(help="Folder holding the runs.")]
Device = Annotated[str, option(help="auto, cpu, cuda or cuda:N.", callback=device_name)]


def flush_output() -> None:
    """Push everything printed so far to standard output, so that a stream that cannot take it (a full
    disk, a closed pipe) fails here, inside the command's work, before its files appear."""
    if sys.stdout is not None:
        sys.stdout.flush()


def say(text: str) -> None:
    """Print plain text (paths, run names, numbers): brackets in it are shown, never read as markup. A
    terminal gets it wrapped to its width; a pipe or a file gets each line whole (a path never broken)."""
    console.print(text, markup=False, highlight=False, soft_wrap=not console.is_terminal)


USAGE_EXIT = 2  # a bad option value or combination (click's code for usage errors)


# Library messages name an option by its parameter or config field in backticks (`force`, `dim_hidden`);
# the fields whose option has another name, beyond the model hyper-parameters of the catalog:
FIELD_OPTIONS = {"n_tasks": "tasks"}
_BACKTICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")


def _click_context() -> Any:
    """The running command's click context (Typer's own copy of click, or click), None outside a command."""
    base = next(c for c in typer.Context.__mro__ if c.__name__ == "Context" and c is not typer.Context)
    module = importlib.import_module(base.__module__.rsplit(".", 1)[0] + ".globals")
    return module.get_current_context(silent=True)


def command_flags() -> dict[str, str]:
    """The running command's parameters by name: an option's longest flag (``--runs-dir``; ``no_NAME``: a
    switch's off side, ``--no-NAME``), an argument's metavar (``RUN``), and each config field whose option
    has another name mapped to that option's flag."""
    ctx = _click_context()
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
        except ConfigError as exc:
            _error(" ".join(str(exc).split()))
            raise typer.Exit(USAGE_EXIT) from None
        except SwarmctlError as exc:
            _error(" ".join(str(exc).split()))
            raise typer.Exit(1) from None
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
