"""`swarmctl models`: the model registry with paper codes and defaults."""

from __future__ import annotations

from rich.table import Table

from swarmctl.cli._app import app
from swarmctl.cli._options import console
from swarmctl.config import ModelConfig
from swarmctl.models import count_parameters, create_model, get_spec, list_models, paper_code


def symmetry(model) -> str:
    """How the model's output reacts to a permutation of its input set."""
    if getattr(model, "equivariant", False):
        return "equivariant"
    if getattr(model, "invariant", False):
        return "invariant"
    return "order-dependent"


@app.command("models")
def models_cmd() -> None:
    """List the registered models with their paper code format and default hyper-parameters."""
    table = Table(
        title="swarmctl models",
        caption="code: H hidden units, T iterations, L layers, m inducing points; default = the paper's best",
    )
    for col in ("name", "task", "code", "default", "parameters", "symmetry", "description"):
        table.add_column(col, justify="right" if col == "parameters" else "left", no_wrap=col != "description")
    for name in list_models():
        spec = get_spec(name)
        cfg = ModelConfig(name=name)
        model = create_model(cfg)
        table.add_row(
            name,
            spec.task,
            spec.code_format,
            paper_code(cfg),
            f"{count_parameters(model):,}",
            symmetry(model),
            spec.summary,
        )
    console.print(table)
