"""`swarmctl sample`: a class-conditional grid of images from a trained SWARM Transformer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from swarmctl.cli._app import app
from swarmctl.cli._options import (
    RUNS_DIR,
    Device,
    RunsDir,
    console,
    flush_output,
    option,
    positive,
    say,
    seed_option,
    user_errors,
)
from swarmctl.files import atomic_write, check_output_file, staged_writes
from swarmctl.plots.samples import plot_samples
from swarmctl.plots.style import save_figure
from swarmctl.studies.sampling import open_sample_run, sample_run
from swarmctl.tasks import tasks_for

_SAMPLED = tasks_for("sample")
DATASETS = [d for t in _SAMPLED for d in t.datasets]


def _known_dataset(value: str) -> str:
    if value not in DATASETS:
        raise typer.BadParameter(f"unknown dataset {value!r}; choose one of {', '.join(DATASETS)}")
    return value


def _png_path(value: Path | None) -> Path | None:
    if value is not None and value.suffix.lower() != ".png":
        raise typer.BadParameter(f"{value} does not end in .png; sample writes PNG images (and a .npy array "
                                 "beside them): give a name such as samples.png")
    return value


@app.command("sample")
def sample_cmd(
    dataset: Annotated[str, option(help=f"{', '.join(DATASETS)}.", callback=_known_dataset)]
    = next((t.default_dataset for t in _SAMPLED if t.default_dataset), ""),
    run: Annotated[str | None, option(help="Run name or folder [default: the newest finished image run "
                                           "for --dataset, else the shipped model].")] = None,
    per_class: Annotated[int, option(help="Images per class (one row per class).", min=1)] = 2,
    temperature: Annotated[float, option(help="Softmax temperature (> 0).", callback=positive)] = 1.0,
    seed: Annotated[int, seed_option(help="Seed of the sampling noise.")] = 0,
    out: Annotated[Path | None, option(help="PNG file, ending in .png (the images also go to the same name "
                                            "ending in .npy) [default: RUN/samples-sSEED.png; "
                                            "runs/pretrained-NAME/ for a shipped model].",
                                       callback=_png_path)] = None,
    full: Annotated[bool, option("--full", help="Use the full-recompute reference sampler "
                                                     "(one forward pass per sub-pixel; slow).")] = False,
    runs_dir: RunsDir = RUNS_DIR,
    device: Device = "auto",
) -> None:
    """Draw class-conditional images from a trained SWARM Transformer (swarm-image)."""
    with user_errors():
        if out is not None:
            check_output_file(out)
            check_output_file(out.with_suffix(".npy"))
        opened, chosen = open_sample_run(run, runs_dir, dataset, device)
        if chosen:
            say(chosen)
        path = Path(out or opened.dir / f"samples-s{seed}.png")
        for written in (path, path.with_suffix(".npy")):  # never over the checkpoint it reads
            check_output_file(written, [opened.checkpoint])
        with console.status(f"sampling {10 * per_class} images ({'full recompute' if full else 'incremental'})"):
            grid = sample_run(opened, per_class, temperature, seed, incremental=not full)
        with staged_writes([opened.checkpoint]):  # both files, or neither; once this is printed
            save_figure(plot_samples(grid.images, f"{grid.label}, T={temperature:g}, seed {seed}"), path)
            atomic_write(path.with_suffix(".npy"), lambda fh: np.save(fh, grid.images))
            say(f"{grid.images.shape[0] * grid.images.shape[1]} images in {grid.seconds:.1f} s -> {path}")
            flush_output()
