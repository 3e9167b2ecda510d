"""`swarmctl sample`: a class-conditional grid of images from a trained SWARM Transformer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from swarmctl.cli._app import app
from swarmctl.cli._options import console, user_errors
from swarmctl.config import ModelConfig, from_dict
from swarmctl.errors import CheckpointError
from swarmctl.files import atomic_write
from swarmctl.models import paper_code
from swarmctl.plots.samples import plot_samples
from swarmctl.plots.style import save_figure
from swarmctl.pretrained import results_dir, shipped_checkpoint
from swarmctl.studies.sampling import newest_image_run, sample_grid
from swarmctl.training.device import resolve_device
from swarmctl.training.runs import find_checkpoint, load_model, resolve_run


def _save_npy(path: str, array: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, array)


@app.command("sample")
def sample_cmd(
    dataset: Annotated[str, typer.Option(help="mnist, fashion-mnist or cifar10.")] = "mnist",
    run: Annotated[str | None, typer.Option(help="Run name or folder \\[default: the newest image run for "
                                                 "--dataset, else the shipped model].")] = None,
    per_class: Annotated[int, typer.Option(help="Images per class (one row per class).")] = 2,
    temperature: Annotated[float, typer.Option(help="Softmax temperature (> 0).")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the sampling noise.")] = 0,
    out: Annotated[Path | None, typer.Option(help="PNG file \\[default: RUN/samples-sSEED.png].")] = None,
    full: Annotated[bool, typer.Option("--full", help="Use the full-recompute reference sampler "
                                                     "(one forward pass per sub-pixel; slow).")] = False,
    runs_dir: Annotated[Path, typer.Option(help="Folder holding the runs.")] = Path("runs"),
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
) -> None:
    """Draw class-conditional images from a trained SWARM Transformer (swarm-image)."""
    with user_errors():
        if run is not None:
            run_dir = resolve_run(run, runs_dir)
            checkpoint = find_checkpoint(run_dir, runs_dir)
        else:
            try:
                run_dir = newest_image_run(runs_dir, dataset)
                checkpoint = find_checkpoint(run_dir, runs_dir)
            except CheckpointError as no_run:  # no local run: the shipped model for the dataset, if there is one
                try:
                    checkpoint = shipped_checkpoint("image", dataset)
                except CheckpointError:
                    raise no_run from None
                run_dir = results_dir(checkpoint, runs_dir)
                console.print(f"no {dataset} run in {runs_dir}: using the shipped model {checkpoint}", highlight=False)
        dev = resolve_device(device)
        model, ckpt = load_model(checkpoint, dev)
        cfg = from_dict(ModelConfig, ckpt["config"]["model"])
        if ckpt["task"] != "image":
            raise CheckpointError(f"run {run_dir.name} is a {ckpt['task']!r} run; sample needs a swarm-image run")
        label = f"{cfg.name} ({paper_code(cfg)}) on {cfg.dataset}"
        with console.status(f"sampling {10 * per_class} images ({'full recompute' if full else 'incremental'})"):
            grid = sample_grid(model, label, per_class, temperature, seed, incremental=not full, device=dev)
        path = Path(out or run_dir / f"samples-s{seed}.png")
        path = save_figure(plot_samples(grid.images, f"{label}, T={temperature:g}, seed {seed}"), path)
        atomic_write(path.with_suffix(".npy"), lambda tmp: _save_npy(tmp, grid.images))
    console.print(f"{grid.images.shape[0] * grid.images.shape[1]} images in {grid.seconds:.1f} s -> {path}",
                  highlight=False)
