"""`swarmctl report`: one table over all runs and the parameters-vs-loss frontier figure."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from rich.markup import escape
from rich.table import Table

from swarmctl.cli import _options
from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, RunsDir, console, flush_output, option, say, user_errors

_RIGHT = {"parameters", "epochs", "net min"}


@app.command("report")
def report_cmd(
    runs_dir: RunsDir = RUNS_DIR,
    out: Annotated[Path | None, option(help="Output folder [default: RUNS_DIR].")] = None,
    title: Annotated[str | None, option(help="Title of the frontier figure.")] = None,
    force: _options.Force = False,
) -> None:
    """Summarise all runs: best validation loss (mean ± std over seeds) next to the paper's number (its
    Table 2 for direct clustering) and the frontier figure.

    --runs-dir may be a sweep's folder, e.g. `swarmctl report --runs-dir runs/sweep-paper` (or `sweep-paper`, looked up
    in runs/ when there is no such folder here).
    """
    with user_errors():
        _options.refuse_replacing(out, force, ("report.md", "frontier.png"))
        from swarmctl.plots.frontier import plot_frontier
        from swarmctl.plots.style import save_figure
        from swarmctl.studies.report import report

        with report(runs_dir, out, RUNS_DIR) as rep:  # both files, or neither; once the table is printed
            fig = save_figure(plot_frontier(rep.frontiers, rep.largest, title), rep.figure)
            table = Table(title=escape(f"runs in {rep.runs_dir}"))
            for col in rep.columns:
                table.add_column(col, justify="right" if col in _RIGHT else "left")
            for row in rep.table:
                table.add_row(*map(escape, row))
            console.print(table)
            say(f"-> {rep.markdown}, {fig}")
            flush_output()
