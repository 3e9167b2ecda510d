"""What the commands share: the options several of them take, the console, and the running command's
flags in messages."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from swarmctl import signals
from swarmctl.cli import RUNNING
from swarmctl.config import SEED_RANGE, check_device
from swarmctl.errors import SwarmctlError


class _Console(Console):
    """A rich console whose broken pipe is an error like any other failed write (rich's own handling
    silences the console for the rest of the process and exits without a word)."""

    def on_broken_pipe(self) -> None:
        raise  # the BrokenPipeError being handled: swarmctl.cli.run names it


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


def number(kind: type, *param_decls: str, help: str | None = None, low: float | None = None,
           high: float | None = None, above: bool = False, **kwargs: Any) -> Any:
    """A numeric option, its bounds shown in its help: a whole number in digits for ``int`` (Typer's own
    conversion takes ``8.0`` and ``8_000``), a finite number for ``float`` (Typer's takes ``nan``), within
    ``low``..``high`` (``low`` itself excluded when ``above``, which Typer's bounds cannot say); any other
    value is a usage error (exit 2) naming the option."""
    bounds = ([] if low is None else [f"{'>' if above else '>='} {low:g}"]) + ([] if high is None else [f"<= {high}"])

    def parse(text: Any) -> Any:
        if not isinstance(text, str):  # a default
            return text
        if kind is int and not _WHOLE.fullmatch(text):
            raise typer.BadParameter(f"give a whole number such as 8, got {text!r}")
        try:
            value = kind(text)
        except ValueError:
            raise typer.BadParameter(f"give a number such as 0.5, got {text!r}") from None
        if not math.isfinite(value):
            raise typer.BadParameter(f"give a finite number, got {text}")
        if (low is not None and (value <= low if above else value < low)) or (high is not None and value > high):
            raise typer.BadParameter(f"must be {' and '.join(bounds)}, got {text.strip()}")
        return value

    shown = f"{help} [{', '.join(bounds)}]" if bounds and help else help
    return option(*param_decls, help=shown, parser=parse, **kwargs)


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
    """After `train` or `sweep` (:func:`swarmctl.runs.finish_runs`): for an interrupted run, its ``message``
    (where it was saved and how to continue) ends the command, exit 130."""
    if message is not None:
        raise signals.Interrupted(None, message)


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
        if param.name is not None and param.param_type_name == "argument":
            names[param.name] = param.metavar or param.name.upper()
        elif param.name is not None:
            for name, opts in ((param.name, param.opts), ("no_" + param.name, param.secondary_opts)):  # --no-NAME
                longs = [o for o in opts if o.startswith("--")]
                if longs:
                    names[name] = max(longs, key=len)
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
