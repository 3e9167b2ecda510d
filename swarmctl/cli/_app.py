"""The Typer application every command module registers with."""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from swarmctl import signals
from swarmctl.cli._streams import stdout_failed, stdout_line, tolerant_streams, usable_terminal_size

# click's exception base, wherever this Typer takes click from (its own copy since 0.20, click before)
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


# A line that keeps its own line in a help text: a list item, or an indented (code) line.
_LIST_ITEM = re.compile(r"(?:[-*+]|[0-9]+[.)])\s")


def reflow(text: str | None) -> str | None:
    """``text`` (a docstring) with each paragraph's lines joined, so that the terminal wraps it at its own
    width: a docstring is broken at the source's column, and Typer keeps those breaks. Paragraph breaks
    (blank lines) stay; so do list items (``- ``, ``* ``, ``1. ``: a line that continues one, indented or
    not, joins it), indented lines (code), paragraphs marked ``\\b`` and everything after ``\\f``."""
    if not text:
        return text
    head, cut, tail = inspect.cleandoc(text).partition("\f")
    paragraphs = []
    for paragraph in head.split("\n\n"):
        if paragraph.startswith("\b"):
            paragraphs.append(paragraph)
            continue
        lines: list[str] = []
        kind = ""  # of the last line kept: "prose", "item" or "code"
        for line in paragraph.split("\n"):
            if not line.strip():
                continue
            if _LIST_ITEM.match(line):
                lines.append(line.rstrip())
                kind = "item"
            elif line[0].isspace() and kind != "item":
                lines.append(line.rstrip())
                kind = "code"
            elif lines and kind in ("prose", "item"):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.strip())
                kind = "prose"
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs) + cut + tail


class _Argument(TyperArgument):
    """An argument shown as ``NAME`` when required and ``[NAME]`` when optional (``NAME...`` for several),
    as the help's table shows it, instead of Typer's ``{NAME}``."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        return name if self.required else f"[{name}]"

    def display_type_rich(self, ctx: Any) -> str | None:
        """No ``<list[str]>`` for an argument of several values: ``NAME...`` says so."""
        return None if self.nargs != 1 else super().display_type_rich(ctx)


class _Switch(TyperOption):
    """A boolean flag, shown as the switch it is (``--refine / --no-refine``) without a ``<bool>`` type."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def _plain_parameters(params: list[Any]) -> None:
    """One convention for every command's parameters in its help: an argument's name upper-case (its
    metavar; ``RUN...`` for one taking several values), and switches without a type."""
    for param in params:
        if isinstance(param, TyperArgument):
            if param.metavar is None:
                param.metavar = param.name.upper() + ("..." if param.nargs != 1 else "")
            param.__class__ = _Argument
        elif isinstance(param, TyperOption) and param.is_flag:
            param.__class__ = _Switch


def _parameter_label(param: Any, ctx: Any) -> Any:
    """What the left of a parameter's help row shows, as one line: its flags (an argument: its name), a
    switch's off side after ``/`` and its type, e.g. ``--refine / --no-refine``, ``--chunk-size <int range>
    [x>=1]``, ``POINTS <str>``."""
    from rich.text import Text
    from typer import rich_utils

    names = [o for o in param.opts if o.startswith("--")] + [o for o in param.opts if not o.startswith("--")]
    if isinstance(param, TyperArgument):
        names = [param.make_metavar(ctx) if param.metavar is None else param.metavar]
    label = Text()
    label.append_text(rich_utils.highlighter(", ".join(names)))
    if param.secondary_opts:
        label.append(" / ")
        label.append_text(rich_utils.negative_highlighter(", ".join(param.secondary_opts)))
    kind = param.display_type_rich(ctx=ctx) or ""
    bounds = param._get_number_range_help_str()
    kind += rich_utils.RANGE_STRING.format(bounds) if bounds else ""
    if kind:
        label.append(" ")
        label.append_text(rich_utils.types_highlighter(Text(kind, style=rich_utils.STYLE_TYPES)))
    return label


def _options_panel(*, name: str, params: list[Any], ctx: Any, markup_mode: Any, console: Any) -> None:
    """A panel of parameters (Typer's "Arguments" or "Options") whose descriptions get at least half the
    terminal's width. Each row shows its parameter as one label (:func:`_parameter_label`), then its
    description, as Typer does, when the widest label leaves the descriptions half the width; otherwise
    (a narrow terminal) each description goes on the lines under its label, indented. Typer's own table
    gives each part of a label its own column (flags, off side, type), so the widest of each adds up and a
    description at 80 columns was squeezed to about 19 characters."""
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table
    from typer import rich_utils

    if not params:
        return
    rows = [(rich_utils.REQUIRED_SHORT_STRING if p.required else "", _parameter_label(p, ctx),
             rich_utils._get_parameter_help(param=p, ctx=ctx, markup_mode=markup_mode)) for p in params]
    required = any(r[0] for r in rows)
    table = Table(show_header=False, expand=True, box=None, pad_edge=False, padding=(0, 1))
    if required:
        table.add_column(no_wrap=True, style=rich_utils.STYLE_REQUIRED_SHORT)
    inner = console.width - 4  # the panel's border and padding
    label_width = max(r[1].cell_len for r in rows)
    described = inner - label_width - 2 - (3 if required else 0)  # the gaps between columns
    side_by_side = described >= console.width // 2
    table.add_column(no_wrap=True, width=label_width if side_by_side else None)
    if side_by_side:
        table.add_column(ratio=1)
    for mark, label, text in rows:
        if side_by_side:
            table.add_row(*([mark] if required else []), label, text)
        else:
            table.add_row(*([mark] if required else []), label)
            table.add_row(*([""] if required else []), Padding(text, (0, 0, 0, 4)))
    console.print(Panel(table, border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER, title=name,
                        title_align=rich_utils.ALIGN_OPTIONS_PANEL))


