"""A run's lifecycle: create it, train it, resume it, open it for reading, list them.

A run is a folder ``runs/NAME`` holding config.json, metrics.jsonl, best.pt and last.pt (and curves.png,
drawn from metrics.jsonl by :func:`swarmctl.plots.curves.save_run_curves`).
Every command that reads a run goes through :func:`open_run`.

Shipped models: checkpoints trained on a GPU, weights only (float32) with their config and training
state, in the repository's ``pretrained/`` folder (or the folder SWARMCTL_PRETRAINED names).
:func:`open_run` opens one when no run is named, so eval, plot-entropy and sample work on a fresh
checkout; what is computed from it goes to ``runs/pretrained-NAME/``, never into ``pretrained/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from swarmctl.config import DataConfig, ModelConfig, TrainConfig, from_dict, to_dict
from swarmctl.errors import CheckpointError, DataError
from swarmctl.files import atomic_write_text
from swarmctl.models import complete_config, count_parameters, create_model, get_spec, paper_code
from swarmctl.tasks import DataProgress, Task, get_task, task_of
from swarmctl.training.checkpoint import load_checkpoint, save_checkpoint
from swarmctl.training.device import (
    barrier,
    init_distributed,
    is_main_process,
    resolve_device,
    seed_everything,
)
from swarmctl.training.loop import FitResult, ProgressHook, fit

__all__ = ["Progress", "Run", "configs_from_options", "default_run_name", "evaluate", "evaluate_run", "export_weights",
           "find_checkpoint", "is_main_process", "list_runs", "load_model", "open_run", "pretrained_dir",
           "resolve_run", "resume_run", "shipped_checkpoint", "shipped_results_dir", "start_run"]


class Progress(ProgressHook, DataProgress, Protocol):
    """What a caller may pass to show progress: epochs and batches, and generation of missing data."""


# ---- create and train ----------------------------------------------------------------------------------

def default_run_name(model_cfg: ModelConfig, seed: int) -> str:
    """e.g. ``swarm-192-10-1-s0``."""
    return f"{model_cfg.name}-{paper_code(model_cfg)}-s{seed}"


def configs_from_options(model: str, model_options: dict[str, Any], train_options: dict[str, Any],
                         data: Path | None = None, dataset: str | None = None,
                         data_dir: Path | None = None) -> tuple[ModelConfig, TrainConfig, DataConfig]:
    """The three configs of a new run from the train command's options (None: the task's default)."""
    task = task_of(model)
    data_cfg = task.data_config(data, dataset, data_dir)
    model_cfg = ModelConfig(name=model, dataset=data_cfg.dataset, **model_options)
    return model_cfg, task.train_config(**train_options), data_cfg


def start_run(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    data_cfg: DataConfig,
    runs_dir: Path,
    name: str | None = None,
    progress: Progress | None = None,
) -> FitResult:
    """Start a new run ``runs_dir/name`` (default name from model, paper code and seed) and train it.

    Everything is validated before the run folder is created, so a bad option leaves nothing behind.
    Under torchrun, rank 0 makes missing default data before any rank reads it.
    """
    ctx = init_distributed(train_cfg.device)
    model_cfg = complete_config(model_cfg)
    task = task_of(model_cfg.name)
    seed_everything(train_cfg.seed)
    model = create_model(model_cfg)  # validates the hyper-parameters
    device = resolve_device(train_cfg.device, ctx.local_rank)
    if ctx.is_main:
        task.ensure_data(data_cfg, progress)
    barrier(ctx)  # the data exists before any rank opens it
    prepared = task.prepare(train_cfg, data_cfg)
    run_dir = Path(runs_dir) / (name or default_run_name(model_cfg, train_cfg.seed))
    exists = (run_dir / "config.json").exists()
    barrier(ctx)  # every rank has looked before rank 0 writes: all of them agree
    if exists:
        raise CheckpointError(f"run {run_dir} exists; continue it with --resume {run_dir.name} or pick another --name")
    config = {
        "model": to_dict(model_cfg),
        "train": to_dict(train_cfg),
        "data": {**to_dict(data_cfg), "checksum": prepared.checksum},
        "run": {"name": run_dir.name, "task": task.name, "parameters": count_parameters(model),
                "code": paper_code(model_cfg), "device": str(device), "world_size": ctx.world_size},
    }
    if ctx.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.json", json.dumps(config, indent=2) + "\n")
    result = fit(model, prepared, train_cfg, run_dir, config=config, task=task.name, device=device, ctx=ctx,
                 progress=progress)
    return result


def resume_run(
    run: str | Path,
    runs_dir: Path,
    model_name: str | None = None,
    minutes: float | None = None,
    max_epochs: int | None = None,
    device: str | None = None,
    progress: Progress | None = None,
) -> FitResult:
    """Continue a run from its ``last.pt``; its saved config is used, budget included (``minutes`` and
    ``max_epochs`` replace the totals when given, e.g. to extend a finished run)."""
    ctx = init_distributed(device or "auto")
    run_dir = resolve_run(run, runs_dir)
    if not (run_dir / "last.pt").is_file():
        raise CheckpointError(f"run {run_dir} has no last.pt to resume from; start it again under another --name")
    last = load_checkpoint(run_dir / "last.pt")
    config = last["config"]
    model_cfg = from_dict(ModelConfig, config["model"])
    if model_name is not None and model_name != model_cfg.name:
        raise CheckpointError(f"run {run_dir.name} trains model {model_cfg.name!r}, not {model_name!r}")
    task = task_of(model_cfg.name)
    changes = {k: v for k, v in (("minutes", minutes), ("max_epochs", max_epochs), ("device", device)) if v is not None}
    train_cfg = dataclasses.replace(from_dict(TrainConfig, config["train"]), **changes)
    config = {**config, "train": to_dict(train_cfg)}
    data_cfg = from_dict(DataConfig, {k: v for k, v in config["data"].items() if k != "checksum"})
    prepared = task.prepare(train_cfg, data_cfg)
    if prepared.checksum != config["data"]["checksum"]:
        raise DataError(f"{data_cfg.path} changed since run {run_dir.name} started (checksum differs); "
                        "resume with the original file")
    seed_everything(train_cfg.seed)
    model = create_model(model_cfg)
    dev = resolve_device(train_cfg.device, ctx.local_rank)
    if ctx.is_main:
        atomic_write_text(run_dir / "config.json", json.dumps(config, indent=2) + "\n")
    result = fit(model, prepared, train_cfg, run_dir, config=config, task=task.name, device=dev, resume=True,
                 ctx=ctx, progress=progress)
    return result


# ---- open and read -------------------------------------------------------------------------------------

def resolve_run(run: str | Path, runs_dir: Path) -> Path:
    """A run given as a folder path or as a name inside ``runs_dir``."""
    for candidate in (Path(run), Path(runs_dir) / str(run)):
        if (candidate / "config.json").is_file():
            return candidate
    raise CheckpointError(f"no run {str(run)!r} (looked for {run}/config.json and {Path(runs_dir) / str(run)}); "
                          f"list runs with `ls {runs_dir}`")


def list_runs(runs_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every run folder in ``runs_dir`` with its config.json, by name."""
    return [(p.parent, json.loads(p.read_text())) for p in sorted(Path(runs_dir).glob("*/config.json"))]


