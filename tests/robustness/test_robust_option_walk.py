"""A walk over every option of every command, subcommands of groups included, introspected from the app (a
new option or command is covered without touching this file): each gets a value wrong for its type and must
end with the code docs/guarantees.md gives that kind of value, in one line that names the option for a
value wrong in itself (2), and with no traceback. Integers get a non-number and -1 (no count, size, index or
seed is negative), floats a non-number, NaN and -1 (none takes a negative), choices an unknown one, paths a
place under a file (a file-system problem: 1). Text options say in STRINGS what is wrong for them."""

from __future__ import annotations

import enum
import typing
from pathlib import Path

import pytest
import typer
from faults import cli

from swarmctl.cli import app

# text options: a value wrong for each and its code (None: free text, such as a title, has no wrong value)
STRINGS = {"--device": ("tpu", 2), "--pooling": ("no-such", 2), "--dataset": ("no-such", 2), "--shard": ("0/0", 2),
           "--columns": ("0,00", 2), "--name": ("..", 2),
           "--split": ("no-such", 1), "--key": ("no-such", 1), "--run": ("no-such", 1), "--resume": ("no-such", 1),
           "--step": ("turbo", 2), "--only": ("no-such", 2), "--probe": ("no-such", 2), "--title": None}
ARGUMENT = {("train",): "swarm"}  # a command's positional arguments, where "x" would fail first
CONTEXT = {("train", "--data-dir"): ["swarm-image"]}  # arguments for an option that applies only to some models


def _commands(command: typing.Any, path: tuple[str, ...] = ()):
    if hasattr(command, "commands"):  # a group: walk its subcommands
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, command


def _type(param: typing.Any) -> typing.Any:
    """The option's Python type (``int`` for ``int | None``), or "choice" for a choice (a Literal or an Enum)."""
    annotation = param.type_descriptor.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    kind = args[0] if args and typing.get_origin(annotation) is not typing.Literal else annotation
    if typing.get_origin(kind) is typing.Literal or (isinstance(kind, type) and issubclass(kind, enum.Enum)):
        return "choice"
    return kind


def _cases():
    out = []
    for path, command in _commands(typer.main.get_command(app)):
        arguments = [ARGUMENT.get(path, "x") for p in command.params if p.param_type_name == "argument" and p.required]
        for param in command.params:
            if param.param_type_name != "option" or param.is_flag or param.hidden:
                continue
            flag = max((o for o in param.opts if o.startswith("--")), key=len)
            kind = _type(param)
            if kind is int:
                wrong = [("x1", 2), ("1.5", 2), ("-1", 2)]
            elif kind is float:
                wrong = [("x1", 2), ("nan", 2), ("-1", 2)]
            elif kind == "choice":
                wrong = [("no-such", 2)]
            elif kind is Path:
                wrong = [("{file}/x.png", 1)]
            elif kind is str and flag in STRINGS:
                wrong = [STRINGS[flag]] if STRINGS[flag] is not None else []
            else:
                wrong = [(None, f"{kind} option {flag} of `{' '.join(path)}` is not walked: give it a wrong value")]
            args = CONTEXT.get((*path, flag), arguments)
            out += [(path, flag, args, value, code) for value, code in wrong]
    return out


CASES = _cases()


@pytest.mark.parametrize(("path", "flag", "args", "value", "code"), CASES,
                         ids=[f"{' '.join(c[0])}{c[1]}={c[3]}" for c in CASES])
def test_every_option_refuses_a_wrong_value_with_the_rules_code(tmp_path, monkeypatch, path, flag, args, value,
                                                                code):
    assert value is not None, code  # an option of a type this walk does not know yet
    monkeypatch.chdir(tmp_path)  # relative defaults (runs/, campaigns/, data/) never reach the checkout
    (tmp_path / "a-file").write_text("not a folder\n")
    value = value.format(file=tmp_path / "a-file")
    r = cli(*path, *args, f"{flag}={value}")
    context = f"swarmctl {' '.join(path)} {' '.join(args)} {flag}={value}: exit {r.exit_code}\n{r.output}"
    assert r.exit_code == code, context
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), context
    assert 1 <= len([line for line in r.output.splitlines() if line.strip()]) <= 3, context
    if code == 2:
        assert flag in r.output, context


def test_the_walk_reaches_every_command_and_the_options_of_groups():
    walked = {path for path, *_ in CASES}
    commands = {path for path, _ in _commands(typer.main.get_command(app))}
    assert walked == {p for p in commands if any(o.param_type_name == "option" and not o.is_flag
                                                 for o in dict(_commands(typer.main.get_command(app)))[p].params)}
    assert len(walked) >= 9
