"""Direct amortized clustering end to end: train a registered model on an HDF5 dataset, resume a
run, and evaluate a checkpoint with the Hungarian-matched loss, matched accuracy and the oracle."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from swarmctl.config import DataConfig, ModelConfig, TrainConfig, from_dict, to_dict
from swarmctl.data.dataset import ClusteringBatch, bucketed_batches
from swarmctl.data.hdf5 import read_dataset
from swarmctl.errors import CheckpointError, DataError
from swarmctl.files import atomic_write_text
from swarmctl.models import complete_config, count_parameters, create_model, paper_code
from swarmctl.plots.curves import plot_curves
from swarmctl.plots.style import save_figure
from swarmctl.training.checkpoint import load_checkpoint
from swarmctl.training.device import DistContext, init_distributed, resolve_device, seed_everything
from swarmctl.training.loop import FitResult, ProgressHook, evaluate, fit
from swarmctl.training.losses import hungarian_ce, matched_accuracy, oracle_logits

TASK = "clustering"
EVAL_BATCH = 100


def clustering_loss(model: nn.Module, batch: ClusteringBatch) -> torch.Tensor:
    """Per-task Hungarian-matched cross-entropy, (B,)."""
    return hungarian_ce(model(batch.x, batch.mask), batch.labels, batch.mask).per_task


def default_run_name(model_cfg: ModelConfig, seed: int) -> str:
    """e.g. ``swarm-192-10-1-s0``."""
    return f"{model_cfg.name}-{paper_code(model_cfg)}-s{seed}"


def _plot(records: list[dict[str, Any]], run_dir: Path) -> None:
    if records:
        save_figure(plot_curves(records, title=run_dir.name), run_dir / "curves.png")


def _load_data(data_cfg: DataConfig) -> tuple[dict, dict[str, Any]]:
    splits, info = read_dataset(Path(data_cfg.path))
    if info["kind"] != TASK:
        raise DataError(f"{data_cfg.path} holds {info['kind']!r} tasks, not clustering tasks")
    for split in (data_cfg.train_split, data_cfg.val_split):
        if split not in splits:
            raise DataError(f"{data_cfg.path} has no split {split!r}; it has: {', '.join(splits)}")
    return splits, info


def train_clustering(
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
    seed_everything(train_cfg.seed)
    model = create_model(model_cfg)  # validates the hyper-parameters
    device = resolve_device(train_cfg.device, ctx.local_rank)
    splits, info = _load_data(data_cfg)
    run_dir = Path(runs_dir) / (name or default_run_name(model_cfg, train_cfg.seed))
    if (run_dir / "config.json").exists():
        raise CheckpointError(f"run {run_dir} exists; continue it with --resume {run_dir.name} or pick another --name")
    config = {
        "model": to_dict(model_cfg),
        "train": to_dict(train_cfg),
        "data": {**to_dict(data_cfg), "checksum": info["checksum"]},
        "run": {"name": run_dir.name, "parameters": count_parameters(model), "code": paper_code(model_cfg),
                "device": str(device), "world_size": ctx.world_size},
    }
    if ctx.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.json", json.dumps(config, indent=2) + "\n")
    return _fit(model, splits, train_cfg, data_cfg, run_dir, config, device, ctx, progress, resume=False)


def resolve_run(run: str | Path, runs_dir: Path) -> Path:
    """A run given as a folder path or as a name inside ``runs_dir``."""
    for candidate in (Path(run), Path(runs_dir) / str(run)):
        if (candidate / "config.json").is_file():
            return candidate
    raise CheckpointError(f"no run {str(run)!r} (looked for {run}/config.json and {Path(runs_dir) / str(run)}); "
                          f"list runs with `ls {runs_dir}`")


def resume_clustering(
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
    ctx_device = device or "auto"
    ctx = init_distributed(ctx_device)
    run_dir = resolve_run(run, runs_dir)
    if not (run_dir / "last.pt").is_file():
        raise CheckpointError(f"run {run_dir} has no last.pt to resume from; start it again under another --name")
    last = load_checkpoint(run_dir / "last.pt")
    if last["task"] != TASK:
        raise CheckpointError(f"run {run_dir} is a {last['task']!r} run, not a clustering run")
    config = last["config"]
    model_cfg = from_dict(ModelConfig, config["model"])
    if model_name is not None and model_name != model_cfg.name:
        raise CheckpointError(f"run {run_dir.name} trains model {model_cfg.name!r}, not {model_name!r}")
    changes = {k: v for k, v in (("minutes", minutes), ("max_epochs", max_epochs), ("device", device)) if v is not None}
    train_cfg = dataclasses.replace(from_dict(TrainConfig, config["train"]), **changes)
    config = {**config, "train": to_dict(train_cfg)}
    data_cfg = from_dict(DataConfig, {k: v for k, v in config["data"].items() if k != "checksum"})
    splits, info = _load_data(data_cfg)
    if info["checksum"] != config["data"]["checksum"]:
        raise DataError(f"{data_cfg.path} changed since run {run_dir.name} started (checksum differs); "
                        "resume with the original file")
    seed_everything(train_cfg.seed)
    model = create_model(model_cfg)
    dev = resolve_device(train_cfg.device, ctx.local_rank)
    if ctx.is_main:
        atomic_write_text(run_dir / "config.json", json.dumps(config, indent=2) + "\n")
    return _fit(model, splits, train_cfg, data_cfg, run_dir, config, dev, ctx, progress, resume=True)


def _fit(model, splits, train_cfg, data_cfg, run_dir, config, device, ctx: DistContext, progress, resume):
    train_batches = bucketed_batches(splits[data_cfg.train_split], train_cfg.batch_size)
    val_batches = bucketed_batches(splits[data_cfg.val_split], EVAL_BATCH)
    return fit(model, train_batches, val_batches, clustering_loss, train_cfg, run_dir, config=config, task=TASK,
               device=device, resume=resume, ctx=ctx, progress=progress, plot=_plot)


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
    return model.to(device).eval(), ckpt


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


@torch.no_grad()
def evaluate_clustering(
    target: str | Path, runs_dir: Path, data: Path | None = None, split: str = "val", device: str = "auto"
) -> dict[str, Any]:
    """Hungarian-matched loss, matched accuracy and the true mixture's oracle loss on one split."""
    dev = resolve_device(device)
    ckpt_path = find_checkpoint(target, runs_dir)
    model, ckpt = load_model(ckpt_path, dev)
    if ckpt["task"] != TASK:
        raise CheckpointError(f"{ckpt_path} is a {ckpt['task']!r} checkpoint; eval here scores clustering")
    data_path = Path(data) if data is not None else Path(ckpt["config"]["data"]["path"])
    splits, info = read_dataset(data_path)
    if split not in splits:
        raise DataError(f"{data_path} has no split {split!r}; it has: {', '.join(splits)}")
    tasks = splits[split]
    batches = bucketed_batches(tasks, EVAL_BATCH)
    loss = evaluate(model, batches, clustering_loss, dev)
    acc_sum = oracle_sum = oracle_acc_sum = 0.0
    means, covs = torch.from_numpy(tasks.means), torch.from_numpy(tasks.covs)
    n_clusters = torch.from_numpy(tasks.n_clusters)
    for batch in batches:
        b = batch.to(dev)
        logits = model(b.x, b.mask)
        matched = hungarian_ce(logits, b.labels, b.mask)
        acc_sum += matched_accuracy(logits, b.labels, b.mask, matched.assignment).sum().item()
        idx = batch.index
        oracle = oracle_logits(batch.x, means[idx], covs[idx], n_clusters[idx])
        om = hungarian_ce(oracle, batch.labels, batch.mask)
        oracle_sum += om.per_task.double().sum().item()
        oracle_acc_sum += matched_accuracy(oracle, batch.labels, batch.mask, om.assignment).sum().item()
    n = len(tasks)
    model_cfg = from_dict(ModelConfig, ckpt["config"]["model"])
    state = ckpt["state"]
    return {
        "model": model_cfg.name,
        "code": paper_code(model_cfg),
        "parameters": count_parameters(model),
        "checkpoint": str(ckpt_path),
        "epoch": state["best_epoch"] if ckpt_path.name == "best.pt" else state["epoch"] - 1,
        "net_minutes": state["net_seconds"] / 60,
        "data": str(data_path),
        "split": split,
        "tasks": n,
        "loss": loss,
        "accuracy": acc_sum / n,
        "oracle_loss": oracle_sum / n,
        "oracle_accuracy": oracle_acc_sum / n,
    }
