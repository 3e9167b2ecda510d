"""`swarmctl plot-entropy`: confidence map and per-class probability maps for one task."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from swarmctl.cli._app import app
from swarmctl.cli._options import console, user_errors
from swarmctl.cli._progress import task_progress
from swarmctl.config import ModelConfig, from_dict
from swarmctl.data.hdf5 import read_split
from swarmctl.models import paper_code
from swarmctl.plots.entropy import plot_class_maps, plot_entropy_map
from swarmctl.plots.style import save_figure
from swarmctl.studies.entropy import choose_task, compute_entropy_map
from swarmctl.studies.probe import METHODS, default_method
from swarmctl.studies.results import EntropyMapResult, load_result, save_result
from swarmctl.training.device import resolve_device
from swarmctl.training.runs import find_checkpoint, load_model, resolve_run


@app.command("plot-entropy")
def plot_entropy_cmd(
    run: Annotated[str, typer.Argument(help="Run name or folder.")],
    data: Annotated[Path | None, typer.Option(help="HDF5 dataset [default: the run's].")] = None,
    task: Annotated[int | None, typer.Option(help="Validation task index (overrides --clusters/--size).")] = None,
    clusters: Annotated[int, typer.Option(help="Pick a task with this many clusters...")] = 7,
    size: Annotated[int, typer.Option(help="...whose number of points is closest to this.")] = 500,
    grid: Annotated[int, typer.Option(help="Grid locations per axis for x*.")] = 150,
    out: Annotated[Path | None, typer.Option(help="Output folder [default: RUN/entropy].")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Folder holding the runs.")] = Path("runs"),
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    method: Annotated[str | None, typer.Option(help="probe (x* alone against the set's pooled states; SWARM with "
                                                    "mean pooling only) or exact (x* joins each set) "
                                                    "[default: probe where it applies, else exact].")] = None,
    replot: Annotated[bool, typer.Option("--replot", help="Redraw from saved numbers; no model is run.")] = False,
) -> None:
    """Draw a model's confidence map for a point x* added to a validation task's set.

    Figure 1: the task with its generating ellipses, and the model's assignment over the entropy of x*'s
    class distribution at every grid location. Figure 2: one panel per class with x*'s probability.
    ``--method exact`` (the paper's definition) runs the set of N + 1 entities for every location; ``probe``
    runs the set once and x* alone with population input (N m_k + h*_k) / (N + 1), ignoring x*'s O(1/N)
    influence on the others: seconds instead of minutes. Both figures' titles name the method.
    """
    if method is not None and method not in METHODS:
        raise typer.BadParameter(f"must be one of {', '.join(METHODS)}, got {method!r}", param_hint="--method")
    with user_errors():
        run_dir = resolve_run(run, runs_dir)
        out_dir = out or run_dir / "entropy"
        if replot:
            res = load_result(EntropyMapResult, out_dir / "entropy.npz")
        else:
            dev = resolve_device(device)
            model, ckpt = load_model(find_checkpoint(run_dir, runs_dir), dev)
            cfg = from_dict(ModelConfig, ckpt["config"]["model"])
            split, _ = read_split(Path(data or ckpt["config"]["data"]["path"]), "val")
            index = choose_task(split, task, clusters, size)
            label = f"{cfg.name} ({paper_code(cfg)})"
            method = method or default_method(model)
            with task_progress("grid") as progress:
                bar = progress.add_task(f"x* grid {grid}x{grid} ({method})", total=grid * grid)
                res = compute_entropy_map(model, split, index, label, grid, device=dev, method=method,
                                          progress=lambda k, n: progress.update(bar, completed=k))
            save_result(res, out_dir / "entropy.npz")
        p1 = save_figure(plot_entropy_map(res), out_dir / "entropy")
        p2 = save_figure(plot_class_maps(res), out_dir / "classes")
    console.print(f"task {res.task_index} ({len(res.means)} clusters, {len(res.points)} points), grid "
                  f"{len(res.grid_x)}x{len(res.grid_y)}, {res.method}, computed in {res.seconds:.1f} s -> {p1}, {p2}",
                  highlight=False)
