"""`swarmctl models`: the model registry with paper codes, defaults and symmetry, and each task's
training defaults."""

from __future__ import annotations

from swarmctl.cli._app import app
from swarmctl.cli._options import say, user_errors
from swarmctl.cli._table import AsCsv, AsJson, print_table, table_format

_COLUMNS = ("name", "code", "default", "parameters", "symmetry")


@app.command("models")
def models_cmd(as_json: AsJson = False, as_csv: AsCsv = False) -> None:
    """List the registered models by task: paper code format, default code (the paper's best), size and
    symmetry, then each task's training defaults and each model's description."""
    fmt = table_format(as_json, as_csv)
    with user_errors():
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
            f"{d.max_epochs} epochs, backtracking beta {d.beta:g} alpha {d.alpha:g}.\n")
    say("code: H hidden units, T iterations, L layers, m inducing points; default: the paper's best.")
    for task in overview:
        for m in task.models:
            say(f"{m.name}: {m.summary}")
