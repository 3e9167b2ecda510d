"""`swarmctl report`: one table over all runs and the parameters-vs-loss frontier figure."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from swarmctl.cli._app import app
from swarmctl.cli._options import console, user_errors
from swarmctl.files import atomic_write_text
from swarmctl.plots.frontier import plot_frontier
from swarmctl.plots.style import save_figure
from swarmctl.studies.report import frontiers, largest_explored, read_runs, report_markdown, summarise


@app.command("report")
def report_cmd(
    runs_dir: Annotated[Path, typer.Argument(help="Folder holding the runs.")] = Path("runs"),
    out: Annotated[Path | None, typer.Option(help="Output folder [default: RUNS_DIR].")] = None,
    title: Annotated[str | None, typer.Option(help="Title of the frontier figure.")] = None,
) -> None:
    """Summarise all runs: best validation loss (mean ± std over seeds) and the frontier figure.

    RUNS_DIR may be a sweep's folder, e.g. `swarmctl report runs/sweep-paper` (or `sweep-paper`, looked up
    in runs/ when there is no such folder here).
    """
    if not runs_dir.is_dir() and runs_dir.name.startswith("sweep-") and (Path("runs") / runs_dir).is_dir():
        runs_dir = Path("runs") / runs_dir
    with user_errors():
        rows = summarise(read_runs(runs_dir))
        out_dir = out or runs_dir
        atomic_write_text(out_dir / "report.md", report_markdown(rows))
        fig = save_figure(plot_frontier(frontiers(rows), largest_explored(rows), title), out_dir / "frontier")
    table = Table(title=f"runs in {runs_dir}")
    for col in ("model", "code", "parameters", "seeds", "best val loss", "epochs", "net min", "device"):
        table.add_column(col, justify="right" if col in ("parameters", "epochs", "net min") else "left")
    for r in rows:
        val = f"{r.val_mean:.4f} ± {r.val_std:.4f}" if len(r.seeds) > 1 else f"{r.val_mean:.4f}"
        table.add_row(r.model, r.code, f"{r.parameters:,}", ",".join(map(str, r.seeds)), val, f"{r.epochs:.0f}",
                      f"{r.net_minutes:.1f}", ",".join(r.devices))
    console.print(table)
    console.print(f"-> {out_dir / 'report.md'}, {fig}", highlight=False)
