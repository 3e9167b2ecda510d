"""`swarmctl report`: one table over all runs and the parameters-vs-loss frontier figure."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from swarmctl.cli import _options
from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, RunsDir, err_console, flush_output, option, say
from swarmctl.cli._table import AsCsv, AsJson, print_table, table_format


@app.command("report")
def report_cmd(
    runs_dir: RunsDir = RUNS_DIR,
    out: Annotated[Path | None, option(help="Output folder [default: RUNS_DIR].")] = None,
    title: Annotated[str | None, option(help="Title of the frontier figure.")] = None,
    as_json: AsJson = False,
    as_csv: AsCsv = False,
    force: _options.Force = False,
) -> None:
    """Summarise all runs: best validation loss (mean ± std over seeds) next to the paper's number (its
    Table 2 for direct clustering) for runs on the paper's data, with epochs, net minutes and hardware, and
    the frontier figure (a panel per dataset; the paper's points only beside runs on its data).

    One row per configuration and dataset (n: how many seeds; ± only for two or more); runs with no
    finished epoch are listed as unfinished. A terminal too narrow for the table cuts no value: it leaves
    columns out (and names them) or prints one block per row. --runs-dir may be a sweep's folder, e.g. `swarmctl report
    --runs-dir runs/sweep-paper` (or `sweep-paper`, looked up in runs/ when there is no such folder here).
    """
    fmt = table_format(as_json, as_csv)
    from swarmctl.plots.frontier import plot_frontier
    from swarmctl.plots.style import save_figure
    from swarmctl.studies.report import NUMBER_COLUMNS, OPTIONAL_COLUMNS, REPORT_COLUMNS, report

    with report(runs_dir, out, RUNS_DIR, force) as rep:  # both files, or neither; once the table is printed
        fig = save_figure(plot_frontier(rep.panels, title), rep.figure)
        print_table(REPORT_COLUMNS, rep.table, title=f"runs in {rep.runs_dir}", right=NUMBER_COLUMNS,
                    records=rep.records, fmt=fmt, optional=OPTIONAL_COLUMNS)
        written = f"-> {rep.markdown}, {fig}"
        if fmt == "text":
            if rep.note:
                say(rep.note)
            say(written)
        else:  # standard output holds the table alone
            err_console.print(written, markup=False, highlight=False, soft_wrap=True)
        flush_output()
