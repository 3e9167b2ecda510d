"""`swarmctl sample`: a class-conditional grid of images from a trained SWARM Transformer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from swarmctl.catalog import tasks
from swarmctl.cli._app import app
from swarmctl.cli._options import (
    RUNS_DIR,
    Device,
    RunsDir,
    count,
    flush_output,
    option,
    positive_number,
    say,
    seed_option,
)

_SAMPLED = tasks("sample")
DATASETS = [d for t in _SAMPLED for d in t["datasets"]]


@app.command("sample")
def sample_cmd(
    dataset: Annotated[Literal[tuple(DATASETS)], option(help="The images the model was trained on.")]  # type: ignore[valid-type]
    = next((t["default_dataset"] for t in _SAMPLED if t["default_dataset"]), ""),
    run: Annotated[str | None, option(help="Run name, run folder or checkpoint file [default: the newest "
                                           "finished image run for --dataset, else the shipped model].")] = None,
    per_class: Annotated[int, count(help="Images per class (one column per class).")] = 2,
    temperature: Annotated[float, positive_number(help="Softmax temperature.")] = 1.0,
    seed: Annotated[int, seed_option(help="Seed of the sampling noise.")] = 0,
    out: Annotated[Path | None, option(help="PNG file, ending in .png (the images also go to the same name "
                                            "ending in .npy) [default: RUN/samples-sSEED.png; "
                                            "runs/pretrained-NAME/ for a shipped model].")] = None,
    full: Annotated[bool, option("--full", help="Use the full-recompute reference sampler "
                                                     "(one forward pass per sub-pixel; slow).")] = False,
    force: Annotated[bool, option("--force", help="Replace an existing --out file and the .npy beside it.")]
    = False,
    runs_dir: RunsDir = RUNS_DIR,
    device: Device = "auto",
) -> None:
    """Draw class-conditional images from a trained SWARM Transformer (swarm-image)."""
    from swarmctl.cli._progress import DelayedBar
    from swarmctl.plots.samples import plot_samples
    from swarmctl.plots.style import save_figure
    from swarmctl.studies.sampling import samples

    with DelayedBar(f"sampling {10 * per_class} images ({'full recompute' if full else 'incremental'})") as bar, \
            samples(run, runs_dir, dataset, device, per_class, temperature, seed, out, incremental=not full,
                    announce=say, force=force, progress=lambda k, n: bar(k / n)) as drawn:
        bar.close()
        grid = drawn.grid  # both files, or neither; once this is printed
        save_figure(plot_samples(grid.images, f"{grid.label}, T={temperature:g}, seed {seed}"), drawn.path)
        say(f"{grid.images.shape[0] * grid.images.shape[1]} images in {grid.seconds:.1f} s -> {drawn.path}, "
            f"{drawn.array.name}")
        flush_output()
