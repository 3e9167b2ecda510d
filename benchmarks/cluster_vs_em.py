"""Amortized clustering against EM: matched accuracy and seconds per task of the shipped SWARM (192-10-1),
of EM for a Gaussian mixture with full covariances (scikit-learn, told the true K, or K by BIC over 1..10)
and of the oracle (the true mixture), on the seed-0 validation split and on fresh tasks at larger N.

    pip install -e '.[bench]'          # scikit-learn, for this benchmark only
    python benchmarks/cluster_vs_em.py [--sizes 100 1000 10000 100000 1000000] [--json results.json]

The validation split is the 1,000 tasks of data/clustering-seed0.h5 (N in 100..1,000; generated with
`swarmctl gen-data --seed 0` when missing). Fresh tasks are drawn from the same distribution at a fixed N
(benchmarks/mixtures.py, RandomState(1000 + N)); fewer at large N (--tasks-per-size), so that the run
stays within about an hour on two cores. SWARM runs each task alone, as `swarmctl cluster` does, on the
CPU: with the default map to the training scale (one factor), with `--per-coordinate`, and without a map
("raw": the tasks are at the training scale already, which a user's points are not). Matched accuracy: the fraction of
points whose cluster is mapped to their true cluster by the best one-to-one matching (Hungarian).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from mixtures import draw_task
from scipy.optimize import linear_sum_assignment
from scipy.stats import multivariate_normal

from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.data.hdf5 import generate_dataset, read_split
from swarmctl.runs import load_model, shipped_for
from swarmctl.tasks.clustering import ClusteringTask

METHODS = ("swarm", "swarm-per-coordinate", "swarm-raw", "em-true-k", "em-bic", "oracle")
TASKS_PER_SIZE = {100: 200, 1000: 200, 10_000: 40, 100_000: 8, 1_000_000: 2}
CPU = torch.device("cpu")


def matched_accuracy(pred: np.ndarray, truth: np.ndarray) -> float:
    table = np.zeros((pred.max() + 1, truth.max() + 1))
    np.add.at(table, (pred, truth), 1)
    rows, cols = linear_sum_assignment(-table)
    return float(table[rows, cols].sum() / len(truth))


def em(points: np.ndarray, k: int):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return GaussianMixture(n_components=k, covariance_type="full", random_state=0).fit(points)


def cluster(method: str, model, points: np.ndarray, k: int, means: np.ndarray, covs: np.ndarray) -> np.ndarray:
    """Predicted labels of one task's points (float64) by ``method``."""
    if method.startswith("swarm"):
        return ClusteringTask().cluster_points(model, points, CPU, standardize=method != "swarm-raw",
                                               per_coordinate=method == "swarm-per-coordinate").cluster
    if method == "em-true-k":
        return em(points, k).predict(points)
    if method == "em-bic":
        fits = [em(points, j) for j in range(1, 11)]
        return min(fits, key=lambda g: g.bic(points)).predict(points)
    # the oracle: the most probable component of the true mixture (equal weights)
    logp = np.stack([multivariate_normal(means[j], covs[j]).logpdf(points) for j in range(k)], axis=1)
    return logp.argmax(axis=1)


def score(tasks, model, methods) -> dict[str, tuple[float, float]]:
    """{method: (mean matched accuracy, seconds per task)} over ``tasks`` (an iterable of draws)."""
    acc = {m: [] for m in methods}
    secs = {m: 0.0 for m in methods}
    n = 0
    for points, labels, means, covs in tasks:
        x = points.astype(np.float64)
        for m in methods:
            start = time.perf_counter()
            pred = cluster(m, model, x, len(means), means, covs)
            secs[m] += time.perf_counter() - start
            acc[m].append(matched_accuracy(pred, labels))
        n += 1
    return {m: (float(np.mean(acc[m])), secs[m] / n) for m in methods}


def validation_tasks(path: Path):
    split, _ = read_split(path, "val")
    for t in range(len(split)):
        points, labels = split.task(t)
        present = np.unique(labels)  # an empty cluster has no points: the metric counts the clusters present
        yield points, np.searchsorted(present, labels), split.means[t, present], split.covs[t, present]


def fresh_tasks(n: int, count: int):
    rs = np.random.RandomState(1000 + n)
    for _ in range(count):
        points, labels, means, covs = draw_task(n, rs)
        present = np.unique(labels)
        yield points, np.searchsorted(present, labels), means[present], covs[present]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="*", type=int, default=list(TASKS_PER_SIZE))
    ap.add_argument("--tasks-per-size", nargs="*", type=int, default=None, help="one count per --sizes entry")
    ap.add_argument("--val-tasks", type=int, default=1000, help="validation tasks scored (the first ones)")
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args()
    counts = args.tasks_per_size or [TASKS_PER_SIZE.get(n, 10) for n in args.sizes]
    model, _ = load_model(shipped_for("cluster"), CPU)
    data = Path(ClusteringTask().default_data)
    if args.val_tasks and not data.exists():
        print(f"generating {data} (seed 0)", flush=True)
        generate_dataset(data, ClusteringParams(), seed=0)
    print(f"torch threads {torch.get_num_threads()}; load: {_uptime()}", flush=True)
    rows = []
    if args.val_tasks:
        tasks = (t for i, t in zip(range(args.val_tasks), validation_tasks(data), strict=False))
        rows.append((f"validation split (seed 0), {args.val_tasks} tasks, N 100..1,000", score(tasks, model,
                                                                                                  args.methods)))
        print(rows[-1], flush=True)
    for n, count in zip(args.sizes, counts, strict=True):
        rows.append((f"fresh, N = {n:,}, {count} tasks", score(fresh_tasks(n, count), model, args.methods)))
        print(rows[-1], f"load: {_uptime()}", flush=True)
    print()
    print("| tasks | " + " | ".join(args.methods) + " |")
    print("|---|" + "---|" * len(args.methods))
    for name, res in rows:
        print(f"| {name} | " + " | ".join(f"{res[m][0]:.1%} ({_secs(res[m][1])})" for m in args.methods) + " |")
    if args.json:
        args.json.write_text(json.dumps({name: res for name, res in rows}, indent=2) + "\n")


def _secs(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average: ")[-1]


if __name__ == "__main__":
    main()
