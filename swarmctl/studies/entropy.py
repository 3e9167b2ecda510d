"""Confidence map of a clustering model (the paper, sec. 4.1.4, Results): for every location x* of a grid, the
class distribution the model gives x* when it is added to a task's set as one more entity."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from swarmctl.config import check_memory, host_memory
from swarmctl.data.clustering_generator import ClusteringTasks
from swarmctl.data.hdf5 import read_split
from swarmctl.errors import ConfigError, either
from swarmctl.files import staged_outputs
from swarmctl.runs import open_run, resolve_run, shipped_for, shipped_results_dir
from swarmctl.studies.probe import DEFAULT_METHOD, METHODS, probe_outputs
from swarmctl.studies.results import EntropyMapResult, load_result, save_result
from swarmctl.tasks import DataProgress

MAX_GRID = 2000  # grid locations per axis


def choose_task(tasks: ClusteringTasks, task: int | None = None, clusters: int = 7, size: int = 500) -> int:
    """``task`` itself, or the task with ``clusters`` clusters whose size is closest to ``size``."""
    if task is not None:
        if not 0 <= task < len(tasks):
            raise ConfigError(f"`index` must be in 0..{len(tasks) - 1}, got {task}")
        return task
    candidates = np.flatnonzero(tasks.n_clusters == clusters)
    if len(candidates) == 0:
        have = ", ".join(str(k) for k in np.unique(tasks.n_clusters))
        raise ConfigError(f"no task with {clusters} clusters in this split; choose `clusters` from {have} or an "
                          "`index`")
    size = min(max(size, 0), 2**62)  # far beyond any set size: the same choice, and no int64 overflow
    return int(candidates[np.argmin(np.abs(tasks.sizes[candidates] - size))])


def check_grid(grid: int) -> None:
    """Grid locations per axis: at least 2, at most MAX_GRID, and within the machine's memory."""
    if not 2 <= grid <= MAX_GRID:
        raise ConfigError(f"`grid` must be in 2..{MAX_GRID} (a figure cannot show more locations per axis), got {grid}")
    check_memory(grid * grid * 200.0, host_memory(), f"a {grid}x{grid} grid", "lower `grid`")