@contextlib.contextmanager
def _readable_panels() -> Any:
    """Typer's help with its parameter panels drawn by :func:`_options_panel` (Typer calls a module
    function for each panel; it is swapped for the help being written, then restored)."""
    from typer import rich_utils

    typers = rich_utils._print_options_panel
    rich_utils._print_options_panel = _options_panel
    try:
        yield
    finally:
        rich_utils._print_options_panel = typers


class _PlainHelp:
    """For a command or the group: its help reflowed to the terminal's width (:func:`reflow`), its
    parameters (the help option included) shown by one convention (:func:`_plain_parameters`), their
    descriptions given at least half the width (:func:`_options_panel`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = reflow(self.help)
        _plain_parameters(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        _plain_parameters([option])
        return option

    def format_help(self, ctx: Any, formatter: Any) -> None:
        with _readable_panels():
            super().format_help(ctx, formatter)  # type: ignore[misc]


class _Command(_PlainHelp, TyperCommand):
    """Every command, with the help conventions of :class:`_PlainHelp`."""


class _Typer(typer.Typer):
    """The application: its commands are :class:`_Command` unless one names another class."""

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(name, cls=cls or _Command, **kwargs)


class _OneLineErrors(_PlainHelp, TyperGroup):
    """Usage errors (a bad option value, a missing argument) as one line on stderr with exit code 2,
    instead of Typer's usage text and boxed message; a standard output that cannot be written (a full
    disk, a closed pipe) as one line with exit code 1. The streams and terminal settings are made safe
    first (:mod:`swarmctl.cli._streams`), and every integer option takes whole numbers only. Its help and
    options follow the commands' conventions (:class:`_PlainHelp`)."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        tolerant_streams()
        usable_terminal_size()
        for command in self.commands.values():
            for each in (command, *getattr(command, "commands", {}).values()):  # a group's commands too
                _whole_numbers_only(each)
        try:
            rv = self._one_line(args, prog_name, complete_var, **extra)
            if sys.stdout is not None and not rv:
                sys.stdout.flush()  # what a command that worked left buffered fails here, not at exit
        except (OSError, SystemExit) as exc:
            failed = stdout_failed(exc)
            if failed is None:
                raise
            _say_error(f"error: {stdout_line(failed)}")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _signal_in_one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _signal_in_one_line():
            return super().invoke(ctx)

    def _own_option(self, name: str | None, ctx: Any) -> str | None:
        """For an option of swarmctl itself (``--threads``) given after a command, which does not know it:
        where it goes. None for any other unknown option."""
        if name is None or ctx is None or ctx.parent is None:
            return None
        for param in self.params:
            if name in param.opts:
                value = "" if param.is_flag else f" {param.metavar or 'VALUE'}"
                root = ctx.find_root().command_path
                command = "" if param.is_eager else f" {ctx.command_path[len(root) + 1:]} ..."  # --version: alone
                return (f"{name} is an option of {root} itself: give it before the command, "
                        f"`{root} {name}{value}{command}`")
        return None

    def _one_line(self, args: Any, prog_name: str | None, complete_var: str | None, **extra: Any) -> Any:
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # the help was printed: nothing more to say
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            message = " ".join(exc.format_message().split())
            own = self._own_option(getattr(exc, "option_name", None), ctx)
            if own is not None:
                message, hint = own, ""
            _say_error(f"error: {message}{hint}")
            sys.exit(exc.exit_code)
        except typer.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # a signal outside a command's work
                _say_error(f"error: {signals.interrupted_line(signals.signal_of(exc.__cause__))}")
                sys.exit(signals.EXIT_CODE)
            _say_error("aborted")
            sys.exit(1)


@contextlib.contextmanager
def _signal_in_one_line() -> Any:
    """A signal while the options are parsed or outside a command's own handling (while it loads PyTorch,
    say) ends with the one line and exit 130: Typer turns the KeyboardInterrupt into a bare exit 130 (older
    versions into an Abort, answered in ``_one_line``). A command that handled its signal exits through
    ``typer.Exit``, which passes."""
    try:
        yield
    except KeyboardInterrupt as exc:
        _say_error(f"error: {signals.interrupted_line(signals.signal_of(exc))}")
        raise typer.Exit(signals.EXIT_CODE) from None


def _say_error(text: str) -> None:
    """One line on stderr; a standard error that cannot take it changes nothing (the exit code still says)."""
    with contextlib.suppress(OSError):
        typer.echo(text, err=True)


_WHOLE = re.compile(r"\s*[+-]?[0-9]+\s*")


def _whole_numbers_only(command: Any) -> None:
    """Make every integer option of ``command`` take a whole number written in digits (``8``, ``-3``) and
    nothing else: Typer's own conversion took ``8.0`` and ``8_000`` but not ``5.``. Done once per command."""
    if getattr(command, "_swarmctl_whole_numbers", False):
        return
    for param in getattr(command, "params", ()):
        if getattr(getattr(param, "type_descriptor", None), "annotation", None) is not int:
            continue

        def process_value(ctx: Any, value: Any, _convert: Any = param.process_value, _param: Any = param) -> Any:
            if isinstance(value, str) and not _WHOLE.fullmatch(value):
                raise typer.BadParameter(f"give a whole number such as 8, got {value!r}", ctx=ctx, param=_param)
            return _convert(ctx, value)

        param.process_value = process_value
    command._swarmctl_whole_numbers = True


app = _Typer(
    name="swarmctl",
    cls=_OneLineErrors,
    help="SWARM mappings: set-equivariant recurrent layers, baselines, and the paper's experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
