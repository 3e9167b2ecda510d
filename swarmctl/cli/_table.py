"""Every table a command prints goes through :func:`print_table`: one style in a terminal (fitted to its
width), the same table at its full width when the output is a pipe or a file (never a cell cut to "…"), and
the machine-readable forms behind ``--json`` and ``--csv``."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any

import typer
from rich import box
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
                fmt: str = "text") -> None:
    """Print one table. ``rows``: its cells as text, one per column (printed as written: no markup or emoji);
    ``right``: the columns aligned right (numbers). ``fmt`` ``json`` or ``csv`` prints ``records`` instead
    (the rows' values as numbers, lists and null where the text has "1,000", "0,1,2" or ""; by default each
    row's text under its column's name) and nothing else."""
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
        console.print(title, markup=False, highlight=False, soft_wrap=True, emoji=False)
    table = Table(box=box.SIMPLE_HEAD)
    for col in columns:
        table.add_column(Text(col), justify="right" if col in right else "left")
    for row in rows:
        table.add_row(*map(Text, row))  # literally: no markup, no emoji codes
    if console.is_terminal:
        console.print(table)
        return
    # a pipe or a file: the table at its natural width, each line without the trailing padding
    wide = Console(width=_WIDE, file=io.StringIO(), color_system=None, highlight=False, emoji=False)
    wide.print(table)
    text = "\n".join(line.rstrip() for line in wide.file.getvalue().splitlines())
    console.print(text, markup=False, highlight=False, soft_wrap=True, emoji=False)


def _csv(records: Sequence[Mapping[str, Any]]) -> str:
    """The records as CSV: a list as its items joined by spaces, null as an empty cell (csv's own rule)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(dict.fromkeys(k for r in records for k in r)), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: " ".join(map(str, v)) if isinstance(v, list | tuple) else v for k, v in r.items()}
                     for r in records)
    return buffer.getvalue()
