"""`swarmctl cluster` against EM, side by side on one machine: adjusted Rand index (ARI), matched accuracy, clusters
found and seconds per set, on the paper's seed-0 validation split, on held-out tasks of the broad prior and of
the wide prior, on scikit-learn's `make_blobs` families, on real data sets (eleven: those scikit-learn ships and
two in benchmarks/data; two columns or two principal components each), on sets of 25..60 well-separated blobs
(more than the models' cluster slots) and at N = 10,000.

    pip install -e '.[bench]'          # scikit-learn, for the baselines and the real data sets only
    python benchmarks/cluster_vs_em.py [--val-tasks 1000] [--broad-tasks 200] [--large 10] [--json results.json]

Methods (each set is clustered alone, on the CPU, as `swarmctl cluster` does: the map to the training scale
first, one factor for all coordinates):

- ``paper``: the shipped paper model (192-10-1) alone; ``paper+em``: refined by EM (`--refine`);
- ``broad`` / ``broad+em``: the model trained on the broad prior (``--broad-model``), alone / refined;
- ``paper+k`` / ``broad+k``: refined at the true K given (`swarmctl cluster --clusters K`: EM at exactly K
  from the model's answer, no search for K);
- any model with a count head (``swarm-count``, the shipped default once trained) chooses K without it by its
  distribution over K and the BIC together (``--bic-weight``: the BIC's weight, swarmctl.studies.clusters);
- ``em-true-k``: scikit-learn's GaussianMixture (full covariances, k-means start) told the true K;
- ``em-bic``: the same with K chosen by BIC over 1..10 (1..16 on the broad prior, whose K reaches 16);
- ``dpgmm``: scikit-learn's BayesianGaussianMixture with a Dirichlet-process prior on the weights
  (``weight_concentration_prior_type="dirichlet_process"``, 10 components, full covariances); its clusters
  are the components some point picks;
- ``hdbscan``: scikit-learn's HDBSCAN with ``min_cluster_size`` n/20 (at least 5); its noise points (-1)
  count as one more cluster.

Per group: mean ARI, mean matched accuracy, mean K found against the true K, the sets whose K is exactly
right, the sets over-split (more than twice their true number of clusters) and of those the ones without a
warning (swarmctl.studies.clusters.values_warnings; the baselines never warn), and CPU seconds per set
(this process's, one thread: on a shared machine the wall time would count the others' load).
``--methods`` picks the columns (default: all). Matched accuracy: the share of points whose cluster maps to
their true class under the best one-to-one matching (Hungarian).
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
from scipy.optimize import linear_sum_assignment

from swarmctl.data.clustering_generator import WIDE_PRIOR, BroadParams, ClusteringParams, draw_broad_task
from swarmctl.data.hdf5 import generate_dataset, read_split
from swarmctl.runs import load_model
from swarmctl.studies import clusters
from swarmctl.studies.clusters import cluster_values, default_model, values_warnings
from swarmctl.tasks.clustering import ClusteringTask

CPU = torch.device("cpu")
TASK = ClusteringTask()


def matched_accuracy(pred: np.ndarray, truth: np.ndarray) -> float:
    table = np.zeros((pred.max() + 1, truth.max() + 1))
    np.add.at(table, (pred, truth), 1)
    rows, cols = linear_sum_assignment(-table)
    return float(table[rows, cols].sum() / len(truth))


def _gmm(points: np.ndarray, k: int):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return GaussianMixture(n_components=k, covariance_type="full", random_state=0).fit(points)


def run_method(method: str, models: dict, x: np.ndarray, k: int, k_max: int) -> tuple[np.ndarray, bool]:
    """(labels, warned) of one set by ``method``."""
    if method == "em-true-k":
        return _gmm(x, k).predict(x), False
    if method == "em-bic":
        fits = [_gmm(x, j) for j in range(1, min(k_max, len(x) - 1) + 1)]
        return min(fits, key=lambda g: g.bic(x)).predict(x), False
    if method == "dpgmm":
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.mixture import BayesianGaussianMixture

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            dp = BayesianGaussianMixture(n_components=min(10, len(x)), covariance_type="full", random_state=0,
                                         weight_concentration_prior_type="dirichlet_process", max_iter=500)
            return dp.fit_predict(x), False
    if method == "hdbscan":
        from sklearn.cluster import HDBSCAN

        labels = HDBSCAN(min_cluster_size=max(5, len(x) // 20), copy=True).fit_predict(x)
        return labels + 1, False  # its noise (-1): one more cluster
    name, _, refine = method.partition("+")
    model, cfg = models[name]
    given = k if refine == "k" else None
    clusters, model_k, fit = cluster_values(TASK, model, x, CPU, refine=bool(refine), clusters=given)
    warned = bool(values_warnings(TASK, cfg, x, clusters, model_k, fit, refine=bool(refine), clusters=given))
    return clusters.cluster, warned


def score(sets, models: dict, methods: list[str], k_max: int, repeat: int = 1) -> dict[str, dict[str, float]]:
    """Per method: mean ARI, matched accuracy, K found, true K, CPU seconds per set (the median of ``repeat``
    runs of each set; one thread, so other processes on a shared machine do not inflate it), sets with K
    exact, sets over 2x K and of those the unwarned."""
    from sklearn.metrics import adjusted_rand_score

    res = {m: {"ari": [], "acc": [], "k": [], "true_k": [], "secs": [], "over": 0, "split": 0, "exact": 0}
           for m in methods}
    for x, labels in sets:
        x = np.asarray(x, dtype=np.float64)
        k = len(np.unique(labels))
        for m in methods:
            times = []
            for _ in range(repeat):
                start = time.process_time()  # this process's CPU time: one thread, so the load of others is left out
                pred, warned = run_method(m, models, x, k, k_max)
                times.append(time.process_time() - start)
            res[m]["secs"].append(float(np.median(times)))
            res[m]["ari"].append(adjusted_rand_score(labels, pred))
            res[m]["acc"].append(matched_accuracy(pred, labels))
            found = len(np.unique(pred))
            res[m]["k"].append(found)
            res[m]["true_k"].append(k)
            res[m]["over"] += int(found > 2 * k and not warned)
            res[m]["split"] += int(found > 2 * k)
            res[m]["exact"] += int(found == k)
    return {m: {"ari": float(np.mean(r["ari"])), "accuracy": float(np.mean(r["acc"])), "k": float(np.mean(r["k"])),
                "true_k": float(np.mean(r["true_k"])), "seconds": float(np.mean(r["secs"])), "over_2k_unwarned":
                r["over"], "over_2k": r["split"], "k_exact": r["exact"], "sets": len(r["ari"])}
            for m, r in res.items()}


def validation_sets(path: Path, count: int):
    split, _ = read_split(path, "val")
    for t in range(min(count, len(split))):
        points, labels = split.task(t)
        yield points, np.searchsorted(np.unique(labels), labels)


def broad_sets(count: int, seed: int = 2024, n: int | None = None, prior: BroadParams | None = None):
    rs = np.random.RandomState(seed)
    for _ in range(count):
        points, labels, *_ = draw_broad_task(prior or BroadParams(), rs, n=n)
        yield points, np.searchsorted(np.unique(labels), labels)


def blob_sets(kind: str, count: int):
    """scikit-learn's make_blobs: ``isotropic``, ``sheared`` (one shared linear map) or ``elongated``
    (each blob stretched 4:1 along its own random direction); 3..8 blobs of 100..500 points each."""
    from sklearn.datasets import make_blobs

    rs = np.random.RandomState({"isotropic": 1, "sheared": 2, "elongated": 3}[kind])
    for _ in range(count):
        k = rs.randint(3, 9)
        x, y = make_blobs(n_samples=list(rs.randint(100, 501, size=k)), centers=None, cluster_std=1.0,
                          center_box=(-10, 10), random_state=rs.randint(1 << 30))
        if kind == "sheared":
            x = x @ np.array([[0.6, -0.64], [-0.41, 0.85]])
        elif kind == "elongated":
            for j in range(k):
                a = rs.uniform(0, np.pi)
                rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
                centre = x[y == j].mean(axis=0)
                x[y == j] = centre + (x[y == j] - centre) @ rot.T @ np.diag([2.0, 0.5]) @ rot
        yield x, y


def many_sets() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Sets of more well-separated clusters than the models have slots (20..60 blobs of 40 points, sd 0.3):
    20, 40 and 60 blobs at random places at least 3 apart, 25 blobs on a line 8 apart, a 5 x 5 grid 10 apart,
    and 50 neighbouring blobs of 20 points (sd 0.25) on a 10 x 5 grid 2 apart."""
    rs = np.random.RandomState(25)

    def blobs(centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        labels = np.repeat(np.arange(len(centres)), 40)
        return centres[labels] + 0.3 * rs.randn(len(labels), 2), labels

    def scattered(k: int) -> np.ndarray:
        centres: list[np.ndarray] = []
        while len(centres) < k:
            c = rs.uniform(0, 6 * np.sqrt(k), 2)
            if all(np.hypot(*(c - d)) > 3 for d in centres):
                centres.append(c)
        return np.array(centres)

    return {
        "20 blobs in 2-D, 3 or more apart": blobs(scattered(20)),
        "50 neighbouring blobs, a 10 x 5 grid 2 apart (sd 0.25)": (
            np.array([[i * 2.0, j * 2.0] for i in range(10) for j in range(5)])[np.repeat(np.arange(50), 20)]
            + 0.25 * rs.randn(1000, 2), np.repeat(np.arange(50), 20)),
        "25 blobs on a line, 8 apart": blobs(np.stack([np.arange(25) * 8.0, np.zeros(25)], axis=1)),
        "5 x 5 grid of blobs, 10 apart": blobs(np.array([[i * 10.0, j * 10.0] for i in range(5) for j in range(5)])),
        "40 blobs in 2-D, 3 or more apart": blobs(scattered(40)),
        "60 blobs in 2-D, 3 or more apart": blobs(scattered(60)),
    }


def shape_sets(count: int) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Synthetic sets where EM's Gaussian assumption is strained, ``count`` of each (400..800 points): two
    heavily overlapping Gaussians (means 1.5 standard deviations apart), 3..5 warped clusters (Gaussians bent
    into arcs), two concentric rings, two moons, and one cluster of a dense core in a wide halo (true K 1)."""
    from sklearn.datasets import make_circles, make_moons

    rs = np.random.RandomState(47)
    sets: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {k: [] for k in (
        "overlapping pair", "warped clusters", "two rings", "two moons", "core and halo")}
    for _ in range(count):
        n = rs.randint(400, 801)
        y = (rs.rand(n) < 0.5).astype(int)
        sets["overlapping pair"].append((rs.randn(n, 2) + np.stack([1.5 * y, 0 * y], axis=1), y))
        k = rs.randint(3, 6)
        y = rs.randint(k, size=n)
        angle = rs.uniform(0, 2 * np.pi, size=k)
        t, r = rs.uniform(-1.2, 1.2, size=n), 4.0 + 0.35 * rs.randn(n)  # an arc of radius 4 around its centre
        centres = 9.0 * np.stack([np.cos(2 * np.pi * np.arange(k) / k), np.sin(2 * np.pi * np.arange(k) / k)], 1)
        a = angle[y] + t
        sets["warped clusters"].append((centres[y] + np.stack([r * np.cos(a), r * np.sin(a)], 1) - 4.0 * np.stack(
            [np.cos(angle[y]), np.sin(angle[y])], 1), y))
        sets["two rings"].append(make_circles(n, factor=0.5, noise=0.05, random_state=rs.randint(1 << 30)))
        sets["two moons"].append(make_moons(n, noise=0.07, random_state=rs.randint(1 << 30)))
        core = rs.rand(n) < 0.6
        sets["core and halo"].append((np.where(core[:, None], 0.2, 2.0) * rs.randn(n, 2), np.zeros(n, dtype=int)))
    return sets


def real_sets():
    """Labelled data sets that scikit-learn ships, two columns or the first two principal components of the
    standardized features each, then the two of ``benchmarks/data`` (its README: Old Faithful split at 3
    minutes of eruption, penguins' bills by species)."""
    from sklearn import datasets
    from sklearn.decomposition import PCA

    def pcs(data):
        z = (data - data.mean(0)) / np.where(data.std(0) > 0, data.std(0), 1.0)
        return PCA(2, random_state=0).fit_transform(z)

    iris, wine, cancer, digits = (datasets.load_iris(), datasets.load_wine(), datasets.load_breast_cancer(),
                                  datasets.load_digits())
    small = digits.target < 5
    here = Path(__file__).resolve().parent / "data"
    faithful = np.loadtxt(here / "old-faithful.csv", delimiter=",", skiprows=1)
    bills = np.loadtxt(here / "penguin-bills.csv", delimiter=",", skiprows=1, dtype=str)
    return {
        "iris petals (2 columns)": (iris.data[:, 2:4], iris.target),
        "iris sepals (2 columns)": (iris.data[:, 0:2], iris.target),
        "iris, 2 PCs": (pcs(iris.data), iris.target),
        "wine, 2 PCs": (pcs(wine.data), wine.target),
        "wine: flavanoids, colour (2 columns)": (wine.data[:, [6, 9]], wine.target),
        "breast cancer, 2 PCs": (pcs(cancer.data), cancer.target),
        "digits, 2 PCs": (pcs(digits.data), digits.target),
        "digits 0-4, 2 PCs": (pcs(digits.data[small]), digits.target[small]),
        "wine: alcohol, malic acid (2 columns)": (wine.data[:, [0, 1]], wine.target),
        "Old Faithful (2 columns)": (faithful, (faithful[:, 0] > 3).astype(int)),
        "penguins' bills (2 columns)": (bills[:, :2].astype(float), np.unique(bills[:, 2], return_inverse=True)[1]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--val-tasks", type=int, default=100, help="seed-0 validation tasks scored (the first ones)")
    ap.add_argument("--broad-tasks", type=int, default=60, help="held-out broad-prior tasks (RandomState(2024))")
    ap.add_argument("--wide-tasks", type=int, default=60, help="held-out tasks of the wide prior (RandomState(2025)): "
                    "overlap, unequal weights, warped clusters, the count model's training prior")
    ap.add_argument("--bic-weight", type=float, default=None, help="the BIC's weight against a count head's "
                    f"log-probability of K when it chooses K [default: {clusters.BIC_WEIGHT}]")
    ap.add_argument("--blobs", type=int, default=10, help="make_blobs sets per family")
    ap.add_argument("--large", type=int, default=3, help="broad-prior tasks at N = 10,000")
    ap.add_argument("--real", action=argparse.BooleanOptionalAction, default=True, help="the real data sets")
    ap.add_argument("--many", action=argparse.BooleanOptionalAction, default=True,
                    help="sets of 25..60 well-separated blobs (EM with K by BIC over 1..1.25 times the true K)")
    ap.add_argument("--broad-model", type=Path, default=None, help="checkpoint of the broad-prior model")
    ap.add_argument("--model", action="append", default=[], metavar="NAME=CHECKPOINT",
                    help="one more model to score beside them, alone and refined (e.g. a candidate to ship)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each real set, timed by their median")
    ap.add_argument("--shapes", type=int, default=5, help="sets of each synthetic shape (overlap, warps, rings, ...)")
    ap.add_argument("--methods", default=None, help="comma-separated methods to score [default: all]")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args()
    if args.bic_weight is not None:
        clusters.BIC_WEIGHT = args.bic_weight
    torch.set_num_threads(1)
    models = {"paper": load_model(Path(__file__).resolve().parent.parent / "swarmctl" / "pretrained" /
                                  "swarm-192-10-1-clustering.pt", CPU)}
    if args.broad_model is None:
        args.broad_model = default_model()  # the shipped broad-prior model, when there is one
    if args.broad_model is not None:
        models["broad"] = load_model(args.broad_model, CPU)
    for spec in args.model:
        name, _, path = spec.partition("=")
        models[name] = load_model(Path(path), CPU)
    models = {name: (m, ck.model_config) for name, (m, ck) in models.items()}
    methods = [f"{name}{suffix}" for name in models for suffix in ("", "+em", "+k")] + ["em-true-k", "em-bic",
                                                                                          "dpgmm", "hdbscan"]
    if args.methods:
        methods = [m for m in args.methods.split(",") if m]
    data = Path(TASK.default_data)
    if args.val_tasks and not data.exists():
        generate_dataset(data, ClusteringParams(), seed=0)
    print(f"torch threads {torch.get_num_threads()}; load: {_load()}", flush=True)
    groups: list[tuple[str, dict]] = []

    def run(name: str, sets, k_max: int = 10, repeat: int = 1) -> None:
        groups.append((name, score(list(sets), models, methods, k_max, repeat)))
        print(name, json.dumps(groups[-1][1]), f"load: {_load()}", flush=True)

    for name, (x, y) in real_sets().items() if args.real else ():
        run(f"real: {name}", [(x, y)], repeat=args.repeat)
    if args.val_tasks:
        run(f"seed-0 validation split, first {args.val_tasks} tasks", validation_sets(data, args.val_tasks))
    if args.broad_tasks:
        run(f"broad prior, {args.broad_tasks} held-out tasks", broad_sets(args.broad_tasks), k_max=16)
    if args.wide_tasks:
        run(f"wide prior, {args.wide_tasks} held-out tasks", broad_sets(args.wide_tasks, seed=2025, prior=WIDE_PRIOR),
            k_max=16)
    for kind in ("isotropic", "sheared", "elongated"):
        if args.blobs:
            run(f"make_blobs {kind}, {args.blobs} sets", blob_sets(kind, args.blobs))
    for name, sets in shape_sets(args.shapes).items() if args.shapes else ():
        run(f"{name}, {args.shapes} sets", sets)
    for name, (x, y) in many_sets().items() if args.many else ():
        run(name, [(x, y)], k_max=int(np.ceil(1.25 * len(np.unique(y)))))
    if args.large:
        run(f"broad prior at N = 10,000, {args.large} tasks", broad_sets(args.large, seed=77, n=10_000), k_max=16)
    print()
    print("ARI / K found / sets with K exact / over 2K (unwarned) / time per set")
    print("| sets | " + " | ".join(methods) + " |")
    print("|---|" + "---|" * len(methods))
    for name, res in groups:
        print(f"| {name} (K {res[methods[0]]['true_k']:.1f}) | " + " | ".join(_cell(res[m]) for m in methods) + " |")
    real = [res for n, res in groups if n.startswith("real: ")]
    if real:
        print(f"\nthe {len(real)} real sets: mean ARI / K exact / over 2K (unwarned) / mean time per set")
        print("| method | mean ARI | K exact | over 2K (unwarned) | time per set |\n|---|---|---|---|---|")
        for m in methods:
            print(f"| {m} | {np.mean([r[m]['ari'] for r in real]):.3f} | {sum(r[m]['k_exact'] for r in real)} of "
                  f"{len(real)} | {sum(r[m]['over_2k'] for r in real)} ({sum(r[m]['over_2k_unwarned'] for r in real)})"
                  f" | {_secs(float(np.mean([r[m]['seconds'] for r in real])))} |")
    if args.json:
        args.json.write_text(json.dumps(dict(groups), indent=2) + "\n")


def _cell(r: dict) -> str:
    over = f"{r['over_2k']} ({r['over_2k_unwarned']})" if r["over_2k"] else "0"
    return f"{r['ari']:.2f} / K {r['k']:.1f} / {r['k_exact']} of {r['sets']} / {over} / {_secs(r['seconds'])}"


def _secs(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average: ")[-1]


if __name__ == "__main__":
    main()
