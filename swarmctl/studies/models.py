"""`swarmctl models`'s work: every registered model by task, with its size and symmetry."""

from __future__ import annotations

from dataclasses import dataclass

from swarmctl.config import ModelConfig, TrainConfig
from swarmctl.models import count_parameters, create_model, get_spec, list_models, paper_code
from swarmctl.tasks import TASKS


@dataclass(frozen=True)
class ModelRow:
    name: str
    code_format: str  # the paper code's format, e.g. H-T-L
    code: str  # the default configuration's code (the paper's best)
    parameters: int
    symmetry: str
    summary: str


@dataclass(frozen=True)
class TaskModels:
    name: str
    summary: str
    defaults: TrainConfig
    models: list[ModelRow]


def model_overview() -> list[TaskModels]:
    """Every task in registry order with its models, each built at its defaults to count its parameters."""
    overview = []
    for task in TASKS.values():
        rows = []
        for name in list_models(task.name):
            spec, cfg = get_spec(name), ModelConfig(name=name)
            model = create_model(cfg)
            rows.append(ModelRow(name, spec.code_format, paper_code(cfg), count_parameters(model), model.symmetry,
                                 spec.summary))
        overview.append(TaskModels(task.name, task.summary, task.defaults, rows))
    return overview
