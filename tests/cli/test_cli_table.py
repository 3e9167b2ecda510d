"""The tables every command prints (swarmctl/cli/_table.py) in a terminal narrower than the table: every value
whole, never cut to "…": the headers wrap at their spaces, then the optional columns go (a line names them),
then each row becomes a block of "column: value" pairs. A pipe gets the whole table whatever the width."""

import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from swarmctl.cli import _table, app

COLUMNS = ("name", "long header words", "note", "size")
ROWS = [("alpha", "1", "a note of some length", "1,000"), ("beta-with-a-longer-name", "22", "", "7")]


def printed(monkeypatch, width, optional=(), terminal=True):
    out = io.StringIO()
    monkeypatch.setattr(_table, "console", Console(file=out, force_terminal=terminal, width=width, color_system=None))
    _table.print_table(COLUMNS, ROWS, title="a title", right=("size",), optional=optional)
    return out.getvalue()


def test_a_table_that_fits_is_printed_as_it_is(monkeypatch):
    shown = printed(monkeypatch, 120)
    header = next(line for line in shown.splitlines() if "name" in line)
    assert all(c in header for c in COLUMNS) and "not shown" not in shown
    assert any("beta-with-a-longer-name" in line and "22" in line and "7" in line for line in shown.splitlines())


def test_a_narrower_terminal_wraps_the_headers_before_it_leaves_anything_out(monkeypatch):
    shown = printed(monkeypatch, 70)  # the values fit; "long header words" does not, on one line
    lines = shown.splitlines()
    assert "…" not in shown and max(map(len, lines)) <= 70 and "not shown" not in shown
    assert any("alpha" in line and "a note of some length" in line and "1,000" in line for line in lines)
    assert not any("long header words" in line for line in lines)  # wrapped over two lines


def test_then_the_optional_columns_go_the_least_important_first_and_a_line_names_them(monkeypatch):
    shown = printed(monkeypatch, 50, optional=("note", "size"))
    lines = shown.splitlines()
    assert "…" not in shown and max(map(len, lines)) <= 50
    assert "not shown at 50 columns: note (a wider terminal or a pipe shows every column)" in " ".join(lines)
    assert any("beta-with-a-longer-name" in line and "22" in line and "7" in line for line in lines)
    assert "a note" not in shown


def test_then_each_row_is_a_block_of_whole_values(monkeypatch):
    shown = printed(monkeypatch, 40, optional=("note",))
    assert shown.split("\n\n")[1:] == [
        "name: alpha   long header words: 1\n  note: a note of some length\n  size: 1,000",
        "name: beta-with-a-longer-name\n  long header words: 22   size: 7\n"]  # an empty value is left out
    tiny = printed(monkeypatch, 5)
    assert "size: 1,000" in tiny.splitlines() or "  size: 1,000" in tiny.splitlines()  # one pair a line, whole


@pytest.mark.parametrize("width", [5, 40, 200])
def test_a_pipe_gets_the_whole_table_whatever_its_width(monkeypatch, width):
    shown = printed(monkeypatch, width, optional=("note",), terminal=False)
    assert shown == printed(monkeypatch, 1000, terminal=False)
    assert any("alpha" in line and "a note of some length" in line and "1,000" in line for line in shown.splitlines())


@pytest.mark.parametrize("columns", [40, 80])
def test_models_shows_every_value_whole_in_a_narrow_terminal(columns):
    r = CliRunner().invoke(app, ["models"], env={"COLUMNS": str(columns), "TTY_COMPATIBLE": "1"})
    assert r.exit_code == 0, r.output
    table = r.stdout.split("direct amortized clustering")[0]  # the first task's models, before its description
    assert "…" not in r.stdout and max(map(len, table.splitlines())) <= columns, r.stdout
    assert "set-transformer" in table and "928,266" in table and "order-dependent" in table
