"""`swarmctl report`: one table over all runs and the parameters-vs-loss frontier figure."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from rich.markup import escape
from rich.table import Table

from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, argument, console, flush_output, option, say, user_errors
from swarmctl.files import atomic_write_text, check_output_folder, staged_writes
from swarmctl.plots.frontier import plot_frontier
from swarmctl.plots.style import save_figure
from swarmctl.studies.report import (
    frontiers,
    largest_explored,
    paper_text,
    read_runs,
    report_folder,
    report_markdown,
    summarise,
)


@app.command("report")
def report_cmd(
    runs_dir: Annotated[Path, argument(help="Folder holding the runs.")] = RUNS_DIR,
    out: Annotated[Path | None, option(help="Output folder [default: RUNS_DIR].")] = None,
    title: Annotated[str | None, option(help="Title of the frontier figure.")] = None,
) -> None:
    """Summarise all runs: best validation loss (mean ± std over seeds) next to the paper's number (its
    Table 2 for direct clustering) and the frontier figure.

    RUNS_DIR may be a sweep's folder, e.g. `swarmctl report runs/sweep-paper` (or `sweep-paper`, looked up
    in runs/ when there is no such folder here).
    """
    runs_dir = report_folder(runs_dir, RUNS_DIR)
    with user_errors():
        out_dir = out or runs_dir
        check_output_folder(out_dir)
        rows = summarise(read_runs(runs_dir))
        with staged_writes():  # both files, or neither; once the table is printed
            atomic_write_text(out_dir / "report.md", report_markdown(rows))
            fig = save_figure(plot_frontier(frontiers(rows), largest_explored(rows), title), out_dir / "frontier")
            table = Table(title=escape(f"runs in {runs_dir}"))
            for col in ("model", "code", "parameters", "seeds", "best val loss", "paper", "epochs", "net min",
                        "device"):
                table.add_column(col, justify="right" if col in ("parameters", "epochs", "net min") else "left")
            for r in rows:
                val = f"{r.val_mean:.4f} ± {r.val_std:.4f}" if len(r.seeds) > 1 else f"{r.val_mean:.4f}"
                table.add_row(escape(r.model), escape(r.code), f"{r.parameters:,}", ",".join(map(str, r.seeds)), val,
                              paper_text(r), f"{r.epochs:.0f}", f"{r.net_minutes:.1f}", escape(",".join(r.devices)))
            console.print(table)
            say(f"-> {out_dir / 'report.md'}, {fig}")
            flush_output()
