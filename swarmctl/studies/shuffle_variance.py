"""How much a model's loss moves when the entities of its input set are reordered (the paper, sec. 4.1.4, Results).

For an equivariant model the spread is float rounding; for the unsorted BiLSTM it is what the paper's
violin plot shows."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from swarmctl.data.clustering_generator import ClusteringTasks
from swarmctl.data.hdf5 import read_split
from swarmctl.errors import ConfigError
from swarmctl.files import atomic_write_text, staged_outputs
from swarmctl.runs import Run, open_run, resolve_run, shipped_for, shipped_results_dir
from swarmctl.studies.results import ShuffleVarianceResult, load_result, save_result
from swarmctl.tasks import DataProgress
from swarmctl.tasks.hungarian import hungarian_ce

STUDY = "shuffle-variance"


def spread_task_indices(sizes: np.ndarray, n_tasks: int) -> np.ndarray:
    """``n_tasks`` (at least 1) task indices spread evenly over the range of set sizes (sorted by N, evenly
    spaced)."""
    order = np.argsort(sizes, kind="stable")
    n_tasks = min(n_tasks, len(order))
    picks = np.unique(np.round(np.linspace(0, len(order) - 1, n_tasks)).astype(int))
    return order[picks]


@torch.no_grad()
def measure_shuffle_variance(
    model: nn.Module,
    tasks: ClusteringTasks,
    label: str,
    n_tasks: int = 100,
    n_shuffles: int = 200,
    seed: int = 0,
    batch_entities: int = 200_000,
    device: torch.device | str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> ShuffleVarianceResult:
    """Evaluate ``model`` (float32, eval mode) on ``n_shuffles`` (>= 2) random orderings of each of ``n_tasks``
    tasks spread over N, about ``batch_entities`` entities per forward pass."""
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    index = spread_task_indices(tasks.sizes, n_tasks)
    means, stds = np.zeros(len(index)), np.zeros(len(index))
    for k, t in enumerate(index):
        pts, lab = tasks.task(int(t))
        x, y = torch.from_numpy(pts), torch.from_numpy(lab)
        n = len(pts)
        per_batch = max(1, batch_entities // n)
        losses = []
        for start in range(0, n_shuffles, per_batch):
            m = min(per_batch, n_shuffles - start)
            perms = torch.argsort(torch.rand(m, n, generator=gen), dim=1)  # (m, N)
            xb, yb = x[perms].to(device), y[perms].to(device)
            mask = torch.ones(m, n, dtype=torch.bool, device=device)
            losses.append(hungarian_ce(model(xb, mask), yb, mask).per_task.double().cpu())
        loss = torch.cat(losses).numpy()
        means[k], stds[k] = loss.mean(), loss.std()
        if progress is not None:
            progress(k + 1)
    return ShuffleVarianceResult(label=label, task_index=index.astype(np.int64), sizes=tasks.sizes[index],
                                 mean=means, std=stds, n_shuffles=n_shuffles)


def shuffle_variance_of_run(run: Run, data: Path | None = None, tasks: int = 100, shuffles: int = 200,
                            seed: int = 0,
                            progress: Callable[[int, int], None] | None = None) -> ShuffleVarianceResult:
    """:func:`measure_shuffle_variance` on ``tasks`` validation tasks of the data ``run`` was trained on
    (or ``data``); ``progress(done, total)``."""
    split, _ = read_split(run.data_path(data), "val")
    total = min(tasks, len(split))
    report = None if progress is None else lambda k: progress(k, total)
    if progress is not None:
        progress(0, total)  # the bar from the start
    return measure_shuffle_variance(run.model, split, run.label, tasks, shuffles, seed, device=run.device,
                                    progress=report)


@dataclass(frozen=True)
class ShuffleVarianceStudy:
    """The results of :func:`shuffle_variance`: one per run, their summary, and where they are."""

    out_dir: Path
    results: list[ShuffleVarianceResult]
    summary: dict[str, dict[str, Any]]  # label -> median and max relative std, tasks, shuffles

    @property
    def summary_path(self) -> Path:
        return self.out_dir / "summary.json"

    @property
    def figure(self) -> Path:
        return self.out_dir / "shuffle-variance.png"


def _result_keys(run_dirs: list[Path], runs_dir: Path) -> list[str]:
    """The file name (without .npz) of each run's result: its path inside ``runs_dir`` with '/' as '__', or
    its folder's name for a run outside it; two runs with one key are refused."""
    keys = []
    for run_dir in run_dirs:
        try:
            rel = Path(run_dir).resolve().relative_to(Path(runs_dir).resolve())
        except ValueError:
            rel = Path(Path(run_dir).resolve().name)
        keys.append("__".join(rel.parts))
    for k, key in enumerate(keys):
        if key in keys[:k]:
            raise ConfigError(f"runs {run_dirs[keys.index(key)]} and {run_dirs[k]} would both save their result as "
                              f"{key}.npz; name each run once, or study them with separate `out` folders")
    return keys


