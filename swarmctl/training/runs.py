"""Runs: start, resume and evaluate a training run of any registered model on its task.

A run is a folder ``runs/NAME`` holding config.json, metrics.jsonl, best.pt, last.pt, curves.png.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from swarmctl.config import DataConfig, ModelConfig, TrainConfig, from_dict, to_dict
from swarmctl.errors import CheckpointError, DataError
from swarmctl.files import atomic_write_text
from swarmctl.models import complete_config, count_parameters, create_model, get_spec, paper_code
from swarmctl.plots.curves import plot_curves
from swarmctl.plots.style import save_figure
from swarmctl.training.checkpoint import load_checkpoint
from swarmctl.training.clustering import ClusteringTask
from swarmctl.training.device import barrier, init_distributed, resolve_device, seed_everything
from swarmctl.training.image import ImageTask
from swarmctl.training.loop import FitResult, ProgressHook, fit
from swarmctl.training.mog import MogTask
from swarmctl.training.tasks import Task

TASKS: dict[str, Task] = {task.name: task for task in (ClusteringTask(), MogTask(), ImageTask())}


def task_of(model_name: str) -> Task:
    return TASKS[get_spec(model_name).task]


def train_config_for(model_name: str, **options: Any) -> TrainConfig:
    """A TrainConfig with the model's task defaults; options that are None keep the default."""
    values = {**task_of(model_name).train_defaults, **{k: v for k, v in options.items() if v is not None}}
    return TrainConfig(**values)


def default_run_name(model_cfg: ModelConfig, seed: int) -> str:
    """e.g. ``swarm-192-10-1-s0``."""
    return f"{model_cfg.name}-{paper_code(model_cfg)}-s{seed}"


def _plot(records: list[dict[str, Any]], run_dir: Path) -> None:
    if records:
        save_figure(plot_curves(records, title=run_dir.name), run_dir / "curves.png")


def start_run(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    data_cfg: DataConfig,
    runs_dir: Path,
    name: str | None = None,
    progress: ProgressHook | None = None,
) -> FitResult:
    """Start a new run ``runs_dir/name`` (default name from model, paper code and seed).

    Everything is validated before the run folder is created, so a bad option leaves nothing behind.
    """
    ctx = init_distributed(train_cfg.device)
    model_cfg = complete_config(model_cfg)
    task = task_of(model_cfg.name)
    seed_everything(train_cfg.seed)
    model = create_model(model_cfg)  # validates the hyper-parameters
    device = resolve_device(train_cfg.device, ctx.local_rank)
    prepared = task.prepare(train_cfg, data_cfg)
    run_dir = Path(runs_dir) / (name or default_run_name(model_cfg, train_cfg.seed))
    exists = (run_dir / "config.json").exists()
    barrier(ctx)  # every rank has looked before rank 0 writes: all of them agree
    if exists:
        raise CheckpointError(f"run {run_dir} exists; continue it with --resume {run_dir.name} or pick another --name")
    config = {
        "model": to_dict(model_cfg),
        "train": to_dict(train_cfg),
        "data": {**to_dict(data_cfg), "checksum": prepared.data_checksum},
        "run": {"name": run_dir.name, "task": task.name, "parameters": count_parameters(model),
                "code": paper_code(model_cfg), "device": str(device), "world_size": ctx.world_size},
    }
    if ctx.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.json", json.dumps(config, indent=2) + "\n")
    return fit(model, prepared.train, prepared.val, prepared.loss_fn, train_cfg, run_dir, config=config,
               task=task.name, device=device, ctx=ctx, progress=progress, plot=_plot,
               extra_metrics=prepared.extra_metrics)


def resolve_run(run: str | Path, runs_dir: Path) -> Path:
    """A run given as a folder path or as a name inside ``runs_dir``."""
    for candidate in (Path(run), Path(runs_dir) / str(run)):
        if (candidate / "config.json").is_file():
            return candidate
    raise CheckpointError(f"no run {str(run)!r} (looked for {run}/config.json and {Path(runs_dir) / str(run)}); "
                          f"list runs with `ls {runs_dir}`")


def resume_run(
    run: str | Path,
    runs_dir: Path,
    model_name: str | None = None,
    minutes: float | None = None,
    max_epochs: int | None = None,
    device: str | None = None,
    progress: ProgressHook | None = None,
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
    if prepared.data_checksum != config["data"]["checksum"]:
        raise DataError(f"{data_cfg.path} changed since run {run_dir.name} started (checksum differs); "
                        "resume with the original file")
    seed_everything(train_cfg.seed)
    model = create_model(model_cfg)
    dev = resolve_device(train_cfg.device, ctx.local_rank)
    if ctx.is_main:
        atomic_write_text(run_dir / "config.json", json.dumps(config, indent=2) + "\n")
    return fit(model, prepared.train, prepared.val, prepared.loss_fn, train_cfg, run_dir, config=config,
               task=task.name, device=dev, resume=True, ctx=ctx, progress=progress, plot=_plot,
               extra_metrics=prepared.extra_metrics)


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


def evaluate_run(
    target: str | Path, runs_dir: Path, data: Path | None = None, split: str | None = None, device: str = "auto"
) -> dict[str, Any]:
    """Score a checkpoint with its task's metric on ``split`` (default: the task's); JSON types only."""
    dev = resolve_device(device)
    ckpt_path = find_checkpoint(target, runs_dir)
    model, ckpt = load_model(ckpt_path, dev)
    model_cfg = from_dict(ModelConfig, ckpt["config"]["model"])
    state = ckpt["state"]
    task = TASKS[ckpt["task"]]
    metrics = task.evaluate(model, ckpt, data, split or task.default_split, dev)
    return {
        "model": model_cfg.name,
        "task": ckpt["task"],
        "code": paper_code(model_cfg),
        "parameters": count_parameters(model),
        "checkpoint": str(ckpt_path),
        "epoch": state["best_epoch"] if ckpt_path.name == "best.pt" else state["epoch"] - 1,
        "net_minutes": state["net_seconds"] / 60,
        **metrics,
    }
