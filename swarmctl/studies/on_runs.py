"""The studies of one opened run: read the validation split it was trained on (or ``data``), then
run the study on its model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from swarmctl.data.hdf5 import read_split
from swarmctl.errors import CheckpointError
from swarmctl.runs import Run
from swarmctl.studies.entropy import choose_task, compute_entropy_map
from swarmctl.studies.probe import DEFAULT_METHOD
from swarmctl.studies.results import EntropyMapResult, ShuffleVarianceResult
from swarmctl.studies.shuffle_variance import measure_shuffle_variance
from swarmctl.tasks.clustering import ClusteringTask


def require_clustering(run: Run, study: str) -> None:
    """The studies of this module need a model that assigns clusters to points (task clustering)."""
    if run.task.name != ClusteringTask.name:
        raise CheckpointError(f"{study} needs a clustering run (swarm, lstm, set-transformer, ...); "
                              f"{run.checkpoint} is a {run.task.name} run ({run.label})")


def entropy_map_of_run(run: Run, data: Path | None = None, task: int | None = None, clusters: int = 7,
                       size: int = 500, grid: int = 150, method: str | None = None,
                       progress: Callable[[int, int], None] | None = None) -> EntropyMapResult:
    """:func:`compute_entropy_map` on one validation task (``task``, or one chosen by clusters and size);
    ``method`` None: ``exact``."""
    require_clustering(run, "plot-entropy")
    split, _ = read_split(run.data_path(data), "val")
    index = choose_task(split, task, clusters, size)
    return compute_entropy_map(run.model, split, index, run.label, grid, device=run.device,
                               method=method or DEFAULT_METHOD, progress=progress)


def shuffle_variance_of_run(run: Run, data: Path | None = None, tasks: int = 100, shuffles: int = 1000,
                            seed: int = 0,
                            progress: Callable[[int, int], None] | None = None) -> ShuffleVarianceResult:
    """:func:`measure_shuffle_variance` on ``tasks`` validation tasks; ``progress(done, total)``."""
    require_clustering(run, "shuffle-variance")
    split, _ = read_split(run.data_path(data), "val")
    total = min(tasks, len(split))
    report = None if progress is None else lambda k: progress(k, total)
    return measure_shuffle_variance(run.model, split, run.label, tasks, shuffles, seed, device=run.device,
                                    progress=report)
