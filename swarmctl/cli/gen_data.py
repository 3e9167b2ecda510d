"""`swarmctl gen-data`: seeded mixture-of-Gaussians clustering tasks to HDF5."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from swarmctl.cli._app import app
from swarmctl.cli._options import console, user_errors
from swarmctl.cli._progress import task_progress
from swarmctl.data.hdf5 import ensure_writable, generate_dataset, generate_mog_dataset
from swarmctl.data.tasks import ClusteringParams
from swarmctl.errors import ConfigError

_P = ClusteringParams()


@app.command("gen-data")
def gen_data_cmd(
    seed: Annotated[int, typer.Option(help="Seed of the legacy NumPy RandomState (0: the paper's draws).")] = 0,
    task: Annotated[str, typer.Option(help="clustering (train/val splits) or mog4 (a fixed test set of "
                                           "4-component mixtures for MoG-parameter models).")] = "clustering",
    out: Annotated[Path | None, typer.Option(help="Output file [default: data/clustering-seed{SEED}.h5 or "
                                                  "data/mog4-test-seed{SEED}.h5].")] = None,
    tasks: Annotated[int, typer.Option(help="Number of tasks (train + validation).")] = _P.n_tasks,
    val_fraction: Annotated[float, typer.Option(help="Fraction of tasks, taken from the end, for validation.")]
    = _P.val_fraction,
    k_min: Annotated[int, typer.Option(help="Fewest clusters per task.")] = _P.k_min,
    k_max: Annotated[int, typer.Option(help="Most clusters per task (at most 10).")] = _P.k_max,
    n_min: Annotated[int, typer.Option(help="Fewest points per task (at least 2).")] = _P.n_min,
    n_max: Annotated[int, typer.Option(help="Most points per task.")] = _P.n_max,
    wishart_df: Annotated[float, typer.Option(help="Degrees of freedom of the inverse-Wishart covariances.")]
    = _P.wishart_df,
    wishart_scale: Annotated[float, typer.Option(help="Scale s of the inverse-Wishart (scale matrix s*I).")]
    = _P.wishart_scale,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Generate seeded mixture-of-Gaussians clustering tasks and write them to HDF5.

    Clustering, per task: K clusters uniform in k-min..k-max, N points uniform in n-min..n-max, equal-weight
    multinomial counts, inverse-Wishart covariances, N(0, I) means, points shuffled. The last
    val-fraction of the tasks form the validation split. mog4: 4 isotropic clusters (sigma 0.3),
    means uniform in (-4, 4)^2, Dirichlet(1) weights, N uniform in 100..499 per batch of 10; only
    --tasks, --seed, --out and --force apply. Same seed, same arrays.
    """
    with user_errors():
        if task == "mog4":
            path = out or Path(f"data/mog4-test-seed{seed}.h5")
            start = time.perf_counter()
            info = generate_mog_dataset(path, tasks, seed, force=force)
            console.print(f"wrote {path}: {tasks:,} mog4 test tasks, seed {seed}, {time.perf_counter() - start:.1f} s "
                          f"(checksum {info['checksum'][:12]})", highlight=False)
            return
        if task != "clustering":
            raise ConfigError(f"task must be clustering or mog4, got {task!r}")
        params = ClusteringParams(n_tasks=tasks, val_fraction=val_fraction, k_min=k_min, k_max=k_max,
                                  n_min=n_min, n_max=n_max, wishart_df=wishart_df, wishart_scale=wishart_scale)
        path = out or Path(f"data/clustering-seed{seed}.h5")
        ensure_writable(path, force)
        start = time.perf_counter()
        with task_progress("generating tasks") as progress:
            bar = progress.add_task("generating tasks", total=params.n_tasks)
            info = generate_dataset(path, params, seed, force=force,
                                    progress=lambda k: progress.update(bar, completed=k))
    console.print(f"wrote {path}: {params.n_tasks - params.n_val} train + {params.n_val} validation tasks, "
                  f"seed {seed}, {time.perf_counter() - start:.1f} s (checksum {info['checksum'][:12]})",
                  highlight=False)
