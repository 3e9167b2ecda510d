"""The Typer application every command module registers with."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

# click's exception base, wherever this Typer takes click from (its own copy since 0.20, click before)
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class _OneLineErrors(TyperGroup):
    """Usage errors (a bad option value, a missing argument) as one line on stderr with exit code 2,
    instead of Typer's usage text and boxed message."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # the help was printed: nothing more to say
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            message = " ".join(exc.format_message().split())
            typer.echo(f"error: {message}{hint}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # a signal outside a command's work
                name = exc.__cause__.args[0] if exc.__cause__.args else "SIGINT"
                typer.echo(f"error: interrupted ({name}); nothing half-written was left behind", err=True)
                sys.exit(130)
            typer.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    name="swarmctl",
    cls=_OneLineErrors,
    help="SWARM mappings: set-equivariant recurrent layers, baselines, and the paper's experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
