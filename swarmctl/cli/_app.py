"""The Typer application every command registers with: click's plain help at the terminal's width, arguments named
in upper case, every command run by :func:`swarmctl.cli.run`; public Typer API only (command classes by ``cls=``)."""

from __future__ import annotations

import re
import shutil
import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from swarmctl.cli import RUNNING, prepare, run
from swarmctl.errors import USAGE

_BRACED = re.compile(r"^\{(.*)\}")  # Typer's mark of a required argument in the usage line: it is bare
_OPTIONAL_MANY = re.compile(r"^\[([^\]]*)\]\.\.\.$")


class _Command(TyperCommand):
    """Every command: its arguments as ``RUN``, ``[RUN]`` or ``RUN...``, its context known while it runs (RUNNING)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name == "argument" and param.metavar is None:
                param.metavar = param.name.upper() if param.name else None

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
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
        RUNNING.set(ctx)  # also for the message of the error that ends it (run resets it)
        return super().invoke(ctx)


class _Typer(typer.Typer):
    """The application: its commands are :class:`_Command` unless one names another class."""

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(name, cls=cls or _Command, **kwargs)


class _OneLineErrors(TyperGroup):
    """The application: ``app()`` runs :meth:`start` through :func:`swarmctl.cli.run`; no arguments: help, exit 2."""

    def main(self, args: Any = None, prog_name: str | None = None, **extra: Any) -> Any:
        sys.exit(run(lambda: self.start(args, prog_name, **extra)))

    def start(self, args: Any = None, prog_name: str | None = None, **extra: Any) -> None:
        """Parse ``args`` (the command line's when None) and run the command; errors are raised, for run."""
        prepare()  # the streams and terminal settings made safe first (also in a test's process)
        extra.setdefault("terminal_width", shutil.get_terminal_size().columns - 2)  # the help fills the terminal
        with self.make_context(prog_name or self.name, sys.argv[1:] if args is None else list(args), **extra) as ctx:
            self.invoke(ctx)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            typer.echo(ctx.get_help(), err=True)
            raise typer.Exit(USAGE)
        return super().parse_args(ctx, args)


# its help is root's (cli/root.py); rich_markup_mode None: click's plain help (descriptions in a column of their
# own, switches without a type)
app = _Typer(name="swarmctl", cls=_OneLineErrors, no_args_is_help=True, add_completion=False,
             pretty_exceptions_enable=False, rich_markup_mode=None)
