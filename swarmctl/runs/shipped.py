"""Shipped models: checkpoints trained on a GPU, weights only (float32) with their config and training
state, each with a JSON record, in the package's ``pretrained/`` folder (package data, so every install
has them; SWARMCTL_PRETRAINED names another folder). They are found by their records.
:func:`swarmctl.runs.open_run` opens one when no run is named, so eval, plot-entropy and sample work on a
fresh install; what is computed from it goes to ``runs/pretrained-NAME/``, never into the package."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmctl.errors import CheckpointError, ConfigError, DataError, ResourceError, SwarmctlWarning
from swarmctl.files import read_json, shipped_folder
from swarmctl.tasks import Task, tasks_for


@dataclass(frozen=True)
class ShippedModel:
    """A shipped model's record (the JSON beside its checkpoint): what is looked up without reading weights."""

    checkpoint: Path
    task: str
    dataset: str | None  # image models: the dataset it models
    record: dict[str, Any]  # the whole record: command, card, minutes, its evaluation, config


def shipped_models() -> list[ShippedModel]:
    """The records of the shipped models, by file name. A record that cannot be read, or whose checkpoint
    is missing, and a checkpoint without a record are skipped with a warning naming them."""
    folder, found, recorded = shipped_folder(), [], set()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = read_json(path, "a shipped model's record")
            checkpoint = folder / record["file"]
            task, model = record["task"], record["config"]["model"]
            if not (isinstance(record["file"], str) and Path(record["file"]).name == record["file"]
                    and isinstance(task, str) and isinstance(model, dict)):
                raise TypeError("malformed record")
            dataset = model.get("dataset")
        except (TypeError, KeyError, AttributeError, ConfigError, DataError, ResourceError):
            warnings.warn(f"skipped shipped model record {path}: not a readable record", SwarmctlWarning,
                          stacklevel=2)
            continue
        recorded.add(checkpoint.name)
        if not checkpoint.is_file():
            warnings.warn(f"skipped shipped model record {path}: its checkpoint {checkpoint} is missing",
                          SwarmctlWarning, stacklevel=2)
            continue
        found.append(ShippedModel(checkpoint, task, dataset if isinstance(dataset, str) else None, record))
    for path in sorted(folder.glob("*.pt")) if folder.is_dir() else []:
        if path.name not in recorded:
            warnings.warn(f"skipped {path}: a shipped model needs its record ({path.stem}.json) beside it",
                          SwarmctlWarning, stacklevel=2)
    return found


def shipped_checkpoint(tasks: Task | list[Task], dataset: str | None = None) -> Path:
    """The shipped checkpoint of the first of ``tasks`` that has one (for image models, of ``dataset``), by the
    records alone (one whose record names ``default_for`` after the task's others); CheckpointError if none."""
    tasks = [tasks] if isinstance(tasks, Task) else tasks
    models = sorted(shipped_models(), key=lambda m: bool(m.record.get("default_for")))
    for task in tasks:
        for model in models:
            if model.task == task.name and (dataset is None or model.dataset == dataset):
                return model.checkpoint
    what = " or ".join(t.name for t in tasks) + (f" ({dataset})" if dataset else "")
    raise CheckpointError(f"no shipped {what} model in {shipped_folder()}; name a run, or train one with "
                          "`swarmctl train`")


def shipped_for(study: str, dataset: str | None = None) -> Path:
    """The shipped checkpoint :func:`swarmctl.runs.open_run` uses for ``study`` when no run is named."""
    return shipped_checkpoint(tasks_for(study), dataset)


def shipped_results_dir(checkpoint: Path, runs_dir: Path) -> Path:
    """Where results computed from a shipped checkpoint go: ``runs_dir/pretrained-NAME``."""
    return Path(runs_dir) / f"pretrained-{Path(checkpoint).stem}"
