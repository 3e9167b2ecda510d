"""`swarmctl train`: any registered model on its task, time-budgeted, resumable."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Annotated

import typer

from swarmctl.cli._app import app
from swarmctl.cli._options import console, err_console, user_errors
from swarmctl.cli._progress import EpochProgress, ensure_default_data
from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.errors import ConfigError
from swarmctl.models import get_spec, list_models
from swarmctl.training.runs import TASKS, resume_run, start_run, train_config_for

_T = TrainConfig()
INTERRUPTED_EXIT = 130


@app.command("train")
def train_cmd(
    model: Annotated[str, typer.Argument(help=f"Registered model: {', '.join(list_models())}.")],
    hidden: Annotated[int | None, typer.Option(help="Hidden units H [default: the model's].")] = None,
    iters: Annotated[int | None, typer.Option(help="SWARM iterations T [default: the model's].")] = None,
    layers: Annotated[int | None, typer.Option(help="Layers L [default: the model's].")] = None,
    inducing: Annotated[int | None, typer.Option(help="Set Transformer inducing points m.")] = None,
    heads: Annotated[int | None, typer.Option(help="Attention heads (must divide --hidden).")] = None,
    pooling: Annotated[str | None, typer.Option(help="SWARM pooling inside the cell: mean or causal.")] = None,
    dropout: Annotated[float, typer.Option(help="SWARM dropout on h after every iteration.")] = 0.0,
    lr: Annotated[float | None, typer.Option(help="Adam learning rate.", show_default=f"{_T.lr}")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Tasks per batch.", show_default=f"{_T.batch_size}")] = None,
    minutes: Annotated[float | None, typer.Option(help="Net optimisation budget in minutes (validation and "
                                                       "checkpoints excluded).", show_default=f"{_T.minutes}")] = None,
    max_epochs: Annotated[int | None, typer.Option(help="Stop after this many epochs.",
                                                   show_default=f"{_T.max_epochs}")] = None,
    seed: Annotated[int, typer.Option(help="Seed for initialisation, batch order and drawn tasks.")] = _T.seed,
    steps_per_epoch: Annotated[int | None, typer.Option(help="Steps per epoch [default: one pass; mog: 500].")]
    = None,
    val_batches: Annotated[int | None, typer.Option(help="mog: fresh validation batches per epoch.",
                                                    show_default="100")] = None,
    lr_decay_epoch: Annotated[int | None, typer.Option(help="Multiply the lr by 0.1 from this epoch on "
                                                            "[default: never; mog: 70].")] = None,
    beta: Annotated[float | None, typer.Option(help="Backtracking: fraction of epochs without improvement.",
                                               show_default=f"{_T.beta}")] = None,
    alpha: Annotated[float | None, typer.Option(help="Backtracking: learning-rate factor.",
                                                show_default=f"{_T.alpha}")] = None,
    data: Annotated[Path | None, typer.Option(help="HDF5 dataset [default: data/clustering-seed0.h5 for "
                                                   "clustering models, generated when missing].")] = None,
    dataset: Annotated[str | None, typer.Option(help="Image models: mnist, fashion-mnist or cifar10.",
                                                show_default="mnist")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Image models: torchvision root holding the files "
                                                       "(e.g. DIR/MNIST/raw/).", show_default="data")] = None,
    name: Annotated[str | None, typer.Option(help="Run name [default: MODEL-CODE-sSEED].")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Folder holding the runs.")] = Path("runs"),
    device: Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N.", show_default=_T.device)] = None,
    resume: Annotated[str | None, typer.Option(help="Continue the run with this name or folder.")] = None,
    compile: Annotated[bool, typer.Option("--compile", help="torch.compile the model (SWARM: its step).")] = False,
    amp: Annotated[bool, typer.Option("--amp", help="bfloat16 autocast.")] = False,
) -> None:
    """Train a registered model on its task until the time budget is spent.

    Defaults shown are for clustering models; MoG-parameter models (``*-mog*``) use their task's
    schedule (batch 10, 500 steps per epoch, 100 epochs, lr x 0.1 from epoch 70, no backtracking).
    Writes runs/NAME/: config.json, metrics.jsonl, best.pt, last.pt, curves.png. Launch with
    `torchrun --nproc_per_node=N -m swarmctl train ...` for several GPUs or processes.
    """
    is_main = int(os.environ.get("RANK", "0")) == 0
    progress_cm = EpochProgress() if is_main else contextlib.nullcontext()
    with user_errors():
        if resume is not None:
            with progress_cm as progress:
                result = resume_run(resume, runs_dir, model_name=model, minutes=minutes, max_epochs=max_epochs,
                                    device=device, progress=progress)
        else:
            task = get_spec(model).task
            if task != "image" and (dataset is not None or data_dir is not None):
                raise ConfigError("--dataset and --data-dir are for image models (swarm-image); use --data")
            if task == "image" and data is not None:
                raise ConfigError("image models read torchvision files: use --dataset and --data-dir, not --data")
            model_cfg = ModelConfig(name=model, dim_hidden=hidden, n_iter=iters, n_layers=layers,
                                    n_inducing=inducing, n_heads=heads, pooling=pooling, dropout=dropout,
                                    dataset=(dataset or "mnist") if task == "image" else None)
            train_cfg = train_config_for(model, lr=lr, batch_size=batch_size, minutes=minutes, max_epochs=max_epochs,
                                         seed=seed, device=device, amp=amp, compile=compile, beta=beta, alpha=alpha,
                                         steps_per_epoch=steps_per_epoch, val_batches=val_batches,
                                         lr_decay_epoch=lr_decay_epoch)
            default_data = TASKS[task].default_data
            if task == "image":
                data_cfg = DataConfig(path=str(data_dir or default_data), dataset=model_cfg.dataset)
            else:
                data_path = data or (Path(default_data) if default_data else None)
                if data is None and data_path is not None and is_main:
                    ensure_default_data(data_path)
                data_cfg = DataConfig(path=None if data_path is None else str(data_path))
            with progress_cm as progress:
                result = start_run(model_cfg, train_cfg, data_cfg, runs_dir, name, progress=progress)
    if not is_main:
        return
    if result.interrupted:
        err_console.print(f"{result.stop_reason}: saved {result.run_dir / 'last.pt'} after {result.epochs} "
                          f"epoch(s); continue with: swarmctl train {model} --resume {result.run_dir.name}"
                          + (f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""), highlight=False,
                          soft_wrap=True)
        raise typer.Exit(INTERRUPTED_EXIT)
    console.print(
        f"done ({result.stop_reason}): best val {result.best_val:.4f} at epoch {result.best_epoch}, "
        f"{result.epochs} epochs, {result.backtracks} backtracks, net {result.net_seconds / 60:.1f} min "
        f"+ {result.eval_seconds / 60:.1f} min validation/checkpoints -> {result.run_dir}", highlight=False)