@contextmanager
def shuffle_variance(
    runs: list[str] | None, runs_dir: Path, out: Path | None = None, data: Path | None = None, tasks: int = 100,
    shuffles: int = 200, seed: int = 0, device: str = "auto", replot: bool = False, force: bool = False,
    progress: Callable[[str], AbstractContextManager[Callable[[int, int], None]]] | None = None,
    data_progress: DataProgress | None = None, announce: Callable[[str], None] | None = None,
) -> Iterator[ShuffleVarianceStudy]:
    """`swarmctl shuffle-variance`'s work: the shuffle-variance of every run in ``runs`` (none: the shipped
    clustering model), saved as ``RUN.npz`` per run and ``summary.json`` in ``out`` (default: RUN/shuffle-variance
    for one run, RUNS_DIR/shuffle-variance for several); ``replot`` reads the saved results instead. Every run
    is checked before any is measured; a named ``out``'s files are replaced only with ``force``. The caller draws
    the figure inside the block; all files appear, or none."""
    with staged_outputs([data], replace=force or replot or out is None) as outputs:
        run_dirs = [resolve_run(r, runs_dir, shipped=True) for r in runs] if runs else \
            [shipped_results_dir(shipped_for(STUDY), runs_dir)]
        keys = _result_keys(run_dirs, runs_dir)
        out_dir = outputs.folder(out or (run_dirs[0] / STUDY if len(run_dirs) == 1 else Path(runs_dir) / STUDY))
        if replot:
            results = [load_result(ShuffleVarianceResult, out_dir / f"{key}.npz") for key in keys]
        else:  # every output checked and every run opened and measured before anything is written
            for name in ("summary.json", "shuffle-variance.png", *(f"{key}.npz" for key in keys)):
                outputs.file(out_dir / name)
            opened = [open_run(run_dir, runs_dir, device, study=STUDY) for run_dir in run_dirs] if runs else \
                [open_run(None, runs_dir, device, study=STUDY, data=data, progress=data_progress, announce=announce)]
            results = []
            for run in opened:
                with nullcontext() if progress is None else progress(run.label) as update:
                    results.append(shuffle_variance_of_run(run, data, tasks, shuffles, seed, progress=update))
            if len({r.label for r in results}) < len(results):  # two runs of one configuration: name each
                results = [dataclasses.replace(r, label=f"{key}: {r.label}")
                           for key, r in zip(keys, results, strict=True)]
        summary = {r.label: {"median_rel_std": float(np.median(r.rel_std)), "max_rel_std": float(r.rel_std.max()),
                             "tasks": len(r.sizes), "shuffles": r.n_shuffles} for r in results}
        study = ShuffleVarianceStudy(out_dir, results, summary)
        if not replot:
            for key, res in zip(keys, results, strict=True):
                save_result(res, out_dir / f"{key}.npz")
            atomic_write_text(study.summary_path, json.dumps(summary, indent=2) + "\n")
        yield study