def find_checkpoint(target: str | Path, runs_dir: Path) -> Path:
    """A checkpoint file, a run folder (its best.pt) or a run name in ``runs_dir``."""
    path = Path(target)
    if path.is_file():
        return path
    run_dir = resolve_run(target, runs_dir)
    for name in ("best.pt", "last.pt"):
        if (run_dir / name).is_file():
            return run_dir / name
    raise CheckpointError(f"run {run_dir} has no checkpoint yet (no best.pt or last.pt)")


def load_model(checkpoint: Path, device: torch.device | str = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild a model from a checkpoint alone (its config), weights loaded, in eval mode."""
    ckpt = load_checkpoint(checkpoint, map_location=device)
    model_cfg = from_dict(ModelConfig, ckpt["config"]["model"])
    model = create_model(model_cfg)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError:
        raise CheckpointError(f"{checkpoint}: weights do not fit model {model_cfg.name!r} "
                              f"({paper_code(model_cfg)}); the checkpoint belongs to another model") from None
    if get_spec(model_cfg.name).task != ckpt["task"]:
        raise CheckpointError(f"{checkpoint} is a {ckpt['task']!r} checkpoint but model {model_cfg.name!r} "
                              f"solves {get_spec(model_cfg.name).task!r}")
    return model.to(device).eval(), ckpt


# ---- shipped models ------------------------------------------------------------------------------------

def pretrained_dir() -> Path:
    """The folder of shipped models: SWARMCTL_PRETRAINED, else the repository's ``pretrained/``."""
    env = os.environ.get("SWARMCTL_PRETRAINED")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "pretrained"


def is_shipped(checkpoint: Path) -> bool:
    return Path(checkpoint).resolve().parent == pretrained_dir().resolve()


def shipped_checkpoint(task: Task, dataset: str | None = None) -> Path:
    """The shipped checkpoint for ``task`` (and, for image models, ``dataset``); CheckpointError if none."""
    for path in sorted(pretrained_dir().glob("*.pt")):
        ckpt = load_checkpoint(path)
        if ckpt["task"] == task.name and (dataset is None or ckpt["config"]["model"].get("dataset") == dataset):
            return path
    what = f"{task.name} ({dataset})" if dataset else task.name
    raise CheckpointError(f"no shipped {what} model in {pretrained_dir()}; name a run, or train one with "
                          "`swarmctl train`")


def shipped_results_dir(checkpoint: Path, runs_dir: Path) -> Path:
    """Where results computed from a shipped checkpoint go: ``runs_dir/pretrained-NAME``."""
    return Path(runs_dir) / f"pretrained-{Path(checkpoint).stem}"


def export_weights(checkpoint: Path, dest: Path, data_path: str | None = None) -> None:
    """Write ``checkpoint`` without its optimizer state (float32 weights, config, training state) to
    ``dest``, as shipped models are; ``data_path`` replaces the dataset path recorded in its config."""
    ckpt = load_checkpoint(checkpoint)
    config = ckpt["config"]
    if data_path is not None:
        config = {**config, "data": {**config["data"], "path": data_path}}
    weights = {k: v.float() if v.is_floating_point() else v for k, v in ckpt["model"].items()}
    save_checkpoint(Path(dest), model_state=weights, optimizer_state=None, state=ckpt["state"], config=config,
                    task=ckpt["task"])


# ---- open and read (continued) -------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """A trained run opened for reading: its model (weights loaded, eval mode) and what it was trained on.
    ``dir`` is where results computed from it go (``runs/pretrained-NAME`` for a shipped model)."""

    dir: Path
    checkpoint: Path
    model: nn.Module
    ckpt: dict[str, Any]
    model_cfg: ModelConfig
    device: torch.device
    shipped: bool = False

    @property
    def config(self) -> dict[str, Any]:
        return self.ckpt["config"]

    @property
    def task(self) -> Task:
        return get_task(self.ckpt["task"])

    @property
    def label(self) -> str:
        """e.g. ``swarm (192-10-1)``."""
        return f"{self.model_cfg.name} ({paper_code(self.model_cfg)})"

    def data_path(self, data: Path | None = None) -> Path:
        """``data`` when given, else the dataset the run was trained on."""
        return Path(data or self.config["data"]["path"])


def open_run(target: str | Path | None, runs_dir: Path, device: str = "auto", *, task: Task | None = None,
             dataset: str | None = None, progress: DataProgress | None = None) -> Run:
    """Open a run (name or folder: its best.pt, else last.pt) or a checkpoint file, on ``device``.

    ``target`` None opens the shipped model of ``task`` (and ``dataset``); the default dataset it was
    scored on is generated first when missing (a fresh checkout has none).
    """
    dev = resolve_device(device)
    if target is None:
        if task is None:
            raise ValueError("open_run needs a target or a task")
        checkpoint = shipped_checkpoint(task, dataset)
    else:
        checkpoint = find_checkpoint(target, runs_dir)
    model, ckpt = load_model(checkpoint, dev)
    shipped = is_shipped(checkpoint)
    folder = shipped_results_dir(checkpoint, runs_dir) if shipped else checkpoint.parent
    run = Run(folder, checkpoint, model, ckpt, from_dict(ModelConfig, ckpt["config"]["model"]), dev, shipped)
    if shipped:
        data_cfg = from_dict(DataConfig, {k: v for k, v in ckpt["config"]["data"].items() if k != "checksum"})
        run.task.ensure_data(data_cfg, progress)
    return run


def evaluate_run(
    target: str | Path, runs_dir: Path, data: Path | None = None, split: str | None = None, device: str = "auto"
) -> dict[str, Any]:
    """Score a checkpoint with its task's metric on ``split`` (default: the task's); JSON types only."""
    return evaluate(open_run(target, runs_dir, device), data, split)


def evaluate(run: Run, data: Path | None = None, split: str | None = None) -> dict[str, Any]:
    """Score an opened run with its task's metric on ``split`` (default: the task's); JSON types only."""
    state, task = run.ckpt["state"], run.task
    metrics = task.evaluate(run.model, run.ckpt, data, split or task.default_split, run.device)
    return {
        "model": run.model_cfg.name,
        "task": task.name,
        "code": paper_code(run.model_cfg),
        "parameters": count_parameters(run.model),
        "checkpoint": str(run.checkpoint),
        "epoch": state["best_epoch"] if run.checkpoint.name == "best.pt" else state["epoch"] - 1,
        "net_minutes": state["net_seconds"] / 60,
        **metrics,
    }
