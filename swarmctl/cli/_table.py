"""Every table a command prints goes through :func:`print_table`: one style in a terminal, the same table at
its full width when the output is a pipe or a file, and the machine-readable forms behind ``--json`` and
``--csv``. No value is ever cut to "…" or folded: a table too wide for the terminal wraps its headers, then
leaves out the columns its command names as optional (saying so), and when even that is too wide prints one
block of ``column: value`` pairs per row."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any

import typer
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from swarmctl.cli._options import console, option

AsJson = Annotated[bool, option("--json", help="Print the table as JSON (a list of objects, one per row) instead "
                                               "of text.")]
AsCsv = Annotated[bool, option("--csv", help="Print the table as CSV (a header line, then one line per row) "
                                             "instead of text.")]

_WIDE = 1_000_000  # a console this wide never wraps or cuts a cell


def table_format(as_json: bool, as_csv: bool) -> str:
    """``text``, ``json`` or ``csv`` from a command's ``--json`` and ``--csv`` (both: a usage error, exit 2)."""
    if as_json and as_csv:
        raise typer.BadParameter("cannot be combined with --csv; give one of them", param_hint="--json")
    return "json" if as_json else "csv" if as_csv else "text"


def print_table(columns: Sequence[str], rows: Iterable[Sequence[str]], *, title: str | None = None,
                right: Iterable[str] = (), records: Sequence[Mapping[str, Any]] | None = None,
                fmt: str = "text", optional: Sequence[str] = ()) -> None:
    """Print one table. ``rows``: its cells as text, one per column (printed as written: no markup or emoji);
    ``right``: the columns aligned right (numbers); ``optional``: the columns a terminal too narrow for the
    table may leave out, the least important first (a line after the table names those left out). ``fmt``
    ``json`` or ``csv`` prints ``records`` instead (the rows' values as numbers, lists and null where the text
    has "1,000", "0,1,2" or ""; by default each row's text under its column's name) and nothing else."""
    rows = [tuple(row) for row in rows]
    if records is None:
        records = [dict(zip(columns, row, strict=True)) for row in rows]
    if fmt == "json":
        console.print(json.dumps(list(records), indent=2, ensure_ascii=False), markup=False, highlight=False,
                      soft_wrap=True, emoji=False)
        return
    if fmt == "csv":
        console.print(_csv(records), markup=False, highlight=False, soft_wrap=True, emoji=False, end="")
        return
    right = set(right)
    if title:  # a line of its own: a title inside the table would wrap to the table's width (a long path)
        _line(title)
    table = _table(columns, rows, right)
    if not console.is_terminal:
        # a pipe or a file: the table at its natural width, each line without the trailing padding
        _line("\n".join(line.rstrip() for line in _render(table).splitlines()))
        return
    if _width(table) <= console.width:
        console.print(table)
        return
    _print_narrow(columns, rows, right, optional, console.width)


def _print_narrow(columns: Sequence[str], rows: list[tuple[str, ...]], right: set[str], optional: Sequence[str],
                  width: int) -> None:
    """A table wider than the terminal, every value whole: its headers wrapped at their spaces, then without
    its optional columns one by one (least important first), else one block per row."""
    left_out: list[str] = []
    for drop in [None, *(c for c in optional if c in columns)]:
        if drop is not None:
            left_out.append(drop)
        keep = [i for i, c in enumerate(columns) if c not in left_out]
        table = _table([columns[i] for i in keep], [tuple(row[i] for i in keep) for row in rows], right,
                       fold_headers=True)
        if _width(table) <= width:
            console.print(table)
            if left_out:  # prose: wrapped at the terminal's width
                console.print(f"not shown at {width} columns: {', '.join(left_out)} (a wider terminal or a pipe "
                              "shows every column)", markup=False, highlight=False, emoji=False)
            return
    for row in rows:  # one block per row: "column: value" pairs, as many to a line as fit
        pairs = [f"{col}: {cell}" for col, cell in zip(columns, row, strict=True) if cell]
        lines = pairs[:1]
        for pair in pairs[1:]:
            if cell_len(lines[-1]) + 3 + cell_len(pair) <= width:
                lines[-1] += "   " + pair
            else:
                lines.append("  " + pair)
        _line("\n".join(["", *lines]))  # a blank line before each block


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]], right: set[str], fold_headers: bool = False) -> Table:
    """The table in the house style; ``fold_headers``: each column only as wide as its widest value (or its
    header's longest word), the header wrapped at its spaces to fit."""
    table = Table(box=box.SIMPLE_HEAD)
    for i, col in enumerate(columns):
        width = None
        if fold_headers:
            width = max([cell_len(row[i]) for row in rows] + [cell_len(word) for word in col.split()] + [1])
        table.add_column(Text(col), justify="right" if col in right else "left", width=width)
    for row in rows:
        table.add_row(*map(Text, row))  # literally: no markup, no emoji codes
    return table


def _render(table: Table) -> str:
    """The table as text at its natural width (a console this wide never wraps or cuts a cell)."""
    wide = Console(width=_WIDE, file=io.StringIO(), color_system=None, highlight=False, emoji=False)
    wide.print(table)
    return wide.file.getvalue()


def _width(table: Table) -> int:
    return max((cell_len(line) for line in _render(table).splitlines()), default=0)


def _line(text: str) -> None:
    """A line as written (no markup, highlighting or emoji codes); one longer than the terminal is left to
    the terminal to wrap, never cut."""
    console.print(text, markup=False, highlight=False, soft_wrap=True, emoji=False)


def _csv(records: Sequence[Mapping[str, Any]]) -> str:
    """The records as CSV: a list as its items joined by spaces, null as an empty cell (csv's own rule)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(dict.fromkeys(k for r in records for k in r)), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: " ".join(map(str, v)) if isinstance(v, list | tuple) else v for k, v in r.items()}
                     for r in records)
    return buffer.getvalue()
