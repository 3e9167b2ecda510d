"""`swarmctl models`: the model registry with paper codes, defaults and symmetry, and each task's
training defaults."""

from __future__ import annotations

from swarmctl.cli._app import app
from swarmctl.cli._options import say
from swarmctl.cli._table import AsCsv, AsJson, print_table, table_format

_COLUMNS = ("name", "code", "default", "parameters", "symmetry")


@app.command("models")
def models_cmd(as_json: AsJson = False, as_csv: AsCsv = False) -> None:
    """List the registered models by task: paper code format, default code (the paper's best), size and
    symmetry, then each task's training defaults and each model's description."""
    fmt = table_format(as_json, as_csv)
    from swarmctl.studies.models import model_overview

    overview = model_overview()
    if fmt != "text":  # one table of every model, its task a column
        records = [{"task": task.name, "name": m.name, "code_format": m.code_format, "default_code": m.code,
                    "parameters": m.parameters, "symmetry": m.symmetry, "description": m.summary}
                   for task in overview for m in task.models]
        print_table((), [], records=records, fmt=fmt)
        return
    for task in overview:
        print_table(_COLUMNS, [(m.name, m.code_format, m.code, f"{m.parameters:,}", m.symmetry) for m in task.models],
                    title=f"{task.name} models", right=("parameters",))
        d = task.defaults
        say(f"{task.summary}. Trains with lr {d.lr:g}, batch {d.batch_size}, {d.minutes:g} min, at most "
            f"{d.max_epochs} epochs, {backtracking(d.beta, d.alpha)}.\n")
    say("code: H hidden units, T iterations, L layers, m inducing points; default: the paper's best.")
    for task in overview:
        for m in task.models:
            say(f"{m.name}: {m.summary}")


def backtracking(beta: float, alpha: float) -> str:
    """What the trainer's backtracking does with ``beta`` and ``alpha``: the authors' rule backtracks after epoch e
    when more than max(5, beta * e) of the latest epochs were at least as good, and there are at most e of them,
    so from beta 1 on only a non-finite validation loss backtracks (docs/experiments.md says the same)."""
    if beta >= 1:
        return (f"backtracking only on a non-finite validation loss (lr x {alpha:g}; with beta {beta:g} the authors' "
                "rule never fires)")
    return f"backtracking beta {beta:g} alpha {alpha:g}"
