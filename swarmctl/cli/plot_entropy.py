"""`swarmctl plot-entropy`: confidence map and per-class probability maps for one task."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from swarmctl.catalog import tasks
from swarmctl.cli import _options
from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, Device, RunsDir, argument, count, flush_output, option, say

STUDY = "plot-entropy"


@app.command(STUDY)
def plot_entropy_cmd(
    run: Annotated[str | None, argument(help="Run name or folder [default: the shipped "
                                             f"{' or '.join(t['name'] for t in tasks(STUDY))} model].")] = None,
    data: Annotated[Path | None, option(help="HDF5 dataset [default: the run's].")] = None,
    index: Annotated[int | None, count(help="Validation task index (overrides --clusters/--size).", low=0)] = None,
    clusters: Annotated[int, count(help="Pick a task with this many clusters...")] = 7,
    size: Annotated[int, count(help="...whose number of points is closest to this.")] = 500,
    grid: Annotated[int, count(help="Grid locations per axis for x*.", low=2)] = 150,
    out: Annotated[Path | None, option(help="Output folder [default: RUN/entropy; runs/pretrained-NAME/entropy "
                                            "for a shipped model].")] = None,
    runs_dir: RunsDir = RUNS_DIR,
    device: Device = "auto",
    method: Annotated[Literal["probe", "exact"] | None, option(
        help="probe (x* alone against the set's pooled states; SWARM with mean pooling only; an approximation, see "
             "docs/experiments.md) or exact (x* joins each set)", show_default="exact")] = None,
    replot: Annotated[bool, option("--replot", help="Redraw from saved numbers; no model is run.")] = False,
    force: _options.Force = False,
) -> None:
    """Draw a model's confidence map for a point x* added to a validation task's set.

    Figure 1: the task with its generating ellipses, and the model's assignment over the entropy of x*'s
    class distribution at every grid location. Figure 2: one panel per class with x*'s probability.
    --method exact (the paper's definition) runs the set of N + 1 entities for every location; probe
    runs the set once and x* alone with population input (N m_k + h*_k) / (N + 1), ignoring x*'s O(1/N)
    influence on the others: seconds instead of minutes, but on a trained model up to 1 nat from exact.
    Both figures' titles name the method.
    """
    from swarmctl.cli._progress import DataGenerationProgress, StepBar
    from swarmctl.plots.entropy import plot_class_maps, plot_entropy_map
    from swarmctl.plots.style import save_figure
    from swarmctl.studies.entropy import entropy_maps

    with StepBar(f"x* grid {grid}x{grid}") as bar, \
            entropy_maps(run, runs_dir, device, data, index, clusters, size, grid, method, out, replot,
                         force, progress=bar, data_progress=DataGenerationProgress(), announce=say) as maps:
        bar.close()
        res = maps.result  # every file, or none (and no new folder): once this is printed
        p1 = save_figure(plot_entropy_map(res), maps.figure("entropy"))
        p2 = save_figure(plot_class_maps(res), maps.figure("classes"))
        say(f"task {res.task_index} ({len(res.means)} clusters, {len(res.points)} points), grid "
            f"{len(res.grid_x)}x{len(res.grid_y)}, {res.method}, computed in {res.seconds:.1f} s -> {p1}, {p2}")
        flush_output()
