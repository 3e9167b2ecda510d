"""`swarmctl models`: the model registry with paper codes, defaults and symmetry, and each task's
training defaults."""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table

from swarmctl.cli._app import app
from swarmctl.cli._options import console, say
from swarmctl.config import ModelConfig
from swarmctl.models import count_parameters, create_model, get_spec, list_models, paper_code
from swarmctl.tasks import TASKS


@app.command("models")
def models_cmd() -> None:
    """List the registered models by task: paper code format, default code (the paper's best), size and
    symmetry, then each task's training defaults and each model's description."""
    for task in TASKS.values():
        table = Table(title=escape(f"{task.name} models"), box=box.SIMPLE_HEAD, title_justify="left")
        for col in ("name", "code", "default", "parameters", "symmetry"):
            table.add_column(col, justify="right" if col == "parameters" else "left", no_wrap=True)
        for name in list_models(task.name):
            spec = get_spec(name)
            cfg = ModelConfig(name=name)
            model = create_model(cfg)
            table.add_row(escape(name), spec.code_format, paper_code(cfg), f"{count_parameters(model):,}",
                          model.symmetry)
        console.print(table)
        d = task.defaults
        say(f"{task.summary}. Trains with lr {d.lr:g}, batch {d.batch_size}, {d.minutes:g} min, at most "
            f"{d.max_epochs} epochs, backtracking beta {d.beta:g} alpha {d.alpha:g}.\n")
    say("code: H hidden units, T iterations, L layers, m inducing points; default: the paper's best.")
    for name in list_models():
        say(f"{name}: {get_spec(name).summary}")
