"""The Typer application every command module registers with: click's plain help (each paragraph wrapped
at the terminal's width, descriptions in a column of their own), errors one line each. Public Typer API
only: command classes given by ``cls=``, Typer's exceptions."""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
from contextvars import ContextVar
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from swarmctl import signals
from swarmctl.cli._streams import stdout_failed, stdout_line, tolerant_streams, usable_terminal_size

_BRACED = re.compile(r"^\{(.*)\}")  # Typer's mark of a required argument in the usage line: it is bare
_OPTIONAL_MANY = re.compile(r"^\[([^\]]*)\]\.\.\.$")
# the context of the command running now (its parameters name the flags in messages), None outside one
RUNNING: ContextVar[typer.Context | None] = ContextVar("swarmctl_command", default=None)


class _Command(TyperCommand):
    """Every command: its arguments named in upper case (``RUN``; ``[RUN]`` when optional, ``RUN...`` for
    several), its context known while it runs (:data:`RUNNING`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name == "argument" and param.metavar is None:
                param.metavar = param.name.upper() if param.name else None

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        """Each argument as a usage line shows it: ``RUN``, ``[RUN]``, ``RUN...``, ``[RUN...]``."""
        return [_OPTIONAL_MANY.sub(r"[\1...]", _BRACED.sub(r"\1", piece))
                for piece in super().collect_usage_pieces(ctx)]

    def format_options(self, ctx: typer.Context, formatter: Any) -> None:
        """The arguments by their names alone (``RUN...``, not ``RUN <list[str]>``), then the options."""
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.param_type_name == "argument":
                sections["Arguments"].append((param.metavar + ("..." if param.nargs != 1 else ""), record[1]))
            elif record is not None:
                sections["Options"].append(record)
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def invoke(self, ctx: typer.Context) -> Any:
        token = RUNNING.set(ctx)
        try:
            return super().invoke(ctx)
        finally:
            RUNNING.reset(token)


class _Typer(typer.Typer):
    """The application: its commands are :class:`_Command` unless one names another class."""

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(name, cls=cls or _Command, **kwargs)


# options of an earlier version and what takes their place (told instead of click's guesses)
RETIRED = {"--amp": "--step amp", "--compile": "--step compile", "--triton": "--step triton",
           "--cuda-graphs": "--step graphs"}


class _OneLineErrors(TyperGroup):
    """Usage errors (a bad option value, a missing argument) as one line on stderr with exit code 2,
    instead of Typer's usage text and boxed message; a standard output that cannot be written (a full
    disk, a closed pipe) as one line with exit code 1; a signal outside a command's work as one line with
    exit code 130. The streams and terminal settings are made safe first (:mod:`swarmctl.cli._streams`)."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        tolerant_streams()
        usable_terminal_size()
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            if sys.stdout is not None and not rv:
                sys.stdout.flush()  # what a command that worked left buffered fails here, not at exit
        except typer.TyperException as exc:  # click's usage errors and their kin
            _say_error(f"error: {self._one_line(exc)}")
            sys.exit(exc.exit_code)
        except typer.Abort:
            _say_error("aborted")
            sys.exit(1)
        except (OSError, SystemExit) as exc:
            failed = stdout_failed(exc)
            if failed is None:
                raise
            _say_error(f"error: {stdout_line(failed)}")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("terminal_width", shutil.get_terminal_size().columns - 2)  # the help fills the terminal
        with _signal_in_one_line():
            return super().make_context(*args, **kwargs)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """No arguments at all: the help on stderr and exit code 2, as click's ``no_args_is_help`` means it."""
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            _say_error(ctx.get_help())
            raise typer.Exit(2)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        with _signal_in_one_line():
            return super().invoke(ctx)

    def _one_line(self, exc: typer.TyperException) -> str:
        """The error's message in one line, and where to read more; an option of swarmctl itself given
        after a command (``--threads``) says where it goes."""
        ctx = getattr(exc, "ctx", None)
        name = getattr(exc, "option_name", None)
        own = [p for p in self.params if name in getattr(p, "opts", ())] if ctx is not None and ctx.parent else []
        if own:
            root = ctx.find_root().command_path
            value = "" if own[0].is_flag else f" {own[0].metavar or 'VALUE'}"
            command = "" if own[0].is_eager else f" {ctx.command_path[len(root) + 1:]} ..."  # --version: alone
            return f"{name} is an option of {root} itself: give it before the command, `{root} {name}{value}{command}`"
        if name in RETIRED:  # no command has such an option: the error says there is no such option
            return f"No such option: {name}; since version 0.2.0 the step mode is one option: {RETIRED[name]}"
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        return " ".join(exc.format_message().split()) + hint


@contextlib.contextmanager
def _signal_in_one_line() -> Any:
    """A signal while the options are parsed or outside a command's own handling (while it loads PyTorch,
    say) ends with the one line and exit 130 (Typer would exit 130 without a word). A command that handled
    its signal exits through ``typer.Exit``, which passes."""
    try:
        yield
    except KeyboardInterrupt as exc:
        _say_error(f"error: {signals.interrupted_line(signals.signal_of(exc))}")
        raise typer.Exit(signals.EXIT_CODE) from None


def _say_error(text: str) -> None:
    """One line on stderr; a standard error that cannot take it changes nothing (the exit code still says)."""
    with contextlib.suppress(OSError):
        typer.echo(text, err=True)


app = _Typer(
    name="swarmctl",
    cls=_OneLineErrors,
    help="SWARM mappings: set-equivariant recurrent layers, baselines, and the paper's experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: descriptions in a column of their own, switches without a type
)
