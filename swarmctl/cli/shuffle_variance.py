"""`swarmctl shuffle-variance`: loss spread under random reorderings of the input set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
from rich.markup import escape

from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, Device, RunsDir, argument, option, say, seed_option, user_errors
from swarmctl.cli._progress import task_progress
from swarmctl.files import atomic_write_text, check_output_folder, staged_writes
from swarmctl.plots.shuffle import plot_shuffle_variance
from swarmctl.plots.style import save_figure
from swarmctl.runs import open_run, resolve_run
from swarmctl.studies.on_runs import require_clustering, shuffle_variance_of_run
from swarmctl.studies.results import ShuffleVarianceResult, load_result, save_result


@app.command("shuffle-variance")
def shuffle_variance_cmd(
    runs: Annotated[list[str], argument(metavar="RUN...", help="One or more runs (names or folders).")],
    data: Annotated[Path | None, option(help="HDF5 dataset [default: the first run's].")] = None,
    tasks: Annotated[int, option(help="Validation tasks, spread evenly over the set size.")] = 100,
    shuffles: Annotated[int, option(help="Random orderings per task.")] = 1000,
    seed: Annotated[int, seed_option(help="Seed of the orderings.")] = 0,
    out: Annotated[Path | None, option(help="Output folder [default: RUN/shuffle-variance for one run, "
                                                  "RUNS_DIR/shuffle-variance for several].")] = None,
    runs_dir: RunsDir = RUNS_DIR,
    device: Device = "auto",
    replot: Annotated[bool, option("--replot", help="Redraw from saved numbers; no model is run.")] = False,
) -> None:
    """Measure how much each run's loss moves when its input sets are reordered.

    Per task: the relative standard deviation (std / mean) of the Hungarian loss over many random
    orderings. Equivariant models give float-rounding values; the unsorted BiLSTM does not.
    """
    with user_errors():
        run_dirs = [resolve_run(r, runs_dir) for r in runs]
        out_dir = out or (run_dirs[0] / "shuffle-variance" if len(run_dirs) == 1 else runs_dir / "shuffle-variance")
        check_output_folder(out_dir)
        results, inputs = [], [data]
        opened_runs = [] if replot else [open_run(run_dir, runs_dir, device) for run_dir in run_dirs]
        for opened in opened_runs:  # every run is checked before any is measured
            require_clustering(opened, "shuffle-variance")
            inputs.append(opened.checkpoint)
        for k, run_dir in enumerate(run_dirs):
            npz = out_dir / f"{run_dir.name}.npz"
            if replot:
                results.append(load_result(ShuffleVarianceResult, npz))
                inputs.append(npz)
                continue
            opened = opened_runs[k]
            with task_progress(escape(opened.label)) as progress:
                bar = progress.add_task(escape(opened.label), total=tasks)
                res = shuffle_variance_of_run(opened, data, tasks, shuffles, seed,
                                              progress=lambda k, n, bar=bar: progress.update(bar, completed=k,
                                                                                             total=n))
            results.append(res)
        with staged_writes(inputs):  # every file, or none
            if not replot:
                for run_dir, res in zip(run_dirs, results, strict=True):
                    save_result(res, out_dir / f"{run_dir.name}.npz")
            fig_path = save_figure(plot_shuffle_variance(results), out_dir / "shuffle-variance")
            summary = {r.label: {"median_rel_std": float(np.median(r.rel_std)),
                                 "max_rel_std": float(r.rel_std.max()), "tasks": len(r.sizes),
                                 "shuffles": r.n_shuffles} for r in results}
            atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    for label, s in summary.items():
        say(f"{label}: relative std median {s['median_rel_std']:.3g}, max {s['max_rel_std']:.3g} "
            f"over {s['tasks']} tasks x {s['shuffles']} orderings")
    say(f"-> {fig_path}, {out_dir / 'summary.json'}")
