"""`swarmctl models`: the model registry with paper codes, defaults and symmetry, and each task's
training defaults."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table

from swarmctl.cli._app import app
from swarmctl.cli._options import console, say, user_errors


@app.command("models")
def models_cmd() -> None:
    """List the registered models by task: paper code format, default code (the paper's best), size and
    symmetry, then each task's training defaults and each model's description."""
    with user_errors():
        from swarmctl.studies.models import model_overview

        overview = model_overview()
    for task in overview:
        table = Table(title=escape(f"{task.name} models"), box=box.SIMPLE_HEAD, title_justify="left")
        for col in ("name", "code", "default", "parameters", "symmetry"):
            table.add_column(col, justify="right" if col == "parameters" else "left", no_wrap=True)
        for m in task.models:
            table.add_row(escape(m.name), m.code_format, m.code, f"{m.parameters:,}", m.symmetry)
        console.print(table)
        d = task.defaults
        say(f"{task.summary}. Trains with lr {d.lr:g}, batch {d.batch_size}, {d.minutes:g} min, at most "
            f"{d.max_epochs} epochs, backtracking beta {d.beta:g} alpha {d.alpha:g}.\n")
    say("code: H hidden units, T iterations, L layers, m inducing points; default: the paper's best.")
    for task in overview:
        for m in task.models:
            say(f"{m.name}: {m.summary}")
