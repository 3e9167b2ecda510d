"""What the commands share: options, the console, and the running command's flags for a library message's
backticked parameters (```data_dir```: ``--data-dir``)."""

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
    """Help text with its backticked parameters as flags by the flag rule (no command runs yet: :func:`flag_names`)."""
    return None if text is None else _BACKTICKED.sub(lambda m: "--" + m.group(1).replace("_", "-"), text)


def option(*param_decls: str, help: str | None = None, **kwargs: Any) -> Any:
    return typer.Option(*param_decls, help=_help_flags(help), **kwargs)


def argument(*, help: str | None = None, **kwargs: Any) -> Any:
    return typer.Argument(help=_help_flags(help), **kwargs)


def checked(check: Any) -> Any:
    """"Option values": a callback running the library's ``check(value, flag)``: exit 2 naming the option."""
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
    """"Option values": a number within bounds shown in its help, else exit 2 naming the option (Typer's ``min`` and
    ``max`` take ``8.0`` and ``8_000`` for an ``int``, ``nan`` and ``inf`` for a ``float``)."""
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
    """"Outputs": what was printed fails here, inside the command's work, before its files appear."""
    if sys.stdout is not None:
        sys.stdout.flush()


def stop_if_interrupted(message: str | None) -> None:
    """After `train` or `sweep`: an interrupted run's ``message`` (what was saved, how to go on) ends it, exit 130."""
    if message is not None:
        raise signals.Interrupted(None, message)


def say(text: str) -> None:
    """Plain text, brackets never read as markup; wrapped to a terminal's width, whole lines to a pipe or file."""
    console.print(text, markup=False, highlight=False, soft_wrap=not console.is_terminal)


FIELD_OPTIONS = {"n_tasks": "tasks"}  # config fields whose option has another name, beyond the catalog's


def flag_names(text: str) -> str:
    """"Option values": backticked parameters of the running command and config fields as their flags or metavars."""
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
