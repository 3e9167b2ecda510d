"""Clustering a user's own point file with a trained model (`swarmctl cluster`): check every output path,
open the model, read and check the points, cluster them in one forward pass, refine the clusters by EM
seeded with the model's probabilities, say where the result should not be trusted; then write the CSV
(and the figure) all together, or nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from swarmctl.data.clustering_generator import TrainingRange, relative_spreads
from swarmctl.data.points import STDIN, PointSet, is_plain_name, parse_columns, read_points, write_cluster_csv
from swarmctl.errors import ConfigError, DataError
from swarmctl.files import check_png, staged_outputs
from swarmctl.runs import open_run, shipped_models
from swarmctl.studies.em import EMResult, sample_rows
from swarmctl.studies.em import refine as em_refine
from swarmctl.tasks.point_clusters import CHUNK_SIZE, PointClusters, standardization, summarize_probabilities

__all__ = ["CHUNK_SIZE", "ClusterResult", "cluster_file", "cluster_values", "cluster_warnings",
           "mergeable_pairs", "parse_columns"]

LOW_CONFIDENCE = 0.5  # a point is unsure when its cluster's probability is below this
UNSURE_SHARE = 0.2  # warn when more than this share of the points is unsure
SCALE_FACTOR = 3.0  # points used as given: warn when their spread is this far from the training scale
WARM_UP_POINTS = 256
MODEL_POINTS = 1000  # refining a larger set, the model sees a sample of this many (the sizes it was trained on)


@dataclass(frozen=True)
class ClusterResult:
    points: PointSet
    clusters: PointClusters
    out: Path  # the CSV
    plot: Path | None  # the figure, if any
    model: str  # e.g. "swarm (192-10-1)"
    checkpoint: Path
    shipped: bool
    seconds: float  # the clustering pass: the forward pass, the refinement and the summary (warm-up excluded)
    model_clusters: int = 0  # the clusters the model found, before any refinement
    refined: bool = False
    merged: int = 0  # duplicate pairs the refinement merged from the model's start
    searched: tuple[int, ...] = ()  # the numbers of clusters of the refinement's fresh fits
    from_model: bool = True  # whether the refined clusters grew from the model's start (not a fresh fit)
    dropped: int = 0  # components the refinement dropped as too small
    model_points: int = 0  # the points the model saw (a sample when refining a large set)
    training: TrainingRange | None = None  # what the model was trained on
    warnings: tuple[str, ...] = ()  # one line each, for the user
    written: tuple[Path, ...] = ()  # the files written, once they are


def default_model() -> Path | None:
    """The shipped model `swarmctl cluster` uses when no run is named: one whose record says
    ``"default_for": ["cluster"]`` (a model trained for real data), else None (the task's shipped model,
    the one `eval` and `plot-entropy` use)."""
    for model in shipped_models():
        if "cluster" in model.record.get("default_for", ()):
            return model.checkpoint
    return None


def _default_output(points: str) -> Path:
    """``DIR/NAME-clusters.csv`` beside the input; ``clusters.csv`` in the working folder for standard input."""
    if points == STDIN:
        return Path("clusters.csv")
    path = Path(points)
    return path.with_name(f"{path.stem}-clusters.csv")


def cluster_file(points: str, run: str | Path | None, runs_dir: Path, *, key: str | None = None,
                 columns: tuple[str, ...] | None = None, out: Path | None = None, plot: Path | None = None,
                 force: bool = False, standardize: bool = True, per_coordinate: bool = False,
                 refine: bool = True, skip_bad_rows: bool = False, chunk_size: int | None = None,
                 device: str = "auto", progress: Callable[[float], None] | None = None,
                 save_plot: Callable[[ClusterResult, Path], Path] | None = None,
                 report: Callable[[ClusterResult], None] | None = None) -> ClusterResult:
    """Cluster the points of ``points`` (a file, or ``"-"`` for standard input) with the run ``run``
    (None: the shipped clustering model) and write the CSV ``out`` (default: :func:`_default_output`)
    and, with ``plot``, the figure that ``save_plot(result, path)`` draws and saves (returning the path).

    The outputs are checked before anything is read, and again once the checkpoint is known: a bad path
    fails with nothing written. ``refine``: EM from the model's probabilities (:mod:`swarmctl.studies.em`).
    ``report(result)`` is called once the files are written but before they appear (a summary printed
    there that cannot be printed leaves no file); all appear together, or none. Returns the result with
    its ``warnings`` and the paths ``written``.
    """
    out = Path(out) if out is not None else _default_output(points)
    if plot is not None and save_plot is None:
        raise ValueError("a plot was asked for but no save_plot given")
    check_png(plot, "plot")
    if per_coordinate and not standardize:
        raise ConfigError("`per_coordinate` scales the points and `no_standardize` uses them as given: give one "
                          "of the two")
    source = () if points == STDIN else (Path(points),)
    run = default_model() if run is None else run
    named = (Path(run),) if run is not None and Path(run).is_file() else ()  # a checkpoint named as a file
    with staged_outputs((*source, *named), replace=force) as outputs:  # every output checked before any work
        out = outputs.file(out, "out")
        plot = outputs.file(plot, "plot") if plot is not None else None
        opened = open_run(run, runs_dir, device, study="cluster", needs_data=False)  # refuses another task's run
        outputs.input(opened.checkpoint)
        dim_in = opened.model_cfg.dim_in
        pts = read_points(points, key, columns, skip_bad_rows)
        D = pts.values.shape[1]
        if D != dim_in:
            raise DataError(f"{pts.source} has {D} column(s) ({', '.join(pts.names[:6])}{' ...' if D > 6 else ''}) "
                            f"but {opened.label} takes {dim_in} coordinates per point{_pick_hint(pts.names, dim_in)}")
        task = opened.task
        options = {"standardize": standardize, "per_coordinate": per_coordinate, "refine": refine,
                   "chunk_size": chunk_size}
        warm_up = {**options, "refine": False}  # loads the model's kernels; EM needs no warming up
        cluster_values(task, opened.model, pts.values[:WARM_UP_POINTS], opened.device, **warm_up)
        start = time.perf_counter()
        clusters, model_k, fitted = cluster_values(task, opened.model, pts.values, opened.device, progress=progress,
                                                   **options)
        seen = _model_points(len(pts.values), refine)
        seconds = time.perf_counter() - start
        training = task.training_range(opened.model_cfg)
        result = ClusterResult(pts, clusters, out, plot, opened.label, opened.checkpoint, opened.shipped,
                               seconds, model_k, refine, fitted.merged if fitted else 0,
                               fitted.searched if fitted else (), fitted.from_model if fitted else True,
                               fitted.dropped if fitted else 0, seen, training,
                               cluster_warnings(pts.values, clusters, training,
                                                as_given_scale=None if standardize else float(task.point_std()),
                                                refined=refine, model_clusters=model_k,
                                                model_points=seen))
        write_cluster_csv(out, pts, clusters.cluster, clusters.probability, clusters.entropy)
        written = [out]
        if plot is not None:
            written.append(save_plot(result, plot))  # type: ignore[misc]
        result = replace(result, written=tuple(written))
        if report is not None:
            report(result)
    return result


def cluster_values(task, model, values: np.ndarray, device, *, standardize: bool = True,
                   per_coordinate: bool = False, refine: bool = True, chunk_size: int | None = None,
                   progress: Callable[[float], None] | None = None) -> tuple[PointClusters, int, EMResult | None]:
    """One set of points ``values`` (N, D) clustered by ``model`` (of the clustering ``task``) and, with
    ``refine``, by EM from its probabilities: (the clusters, the number the model found, the EM fit or
    None). To refine a set of more than :data:`MODEL_POINTS` points the model sees a seeded sample of that
    many (the sizes it was trained on; EM then fits all points), to cluster it alone all of them."""
    rows = sample_rows(values, MODEL_POINTS) if _model_points(len(values), refine) < len(values) else None
    clusters = task.cluster_points(model, values if rows is None else values[rows], device, standardize, chunk_size,
                                   progress, per_coordinate=per_coordinate, keep_probabilities=refine)
    model_k, fitted = len(clusters.sizes), None
    if refine:
        fitted = em_refine(values, clusters.probabilities, rows=rows)
        clusters = summarize_probabilities(fitted.resp, clusters)
    return clusters, model_k, fitted


def _model_points(n: int, refine: bool) -> int:
    """How many of ``n`` points the model sees."""
    return min(n, MODEL_POINTS) if refine else n


def cluster_warnings(values: np.ndarray, clusters: PointClusters, training: TrainingRange,
                     as_given_scale: float | None = None, refined: bool = False,
                     model_clusters: int | None = None, model_points: int | None = None) -> tuple[str, ...]:
    """One line per reason not to trust ``clusters`` of ``values`` (N, D) as they are: the cluster cap
    reached, many unsure points, a set or clusters outside what the model was trained on
    (``training``), and, for points used as given (``as_given_scale``: the training scale), a spread far
    from the training scale. Pairs of clusters that look like one Gaussian are named only for a result
    not ``refined`` (the refinement weighs each merge by BIC itself). ``model_clusters``: how many clusters
    the model found before a refinement merged some (the cap is the model's); ``model_points``: how many of
    the points the model saw (all when None)."""
    n, K = len(values), len(clusters.sizes)
    seen = n if model_points is None else model_points
    out = []
    found = max(K, model_clusters or 0)
    if clusters.slots and found >= clusters.slots:
        out.append(f"the model filled all {clusters.slots} of its cluster slots, the most it can give"
                   f"{f' ({K} after refining)' if K < found else ''}: the points may hold more clusters")
    unsure = float(np.mean(clusters.probability < LOW_CONFIDENCE))
    if unsure > UNSURE_SHARE:
        out.append(f"{unsure:.0%} of the points are unsure (probability of their cluster below {LOW_CONFIDENCE:g}): "
                   "the clusters overlap, or the model splits what may be one cluster")
    if not training.n_min <= seen <= training.n_max:
        out.append(f"the set has {seen:,} points, outside the {training.n_min:,}..{training.n_max:,} points per set "
                   "the model was trained on")
    if not training.k_min <= K <= training.k_max:
        out.append(f"{K} cluster{'' if K == 1 else 's'} found, outside the {training.k_min}..{training.k_max} clusters "
                   "per set the model was trained on")
    tiny = _too_small(values.shape[1])
    small = sum(len(np.unique(values[clusters.cluster == k], axis=0)) <= tiny for k in range(K)) if K > 1 else 0
    if small:
        out.append(f"{small} of the {K} clusters hold{'s' if small == 1 else ''} {tiny} or fewer distinct points, too "
                   "few to tell a cluster from a few stray or repeated points (rounded values?)"
                   + ("" if refined else "; refine them (`refine` drops or absorbs such clusters)"))
    pairs = 0 if refined else mergeable_pairs(values, clusters)
    if pairs:
        out.append(f"{pairs} pair(s) of the {K} clusters are explained better by one Gaussian than by two (BIC): the "
                   "model may have split clusters; refine them (`refine` merges such pairs)")
    spread = _median_spread(values, clusters) if K > 1 else None  # one cluster's spread is the whole set's
    if spread is not None and not training.spread_lo <= spread <= training.spread_hi:
        kind = "broader" if spread > training.spread_hi else "tighter"
        out.append(f"the clusters are {kind} relative to the whole set (typical spread {spread:.2f}) than any the "
                   f"model was trained on ({training.spread_lo:.2f}..{training.spread_hi:.2f})")
    if as_given_scale is not None:
        with np.errstate(over="ignore"):
            std = float(np.sqrt(np.mean(np.var(values, axis=0)))) if n > 1 else 0.0
        centre = float(np.sqrt(np.sum(np.mean(values, axis=0) ** 2))) if n else 0.0
        off = []
        if not as_given_scale / SCALE_FACTOR <= std <= as_given_scale * SCALE_FACTOR:
            off.append(f"a spread of {std:.3g}, far from the {as_given_scale:.2f} of the model's training sets")
        if centre > SCALE_FACTOR * max(as_given_scale, 1.0):  # the training sets' means are drawn around 0
            off.append(f"a centre {centre:.3g} from the origin, far from where the training sets lie")
        if off:
            out.append(f"the points used as given have {' and '.join(off)}: the model's clusters are not to be "
                       "trusted; leave out `no_standardize`")
    return tuple(out)


def _too_small(d: int) -> int:
    """The most points a cluster in ``d`` dimensions can hold and still be too small to judge: one more
    than a full-covariance Gaussian has parameters."""
    return d + d * (d + 1) // 2 + 1


def mergeable_pairs(values: np.ndarray, clusters: PointClusters) -> int:
    """The pairs of clusters (each of more points than parameters) whose points one Gaussian explains
    better than two, by BIC on the hard assignment: the sign of a split the model made inside one cluster."""
    x = standardization(values, 1.0).apply(values)  # unit spread: no overflow, whatever the units
    N, D = x.shape
    per_gaussian = D + D * (D + 1) // 2
    groups = [x[clusters.cluster == k] for k in range(len(clusters.sizes))]
    groups = [g for g in groups if len(g) > _too_small(D)]
    count = 0
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            a, b = groups[i], groups[j]
            both = np.concatenate([a, b])
            n_a, n_b, n = len(a), len(b), len(both)
            two = _gaussian_ll(a) + _gaussian_ll(b) + n_a * np.log(n_a / n) + n_b * np.log(n_b / n)
            one = _gaussian_ll(both)
            if -2 * one + per_gaussian * np.log(n) < -2 * two + (2 * per_gaussian + 1) * np.log(n):
                count += 1
    return count


def _gaussian_ll(x: np.ndarray) -> float:
    """The log-likelihood of points ``x`` (n, D) under their own maximum-likelihood Gaussian."""
    n, D = x.shape
    cov = np.cov(x, rowvar=False, bias=True).reshape(D, D) + 1e-9 * np.eye(D)
    sign, logdet = np.linalg.slogdet(cov)
    if sign <= 0:
        return float("inf")  # degenerate (points on a line): never merged into anything
    return float(-0.5 * n * (D * np.log(2 * np.pi) + logdet + D))


def _median_spread(values: np.ndarray, clusters: PointClusters) -> float | None:
    """The median over the clusters of 5 points or more of their major standard deviation, relative to the
    spread of the whole set (two or more coordinates; None when no cluster qualifies)."""
    if values.shape[1] < 2:
        return None
    keep = np.flatnonzero(clusters.sizes >= 5)
    if not len(keep):
        return None
    x = standardization(values[:, :2], 1.0).apply(values[:, :2])  # unit spread: no overflow, whatever the units
    means, covs = [], []
    for k in keep:
        pts = x[clusters.cluster == k]
        means.append(pts.mean(axis=0))
        covs.append(np.cov(pts, rowvar=False))
    weights = clusters.sizes[keep] / clusters.sizes[keep].sum()
    spread = float(np.median(relative_spreads(np.array(means), np.array(covs), weights)))
    return spread if np.isfinite(spread) else None


def _pick_hint(names: tuple[str, ...], dim_in: int) -> str:
    """How to pick ``dim_in`` columns with `columns`, in a form it takes for these names: the first names
    when each names one column and reads as a name, else indices."""
    if len(names) <= dim_in:
        return ""
    first = names[:dim_in]
    indices = [str(k) for k in range(dim_in)]
    if any(k in names for k in indices):  # a name that reads as an index: say which is meant
        indices = [f"index:{k}" for k in indices]
    by_name = all(names.count(n) == 1 and is_plain_name(n) for n in first)
    example = ",".join(first if by_name else indices)
    return f"; pick {dim_in} with `columns` (e.g. `columns` {example})"