@torch.no_grad()
def compute_entropy_map(
    model: nn.Module,
    tasks: ClusteringTasks,
    task_index: int,
    label: str,
    grid: int = 150,
    batch_entities: int = 400_000,
    device: torch.device | str = "cpu",
    progress: Callable[[int, int], None] | None = None,
    method: str = "exact",
) -> EntropyMapResult:
    """Class probabilities of x* for every grid location.

    ``exact`` (the paper's definition): each location is its own set of N + 1 entities (the task's points,
    then x*), batched ``batch_entities`` entities at a time. ``probe`` (SWARM with mean pooling only): the
    set runs once and x* runs alone against its pooled states, see :mod:`swarmctl.studies.probe`.
    """
    check_grid(grid)
    if method not in METHODS:
        raise ConfigError(f"`method` must be {either(METHODS)}, got {method!r}")
    start = time.perf_counter()
    model.eval()
    pts, lab = tasks.task(task_index)
    K = int(tasks.n_clusters[task_index])
    x = torch.from_numpy(pts).to(device)
    n = len(pts)
    assignment = model(x[None], torch.ones(1, n, dtype=torch.bool, device=device))[0].argmax(-1).cpu().numpy()
    lo, hi = pts.min(0), pts.max(0)  # square cells over the points' bounding box widened by 15% on each side
    pad = 0.15 * (hi - lo).max()
    gx, gy = np.linspace(lo[0] - pad, hi[0] + pad, grid), np.linspace(lo[1] - pad, hi[1] + pad, grid)
    xx, yy = np.meshgrid(gx, gy)  # (G, G): row i is grid_y[i]
    stars = torch.from_numpy(np.stack([xx.ravel(), yy.ravel()], 1).astype(np.float32)).to(device)  # (G*G, 2)
    if method == "probe":
        logits = probe_outputs(model, x, stars, progress=progress)
        probs = [torch.softmax(logits.double(), dim=-1).cpu()]
    else:
        per_batch = max(1, batch_entities // (n + 1))
        probs = []
        for s in range(0, len(stars), per_batch):
            chunk = stars[s : s + per_batch]
            sets = torch.cat([x.expand(len(chunk), n, 2), chunk[:, None, :]], dim=1)  # (b, N + 1, 2)
            mask = torch.ones(sets.shape[:2], dtype=torch.bool, device=device)
            probs.append(torch.softmax(model(sets, mask)[:, -1].double(), dim=-1).cpu())
            if progress is not None:
                progress(min(s + per_batch, len(stars)), len(stars))
    probs_grid = torch.cat(probs).numpy().reshape(grid, grid, -1)
    return EntropyMapResult(label=label, task_index=task_index, points=pts, labels=lab,
                            means=tasks.means[task_index, :K], covs=tasks.covs[task_index, :K],
                            assignment=assignment, grid_x=gx, grid_y=gy, probs=probs_grid,
                            seconds=time.perf_counter() - start, method=method)


STUDY = "plot-entropy"
FIGURES = ("entropy", "classes")  # the figures drawn from a map, as NAME.png in its folder


@dataclass(frozen=True)
class EntropyMaps:
    """An entropy map (computed now or read back) and the folder its figures go to."""

    result: EntropyMapResult
    out_dir: Path

    def figure(self, name: str) -> Path:
        """Where figure ``name`` (one of :data:`FIGURES`) is drawn."""
        return self.out_dir / f"{name}.png"


@contextmanager
def entropy_maps(run: str | None, runs_dir: Path, device: str = "auto", data: Path | None = None,
                 index: int | None = None, clusters: int = 7, size: int = 500, grid: int = 150,
                 method: str | None = None, out: Path | None = None, replot: bool = False, force: bool = False,
                 progress: Callable[[int, int], None] | None = None, data_progress: DataProgress | None = None,
                 announce: Callable[[str], None] | None = None) -> Iterator[EntropyMaps]:
    """`swarmctl plot-entropy`'s work: the entropy map of ``run`` (None: the shipped model) on a validation
    task, saved as entropy.npz in ``out`` (default: RUN/entropy; with ``replot`` read back). A named ``out``'s
    files are replaced only with ``force``; the caller draws the figures inside the block, and all files
    appear, or none."""
    files = ("entropy.npz", *(f"{f}.png" for f in FIGURES))
    with staged_outputs([data], replace=force or replot or out is None) as outputs:
        if replot:
            run_dir = resolve_run(run, runs_dir, shipped=True) if run is not None else \
                shipped_results_dir(shipped_for(STUDY), runs_dir)
            out_dir = outputs.folder(out or run_dir / "entropy")
            outputs.input(out_dir / "entropy.npz")
            res = load_result(EntropyMapResult, out_dir / "entropy.npz")
        else:
            check_grid(grid)
            if out is not None:  # checked, as the default folder is, before a shipped model's dataset is generated
                for name in files:
                    outputs.file(Path(out) / name)
            elif run is None:
                outputs.folder(runs_dir)
            opened = open_run(resolve_run(run, runs_dir, shipped=True) if run is not None else None, runs_dir, device,
                              study=STUDY, data=data, progress=data_progress, announce=announce)
            out_dir = outputs.folder(out or opened.dir / "entropy")
            outputs.input(opened.checkpoint)  # checks the files already named against it too
            if out is None:  # a named out's files were named above
                for name in files:
                    outputs.file(out_dir / name)
            split, _ = read_split(opened.data_path(data), "val")
            task = choose_task(split, index, clusters, size)
            res = compute_entropy_map(opened.model, split, task, opened.label, grid, device=opened.device,
                                      method=method or DEFAULT_METHOD, progress=progress)
            save_result(res, out_dir / "entropy.npz")
        yield EntropyMaps(res, out_dir)
