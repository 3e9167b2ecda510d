"""`swarmctl gen-data`: seeded mixture-of-Gaussians clustering tasks to HDF5."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

from swarmctl.cli._app import app
from swarmctl.cli._options import float_option, option, say, seed_option, user_errors
from swarmctl.cli._progress import DataGenerationProgress
from swarmctl.config import clustering_data_path, mog_test_data_path
from swarmctl.data.tasks import ClusteringParams
from swarmctl.tasks import DATA_KINDS, data_task

_P = ClusteringParams()


@app.command("gen-data")
def gen_data_cmd(
    seed: Annotated[int, seed_option(help="Seed of the legacy NumPy RandomState (0: the paper's draws).")] = 0,
    task: Annotated[str, option(help=f"{DATA_KINDS[0]} (train/val splits) or {DATA_KINDS[1]} (a fixed test "
                                           "set of 4-component mixtures for MoG-parameter models).")]
    = DATA_KINDS[0],
    out: Annotated[Path | None, option(help=f"Output file [default: {clustering_data_path('{SEED}')} or "
                                                  f"{mog_test_data_path('{SEED}')}].")] = None,
    tasks: Annotated[int, option(help="Number of tasks (train + validation).")] = _P.n_tasks,
    val_fraction: Annotated[float, float_option(help="Fraction of tasks, taken from the end, for validation.")]
    = _P.val_fraction,
    k_min: Annotated[int, option(help="Fewest clusters per task.")] = _P.k_min,
    k_max: Annotated[int, option(help="Most clusters per task (at most 10).")] = _P.k_max,
    n_min: Annotated[int, option(help="Fewest points per task (at least 2).")] = _P.n_min,
    n_max: Annotated[int, option(help="Most points per task.")] = _P.n_max,
    wishart_df: Annotated[float, float_option(help="Degrees of freedom of the inverse-Wishart covariances.")]
    = _P.wishart_df,
    wishart_scale: Annotated[float, float_option(help="Scale s of the inverse-Wishart (scale matrix s*I).")]
    = _P.wishart_scale,
    force: Annotated[bool, option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Generate seeded mixture-of-Gaussians clustering tasks and write them to HDF5.

    Clustering, per task: K clusters uniform in k-min..k-max, N points uniform in n-min..n-max, equal-weight
    multinomial counts, inverse-Wishart covariances, N(0, I) means, points shuffled. The last
    val-fraction of the tasks form the validation split. mog4: 4 isotropic clusters (sigma 0.3),
    means uniform in (-4, 4)^2, Dirichlet(1) weights, N uniform in 100..499 per batch of 10; only
    --tasks, --seed, --out and --force apply. Same seed, same arrays.
    """
    with user_errors():
        start = time.perf_counter()
        path, info, holds = data_task(task).generate_data(
            out, seed, tasks, force=force, progress=DataGenerationProgress(), val_fraction=val_fraction,
            k_min=k_min, k_max=k_max, n_min=n_min, n_max=n_max, wishart_df=wishart_df, wishart_scale=wishart_scale)
    say(f"wrote {path}: {holds}, seed {seed}, {time.perf_counter() - start:.1f} s (checksum {info['checksum'][:12]})")
