"""`swarmctl plot-entropy`: confidence map and per-class probability maps for one task."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, Device, RunsDir, argument, flush_output, option, say, user_errors
from swarmctl.cli._progress import DataGenerationProgress, task_progress
from swarmctl.files import check_output_file, check_output_folder, staged_writes
from swarmctl.plots.entropy import plot_class_maps, plot_entropy_map
from swarmctl.plots.style import save_figure
from swarmctl.runs import open_run, resolve_run, shipped_for, shipped_results_dir
from swarmctl.studies.entropy import check_grid, entropy_map_of_run
from swarmctl.studies.probe import METHODS
from swarmctl.studies.results import EntropyMapResult, load_result, save_result
from swarmctl.tasks import tasks_for

STUDY = "plot-entropy"


@app.command("plot-entropy")
def plot_entropy_cmd(
    run: Annotated[str | None, argument(help="Run name or folder [default: the shipped "
                                             f"{' or '.join(t.name for t in tasks_for(STUDY))} model].")] = None,
    data: Annotated[Path | None, option(help="HDF5 dataset [default: the run's].")] = None,
    index: Annotated[int | None, option(help="Validation task index (overrides --clusters/--size).")] = None,
    clusters: Annotated[int, option(help="Pick a task with this many clusters...")] = 7,
    size: Annotated[int, option(help="...whose number of points is closest to this.")] = 500,
    grid: Annotated[int, option(help="Grid locations per axis for x*.")] = 150,
    out: Annotated[Path | None, option(help="Output folder [default: RUN/entropy; runs/pretrained-NAME/entropy "
                                            "for a shipped model].")] = None,
    runs_dir: RunsDir = RUNS_DIR,
    device: Device = "auto",
    method: Annotated[str | None, option(help="probe (x* alone against the set's pooled states; SWARM with "
                                              "mean pooling only; an approximation, see the README) or "
                                              "exact (x* joins each set)", show_default="exact")] = None,
    replot: Annotated[bool, option("--replot", help="Redraw from saved numbers; no model is run.")] = False,
) -> None:
    """Draw a model's confidence map for a point x* added to a validation task's set.

    Figure 1: the task with its generating ellipses, and the model's assignment over the entropy of x*'s
    class distribution at every grid location. Figure 2: one panel per class with x*'s probability.
    ``--method exact`` (the paper's definition) runs the set of N + 1 entities for every location; ``probe``
    runs the set once and x* alone with population input (N m_k + h*_k) / (N + 1), ignoring x*'s O(1/N)
    influence on the others: seconds instead of minutes, but on a trained model up to 1 nat from exact.
    Both figures' titles name the method.
    """
    if method is not None and method not in METHODS:
        raise typer.BadParameter(f"must be one of {', '.join(METHODS)}, got {method!r}", param_hint="--method")
    with user_errors():
        if out is not None:
            check_output_folder(out)
        inputs: list[Path | None] = [data]
        if replot:
            run_dir = resolve_run(run, runs_dir) if run is not None else \
                shipped_results_dir(shipped_for(STUDY), runs_dir)
            out_dir = out or run_dir / "entropy"
            res = load_result(EntropyMapResult, out_dir / "entropy.npz")
            inputs.append(out_dir / "entropy.npz")
        else:
            check_grid(grid)
            if out is None and run is None:
                check_output_folder(runs_dir)  # before a fresh checkout's dataset is generated for the shipped model
            opened = open_run(resolve_run(run, runs_dir) if run is not None else None, runs_dir, device,
                              study=STUDY, data=data, progress=DataGenerationProgress())
            if opened.shipped:
                say(f"using the shipped model {opened.checkpoint}")
            out_dir = out or opened.dir / "entropy"
            check_output_folder(out_dir)
            inputs.append(opened.checkpoint)
            for name in ("entropy.npz", "entropy.png", "classes.png"):
                check_output_file(out_dir / name, inputs)
            with task_progress("grid") as progress:
                bar = progress.add_task(f"x* grid {grid}x{grid}", total=grid * grid)
                res = entropy_map_of_run(opened, data, index, clusters, size,
                                         grid, method,
                                         progress=lambda k, n: progress.update(bar, completed=k))
        with staged_writes(inputs):  # every file, or none (and no new folder)
            if not replot:
                save_result(res, out_dir / "entropy.npz")
            p1 = save_figure(plot_entropy_map(res), out_dir / "entropy")
            p2 = save_figure(plot_class_maps(res), out_dir / "classes")
            say(f"task {res.task_index} ({len(res.means)} clusters, {len(res.points)} points), grid "
                f"{len(res.grid_x)}x{len(res.grid_y)}, {res.method}, computed in {res.seconds:.1f} s -> {p1}, {p2}")
            flush_output()  # the files appear once this is printed, or not at all
