"""`swarmctl shuffle-variance`: loss spread under random reorderings of the input set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from swarmctl.cli._app import app
from swarmctl.cli._options import console, user_errors
from swarmctl.cli._progress import task_progress
from swarmctl.config import ModelConfig, from_dict
from swarmctl.data.hdf5 import read_split
from swarmctl.files import atomic_write_text
from swarmctl.models import paper_code
from swarmctl.plots.shuffle import plot_shuffle_variance
from swarmctl.plots.style import save_figure
from swarmctl.studies.results import ShuffleVarianceResult, load_result, save_result
from swarmctl.studies.shuffle_variance import measure_shuffle_variance
from swarmctl.training.device import resolve_device
from swarmctl.training.runs import find_checkpoint, load_model, resolve_run


@app.command("shuffle-variance")
def shuffle_variance_cmd(
    runs: Annotated[list[str], typer.Argument(metavar="RUN...", help="One or more runs (names or folders).")],
    data: Annotated[Path | None, typer.Option(help="HDF5 dataset [default: the first run's].")] = None,
    tasks: Annotated[int, typer.Option(help="Validation tasks, spread evenly over the set size.")] = 100,
    shuffles: Annotated[int, typer.Option(help="Random orderings per task.")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the orderings.")] = 0,
    out: Annotated[Path | None, typer.Option(help="Output folder [default: RUN/shuffle-variance for one run, "
                                                  "RUNS_DIR/shuffle-variance for several].")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Folder holding the runs.")] = Path("runs"),
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    replot: Annotated[bool, typer.Option("--replot", help="Redraw from saved numbers; no model is run.")] = False,
) -> None:
    """Measure how much each run's loss moves when its input sets are reordered.

    Per task: the relative standard deviation (std / mean) of the Hungarian loss over many random
    orderings. Equivariant models give float-rounding values; the unsorted BiLSTM does not.
    """
    with user_errors():
        run_dirs = [resolve_run(r, runs_dir) for r in runs]
        out_dir = out or (run_dirs[0] / "shuffle-variance" if len(run_dirs) == 1 else runs_dir / "shuffle-variance")
        results = []
        for run_dir in run_dirs:
            npz = out_dir / f"{run_dir.name}.npz"
            if replot:
                results.append(load_result(ShuffleVarianceResult, npz))
                continue
            dev = resolve_device(device)
            model, ckpt = load_model(find_checkpoint(run_dir, runs_dir), dev)
            cfg = from_dict(ModelConfig, ckpt["config"]["model"])
            split, _ = read_split(Path(data or ckpt["config"]["data"]["path"]), "val")
            label = f"{cfg.name} ({paper_code(cfg)})"
            with task_progress(label) as progress:
                bar = progress.add_task(label, total=min(tasks, len(split)))
                res = measure_shuffle_variance(model, split, label, tasks, shuffles, seed, device=dev,
                                               progress=lambda k, bar=bar: progress.update(bar, completed=k))
            save_result(res, npz)
            results.append(res)
        fig_path = save_figure(plot_shuffle_variance(results), out_dir / "shuffle-variance")
        summary = {r.label: {"median_rel_std": float(np.median(r.rel_std)), "max_rel_std": float(r.rel_std.max()),
                             "tasks": len(r.sizes), "shuffles": r.n_shuffles} for r in results}
        atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    for label, s in summary.items():
        console.print(f"{label}: relative std median {s['median_rel_std']:.3g}, max {s['max_rel_std']:.3g} "
                      f"over {s['tasks']} tasks x {s['shuffles']} orderings", highlight=False)
    console.print(f"-> {fig_path}, {out_dir / 'summary.json'}", highlight=False)
