"""What the commands share: the options several of them take, the console, and the running command's
flags in messages (a library message names a parameter in backticks, ```data_dir```; the CLI prints the flag)."""

from __future__ import annotations

import math
import re
import sys
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from swarmctl import signals
from swarmctl.cli import RUNNING
from swarmctl.config import SEED_RANGE, check_device
from swarmctl.errors import SwarmctlError


class _Console(Console):
    def on_broken_pipe(self) -> None:  # rich's own silences the console and exits without a word
        raise  # the BrokenPipeError being handled: swarmctl.cli.run names it


console = _Console()
err_console = _Console(stderr=True)
_BACKTICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")


def _help_flags(text: str | None) -> str | None:
    """Help text with its backticked parameters as flags (```data_dir``` as ``--data-dir``): help is built
    before any command runs, so by the flag rule, not by a command's parameters (:func:`flag_names`)."""
    return None if text is None else _BACKTICKED.sub(lambda m: "--" + m.group(1).replace("_", "-"), text)


def option(*param_decls: str, help: str | None = None, **kwargs: Any) -> Any:
    return typer.Option(*param_decls, help=_help_flags(help), **kwargs)


def argument(*, help: str | None = None, **kwargs: Any) -> Any:
    return typer.Argument(help=_help_flags(help), **kwargs)


def checked(check: Any) -> Any:
    """An option callback running ``check(value, flag)`` for a value whose check is the library's (a device
    name, a choice among names known at run time); its ConfigError becomes a usage error (exit 2) naming
    the option."""
    def callback(param: typer.CallbackParam, value: Any) -> Any:
        if value is not None:
            flag = max((o for o in param.opts if o.startswith("--")), key=len, default=param.name or "value")
            try:
                check(value, flag)
            except SwarmctlError as exc:
                raise typer.BadParameter(str(exc).replace(f"`{flag}`", flag).replace(f"`{param.name}`", flag)) from None
        return value
    return callback


_WHOLE = re.compile(r"\s*[+-]?[0-9]+\s*")


def number(kind: type, *param_decls: str, help: str | None = None, low: float | None = None,
           high: float | None = None, above: bool = False, **kwargs: Any) -> Any:
    """A numeric option, its bounds shown in its help, and any other value a usage error (exit 2) naming the
    option: our parser, as Typer's own ``min``/``max`` take ``8.0`` and ``8_000`` for an ``int`` and ``inf`` for
    a ``float`` (Typer 0.29), and cannot exclude ``low`` itself (``above``)."""
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


count = partial(number, int, low=1)  # a whole number of at least 1 (or ``low``)
seed_option = partial(number, int, low=SEED_RANGE[0], high=SEED_RANGE[1])  # what NumPy and torch take
positive_number = partial(number, float, low=0, above=True)

RUNS_DIR = Path("runs")  # default folder holding the runs
RunsDir = Annotated[Path, option(help="Folder holding the runs.")]
Device = Annotated[str, option(help="auto, cpu, cuda or cuda:N.", callback=checked(lambda name, _: check_device(name)))]
Force = Annotated[bool, option("--force", help="Replace the command's files in an existing --out folder.")]


def flush_output() -> None:
    """Push what was printed to standard output, so that a stream that cannot take it (a full disk, a closed
    pipe) fails here, inside the command's work, before its files appear."""
    if sys.stdout is not None:
        sys.stdout.flush()


def stop_if_interrupted(message: str | None) -> None:
    """After `train` or `sweep`: an interrupted run's ``message`` (where it was saved, how to continue) ends
    the command, exit 130."""
    if message is not None:
        raise signals.Interrupted(None, message)


def say(text: str) -> None:
    """Print plain text (paths, run names, numbers): brackets in it are shown, never read as markup. A
    terminal gets it wrapped to its width; a pipe or a file gets each line whole (a path never broken)."""
    console.print(text, markup=False, highlight=False, soft_wrap=not console.is_terminal)


FIELD_OPTIONS = {"n_tasks": "tasks"}  # config fields whose option has another name, beyond the catalog's


def flag_names(text: str) -> str:
    """``text`` with every backticked parameter of the running command (```force```) written as its flag
    (``--force``; ``no_NAME``: a switch's off side, ``--no-NAME``; an argument: its metavar, ``RUN``), a
    config field as its option's flag (```dim_hidden```: ``--hidden``); other backticked words as they are."""
    ctx = RUNNING.get()
    if "`" not in text or ctx is None:
        return text
    names: dict[str, str] = {}
    for param in ctx.command.params:
        if param.param_type_name == "argument":
            names[str(param.name)] = param.metavar or str(param.name).upper()
        for name, opts in ((param.name, param.opts), (f"no_{param.name}", param.secondary_opts)):
            longs = [o for o in opts if o.startswith("--")]
            if longs:
                names[str(name)] = max(longs, key=len)
    from swarmctl.catalog import catalog

    fields = {h["field"]: h["option"] for h in catalog()["hyperparameters"]} | FIELD_OPTIONS
    for field, option_name in fields.items():
        if field not in names and option_name in names:
            names[field] = names[option_name]
    return _BACKTICKED.sub(lambda m: names.get(m.group(1), m.group(0)), text)
