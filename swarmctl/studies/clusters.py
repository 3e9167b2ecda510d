"""Clustering a user's own point file with a trained model (`swarmctl cluster`): check every output path,
open the model, read and check the points, cluster them in one forward pass, refine the clusters by EM
seeded with the model's probabilities, say where the result should not be trusted; then write the CSV
(and the figure) all together, or nothing."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from swarmctl.data.clustering_generator import TrainingRange, relative_spreads
from swarmctl.data.points import STDIN, PointSet, is_plain_name, parse_columns, read_points, write_cluster_csv
from swarmctl.errors import ConfigError, DataError, plural
from swarmctl.files import check_png, staged_outputs
from swarmctl.runs import open_run, shipped_models
from swarmctl.tasks.mixtures import (
    WEAK_EVIDENCE,
    EMResult,
    Mixture,
    bic,
    cluster_points,
    e_step,
    fit_k,
    min_points,
    one_gaussian_is_better,
    sample_rows,
    too_few_points,
)
from swarmctl.tasks.mixtures import refine as em_refine
from swarmctl.tasks.point_clusters import CHUNK_SIZE, PointClusters, standardization, summarize_probabilities

__all__ = ["CHUNK_SIZE", "ClusterResult", "choose_k", "cluster_file", "cluster_values", "cluster_warnings",
           "made_by", "mergeable_pairs", "parse_columns", "shape_warnings", "start_of", "values_warnings"]

CHAIN_MIN = 5  # this many clusters or more, over twice the groups of touching ones (twice, if chained): cut shapes?
LOW_CONFIDENCE = 0.5  # a point is unsure when its cluster's probability is below this
UNSURE_SHARE = 0.2  # warn when more than this share of the points is unsure
SCALE_FACTOR = 3.0  # points used as given: warn when their spread is this far from the training scale
WARM_UP_POINTS = 256
MODEL_POINTS = 1000  # refining a larger set, the model sees a sample of this many (the sizes it was trained on)
K_MASS = 0.9  # choosing K with a count head: the most probable K until they hold this share of its distribution
K_CANDIDATES = 4  # at most this many of them
K_LEAST = 0.05  # and each this probable (the most probable always)
BIC_WEIGHT = 0.1  # the BIC's weight against the log-probability of K (1: the BIC as the log-evidence)
COUNT_FLOOR = 1e-4  # the least probability a K is given (the model never rules one out)
COUNT_WEAK = 0.5  # the evidence for K is weak when the model's count and the BIC together give it less than this
MODEL_SHARE = 0.2  # refining, the share of the progress reported that the model's pass takes (EM's the rest)


@dataclass(frozen=True, kw_only=True)
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
    given_clusters: int | None = None  # the number of clusters the user gave (`clusters`); None: found by BIC
    fit: EMResult | None = None  # the refinement: what it merged, dropped, searched, split, and where it began
    smallest_component: float = 0.0  # the points' worth under which the refinement drops a component
    model_points: int = 0  # the points the model saw (a sample when refining a large set)
    sorted_for_model: bool = False  # an order-dependent model read the points sorted by coordinate
    training: TrainingRange | None = None  # what the model was trained on
    warnings: tuple[str, ...] = ()  # one line each, for the user
    written: tuple[Path, ...] = ()  # the files written, once they are
    chosen: str = ""  # why this model, when the user named none ("" when named)

    @property
    def start(self) -> str:
        """Which start won (:func:`start_of`)."""
        return start_of(self.refined, self.fit)

    @property
    def made_by(self) -> str:
        """What produced the clusters (:func:`made_by`)."""
        return made_by(self.model, self.refined, self.fit, self.given_clusters, len(self.clusters.sizes))


def start_of(refined: bool, fit: EMResult | None) -> str:
    """Which start the clusters grew from, in the words that the summary, the CSV's comment, the figure's title,
    the JSON and the Python API share: the model's answer, or a fresh k-means++ start that beat it ("" when
    not refined)."""
    if not refined:
        return ""
    return "the model's start" if fit is None or fit.from_model else "a fresh k-means++ start"


def made_by(model: str, refined: bool, fit: EMResult | None, given: int | None, found: int) -> str:
    """What produced ``found`` clusters, in one wording: the ``model`` alone, or EM, how K was settled (the
    ``given`` K, or BIC) and which start won (:func:`start_of`)."""
    if not refined:
        return f"{model} alone (no EM)"
    start = start_of(refined, fit)
    if given is not None:
        return f"EM at the {plural(given, 'cluster')} given, from {start}"
    split = ", then split while the BIC fell" if fit is not None and fit.split_from else ""
    by = "the model's count and BIC" if fit is not None and fit.counts else "BIC"
    return f"EM, {plural(found, 'cluster')} by {by}, from {start}{split}"


def default_model() -> Path | None:
    """The shipped model `swarmctl cluster` uses when no run is named (:func:`_default_choice`)."""
    return _default_choice()[0]


def _default_choice() -> tuple[Path | None, str]:
    """The shipped model whose record says ``"default_for": ["cluster"]`` (a model trained for real data), else
    None (the task's shipped model, the one `eval` and `plot-entropy` use); and why, in the user's words."""
    for model in shipped_models():
        if "cluster" in model.record.get("default_for", ()):
            trained = model.record.get("dataset")
            return model.checkpoint, ("the default for clustering files of points, as its record says"
                                      + (f"; trained on {trained}" if isinstance(trained, str) else ""))
    return None, "the task's shipped model: no shipped model is marked as the default for clustering files"


def cluster_file(points: str, run: str | Path | None, runs_dir: Path, *, key: str | None = None,
                 columns: tuple[str, ...] | None = None, out: Path | None = None, plot: Path | None = None,
                 force: bool = False, standardize: bool = True, per_coordinate: bool = False,
                 refine: bool = True, clusters: int | None = None, skip_bad_rows: bool = False,
                 chunk_size: int | None = None, device: str = "auto", progress: Callable[[float], None] | None = None,
                 save_plot: Callable[[ClusterResult, Path], Path] | None = None,
                 report: Callable[[ClusterResult], None] | None = None) -> ClusterResult:
    """Cluster the points of ``points`` (a file, or ``"-"`` for standard input) with the run ``run`` (None:
    the shipped clustering model, :func:`default_model`) and write the CSV ``out`` (default: in the run's
    folder, ``cluster/NAME-clusters.csv`` for ``NAME.EXT``, ``cluster/clusters.csv`` for standard input) and,
    with ``plot``, the figure that ``save_plot(result, path)`` draws and saves (returning the path).

    The outputs given are checked before anything is read, the default one once the model is open, and all
    again once the checkpoint is known: a bad path fails with nothing written. ``refine``: EM from the
    model's probabilities (:mod:`swarmctl.tasks.mixtures`); ``clusters``: the number of clusters, given (EM
    at exactly that many, no search; it needs ``refine``, and at most as many as the distinct points).
    ``report(result)`` is called once the files are written but before they appear (a summary printed
    there that cannot be printed leaves no file); all appear together, or none. Returns the result with
    its ``warnings`` and the paths ``written``.
    """
    if plot is not None and save_plot is None:
        raise ValueError("a plot was asked for but no save_plot given")
    check_png(plot, "plot")
    if per_coordinate and not standardize:
        raise ConfigError("`per_coordinate` scales the points and `no_standardize` uses them as given: give one "
                          "of the two")
    _check_clusters(clusters, refine)
    source = () if points == STDIN else (Path(points),)
    run, chosen = _default_choice() if run is None else (run, "")
    named = (Path(run),) if run is not None and Path(run).is_file() else ()  # a checkpoint named as a file
    if out is not None and plot is not None and (os.path.realpath(out) == os.path.realpath(plot) or os.path.exists(
            out) and os.path.exists(plot) and os.path.samefile(out, plot)):  # however written, or two hard links
        raise ConfigError(f"`out` and `plot` name the same file {plot}; give each its own path")
    with staged_outputs((*source, *named), replace=force) as outputs:  # every output checked before any work
        out = outputs.file(out) if out is not None else None
        plot = outputs.file(plot) if plot is not None else None
        opened = open_run(run, runs_dir, device, study="cluster", needs_data=False)  # refuses another task's run
        outputs.input(opened.checkpoint)
        if out is None:
            name = "clusters.csv" if points == STDIN else f"{Path(points).stem}-clusters.csv"
            out = outputs.file(opened.dir / "cluster" / name, replace=True)
        dim_in = opened.model_cfg.dim_in
        pts = read_points(points, key, columns, skip_bad_rows)
        D = pts.values.shape[1]
        if D != dim_in:
            raise DataError(f"{pts.source} has {D} column(s) ({', '.join(pts.names[:6])}{' ...' if D > 6 else ''}) "
                            f"but {opened.label} takes {dim_in} coordinates per point{_pick_hint(pts.names, dim_in)}")
        if clusters is not None:
            _check_distinct(pts, clusters)
        task = opened.task
        options = {"standardize": standardize, "per_coordinate": per_coordinate, "refine": refine,
                   "chunk_size": chunk_size}
        warm_up = {**options, "refine": False}  # loads the model's kernels; EM needs no warming up
        cluster_values(task, opened.model, pts.values[:WARM_UP_POINTS], opened.device, **warm_up)
        start = time.perf_counter()
        found, model_k, fitted = cluster_values(task, opened.model, pts.values, opened.device, progress=progress,
                                                clusters=clusters, **options)
        seen = _model_points(len(pts.values), refine)
        seconds = time.perf_counter() - start
        training = task.training_range(opened.model_cfg)
        result = ClusterResult(
            points=pts, clusters=found, out=out, plot=plot, model=opened.label, checkpoint=opened.checkpoint,
            shipped=opened.shipped, seconds=seconds, model_clusters=model_k, refined=refine,
            given_clusters=clusters, fit=fitted, smallest_component=1.0 if clusters is not None else min_points(D),
            model_points=seen, sorted_for_model=not _order_free(opened.model), training=training,
            chosen=chosen, warnings=values_warnings(task, opened.model_cfg, pts.values, found, model_k, fitted,
                                                    standardize=standardize, refine=refine, clusters=clusters))
        write_cluster_csv(out, pts, found.cluster, found.probability, found.entropy,
                          comment=f"clusters by {result.made_by}; model {result.model}")
        written = [out]
        if plot is not None:
            written.append(save_plot(result, plot))  # type: ignore[misc]
        result = replace(result, written=tuple(written))
        if report is not None:
            report(result)
    return result


def cluster_values(task, model, values: np.ndarray, device, *, standardize: bool = True,
                   per_coordinate: bool = False, refine: bool = True, clusters: int | None = None,
                   chunk_size: int | None = None, progress: Callable[[float], None] | None = None
                   ) -> tuple[PointClusters, int, EMResult | None]:
    """One set of points ``values`` (N, D) clustered by ``model`` (of the clustering ``task``) and, with
    ``refine``, by EM from its probabilities (K settled by BIC, or ``clusters`` given): (the clusters, the
    number the model found, the EM fit or None). To refine a set of more than :data:`MODEL_POINTS` points
    the model sees a seeded sample of that many (the sizes it was trained on; EM then fits all points), to
    cluster it alone all of them. A model whose answer depends on the order of the points (an LSTM) reads
    them sorted by coordinate, so the clusters depend on the set, not on the order of the rows.
    ``progress(fraction_done)``: the model's pass, then EM's fits."""
    _check_clusters(clusters, refine)
    n = len(values)
    rows = sample_rows(values, MODEL_POINTS) if _model_points(n, refine) < n else None
    if rows is None and not _order_free(model):
        rows = sample_rows(values, n)  # all of them, sorted
    share = MODEL_SHARE if refine else 1.0  # of the progress reported: the model's pass, then EM's
    model_progress, em_progress = _part(progress, 0.0, share), _part(progress, share, 1.0)
    found = task.cluster_points(model, values if rows is None else values[rows], device, standardize, chunk_size,
                                model_progress, per_coordinate=per_coordinate, keep_probabilities=refine)
    model_k, fitted = len(found.sizes), None
    if refine:
        if clusters is None:
            fitted = em_refine(values, found.probabilities, rows=rows, progress=em_progress)
            if found.counts is not None:  # a model with a count head: K where its distribution puts the mass
                fitted = choose_k(values, found.probabilities, fitted, found.counts, rows)
        else:
            fitted = fit_k(values, found.probabilities, clusters, rows=rows, progress=em_progress)
        found = summarize_probabilities(fitted.resp, found)
    elif rows is not None:  # the model's answer, back in the order of the rows (a permutation of them all)
        back = np.argsort(rows)
        found = replace(found, cluster=found.cluster[back], probability=found.probability[back],
                        entropy=found.entropy[back])
    return found, model_k, fitted


def choose_k(values: np.ndarray, resp: np.ndarray, fit: EMResult, counts: np.ndarray, rows: np.ndarray | None = None
             ) -> EMResult:
    """The number of clusters of ``values`` (N, D) chosen by the model's distribution over K (``counts``: the
    probabilities of 1, 2, ..., C or more clusters) and the BIC together.

    The candidates: the refinement ``fit`` (whose K the BIC chose, the model's start among its starts) and EM
    at exactly K (:func:`fit_k`, from the model's responsibilities ``resp`` of ``values[rows]`` or a fresh
    k-means++ start) for the most probable K until they hold :data:`K_MASS` of the distribution (at most
    :data:`K_CANDIDATES`, each of probability :data:`K_LEAST` or more). They are compared on the points the
    model saw (``values[rows]``; all of them when ``rows`` is None): the winner has the highest log-probability
    of its K minus :data:`BIC_WEIGHT` times half its BIC (the BIC alone is the log-evidence of a mixture of
    Gaussians, over-confident where the clusters are not Gaussians) and, fitted on a sample, is refitted to all
    points. Returns the winner with ``counts``, the candidates' ``posterior`` (the softmax of that score, summed
    per K: the evidence for K) and the search's record (``scores``, ``largest``, ...) of ``fit``."""
    seen = values if rows is None else values[rows]
    m, d = seen.shape
    order = np.argsort(-counts, kind="stable")
    held = int(np.searchsorted(np.cumsum(counts[order]), K_MASS)) + 1
    picked = [int(j) + 1 for j in order[:min(held, K_CANDIDATES)] if counts[j] >= K_LEAST or j == order[0]]
    cap = max(1, fit.largest or m // cluster_points(d))  # a cluster needs points of its own
    fits = [fit] + [fit_k(seen, resp, k) for k in picked if k != len(fit.mixture) and k <= cap]

    unit = standardization(seen, 1.0)  # the likelihoods in unit spread: no overflow, whatever the units
    z, s = unit.apply(seen), float(unit.scale[0])

    def score(f: EMResult) -> float:
        k = min(len(f.mixture), len(counts))  # the last class: that many or more
        mix = f.mixture
        scaled = Mixture(mix.weights, (mix.means - unit.shift) * s, mix.covs * s * s)
        evidence = bic(e_step(z, scaled)[1] * m, mix.n_parameters(), m)
        return float(np.log(max(counts[k - 1], COUNT_FLOOR))) - BIC_WEIGHT * evidence / 2

    scores = np.array([score(f) for f in fits])
    best = fits[int(np.argmax(scores))]  # the first (the BIC's own choice) on a tie
    ks, weights = np.array([len(f.mixture) for f in fits]), np.exp(scores - scores.max())
    posterior = {int(k): float(weights[ks == k].sum() / weights.sum()) for k in np.unique(ks)}
    if best is not fit:
        if rows is not None:  # fitted on the model's sample: the same K, from the same start, on all points
            best = fit_k(values, resp, len(best.mixture), rows=rows)
        best = replace(best, searched=fit.searched, largest=fit.largest, search_points=fit.search_points,
                       scores=fit.scores, scanned=fit.scanned)
    return replace(best, counts=tuple(float(p) for p in counts),
                   posterior=tuple(sorted(posterior.items(), key=lambda kp: -kp[1])))


def _part(progress: Callable[[float], None] | None, lo: float, hi: float) -> Callable[[float], None] | None:
    """``progress`` of a part of the work that takes it from ``lo`` to ``hi``."""
    return None if progress is None else (lambda f: progress(lo + (hi - lo) * f))


def _order_free(model) -> bool:
    """Whether the model's answer for a point is the same in any order of the points (its declared
    ``symmetry``)."""
    return getattr(model, "symmetry", None) in ("equivariant", "invariant")


def _check_clusters(clusters: int | None, refine: bool) -> None:
    """``clusters`` in itself: at least 1, and only with the refinement (EM gives the K clusters)."""
    if clusters is None:
        return
    if clusters < 1:
        raise ConfigError(f"`clusters` must be at least 1, got {clusters}")
    if not refine:
        raise ConfigError("`clusters` fits EM at that many clusters from the model's answer, and `no_refine` "
                          "leaves EM out: drop one of the two")


def _check_distinct(pts: PointSet, clusters: int) -> None:
    """At most as many clusters as distinct points: a cluster needs a point of its own."""
    values = pts.values
    if clusters <= len(np.unique(values[:4 * clusters], axis=0)):  # enough in the first rows: no sort of all
        return
    distinct = len(np.unique(values, axis=0))
    if clusters > distinct:
        raise ConfigError(f"`clusters` {clusters} is more than the {distinct:,} distinct points of {pts.source}: "
                          f"give at most {distinct:,}")


def _model_points(n: int, refine: bool) -> int:
    """How many of ``n`` points the model sees."""
    return min(n, MODEL_POINTS) if refine else n


def values_warnings(task, model_cfg, values: np.ndarray, found: PointClusters, model_k: int, fit: EMResult | None,
                    *, standardize: bool = True, refine: bool = True, clusters: int | None = None
                    ) -> tuple[str, ...]:
    """:func:`cluster_warnings` for what :func:`cluster_values` returned (``found``, ``model_k``, ``fit``) on
    ``values`` with a model of ``model_cfg`` and these options: the one call that the command, the Python API
    and the benchmark share."""
    return cluster_warnings(values, found, task.training_range(model_cfg),
                            as_given_scale=None if standardize else float(task.point_std()), refined=refine,
                            model_clusters=model_k, model_points=_model_points(len(values), refine),
                            given_clusters=clusters, largest=fit.largest if fit is not None else 0,
                            search_points=fit.search_points if fit is not None else 0, fit=fit)


def cluster_warnings(values: np.ndarray, clusters: PointClusters, training: TrainingRange,
                     as_given_scale: float | None = None, refined: bool = False,
                     model_clusters: int | None = None, model_points: int | None = None,
                     given_clusters: int | None = None, largest: int = 0, search_points: int = 0,
                     fit: EMResult | None = None) -> tuple[str, ...]:
    """One line per reason not to trust ``clusters`` of ``values`` (N, D) as they are (docs/cluster.md,
    "Warnings"). ``as_given_scale``: the training scale, for points used as given; ``refined``: pairs that
    look like one Gaussian are left to the refinement's BIC; ``model_clusters``: the clusters the model found
    before a refinement merged some; ``model_points``: the points the model saw (None: all);
    ``given_clusters``: the user's K (no cap or training range of K applies); ``largest``: the most clusters
    the search for K could try on ``search_points`` points (0: no search); ``fit``: the refinement, whose
    shapes and evidence for K are judged (:func:`shape_warnings`)."""
    n, d = values.shape
    seen = n if model_points is None else model_points
    given = given_clusters is not None
    K = len(clusters.sizes)
    lines = []
    found = max(K, model_clusters or 0)
    if not given and not largest and clusters.slots and found >= clusters.slots:
        lines.append(f"the model filled all {clusters.slots} of its cluster slots, the most it can give"
                     f"{f' ({K} after refining)' if K < found else ''}: the points may hold more clusters")
    unsure = float(np.mean(clusters.probability < LOW_CONFIDENCE))
    if unsure > UNSURE_SHARE:
        lines.append(f"{unsure:.0%} of the points are unsure (probability of their cluster below {LOW_CONFIDENCE:g}): "
                     "the clusters overlap, or the model splits what may be one cluster")
    if not training.n_min <= seen <= training.n_max:
        lines.append(f"the set has {seen:,} points, outside the {training.n_min:,}..{training.n_max:,} points per "
                     "set the model was trained on")
    if not (given or (largest and K > training.k_max) or training.k_min <= K <= training.k_max):
        lines.append(f"{plural(K, 'cluster')} found, outside the {training.k_min}..{training.k_max} clusters per set "
                     "the model was trained on")
    if given and K < given_clusters:
        lines.append(f"EM kept {K:,} of the {given_clusters:,} clusters given: the others lost every point (too few "
                     "points apart for that many clusters); give fewer `clusters`")
    if not given and largest and K >= largest:  # the set's size capped the search for K at or below the K found
        searched = search_points or n
        points = f"{searched:,} points" + (f" (a sample of the {n:,})" if searched < n else "")
        why = (f"the points may hold more clusters than the {K} found" if K == largest else
               f"the {K} clusters are the model's, not checked against more")
        lines.append("the set's size capped the refinement's search for the number of clusters at "
                     f"{plural(largest, 'cluster')} ({points}; a cluster needs {cluster_points(d)} or more in "
                     f"{plural(d, 'dimension')}): {why}; give `clusters` if you know how many")
    tiny = too_few_points(d)  # so few distinct points that they may be stray or repeated points, not clusters
    small = sum(len(np.unique(values[clusters.cluster == k], axis=0)) <= tiny for k in range(K)) if K > 1 else 0
    if small:
        lines.append(f"{small} of the {K} clusters hold{'s' if small == 1 else ''} {tiny} or fewer distinct points, "
                     "too few to tell a cluster from a few stray or repeated points (rounded values?)"
                     + ("" if refined else "; refine them (`refine` drops or absorbs such clusters)"))
    if not refined and (pairs := mergeable_pairs(values, clusters)):
        lines.append(f"{pairs} pair(s) of the {K} clusters are explained better by one Gaussian than by two (BIC): "
                     "the model may have split clusters; refine them (`refine` merges such pairs)")
    spread = _median_spread(values, clusters) if K > 1 else None  # one cluster's is the set's
    if spread is not None and not training.spread_lo <= spread <= training.spread_hi:
        lines.append(f"the clusters are {'broader' if spread > training.spread_hi else 'tighter'} relative to the "
                     f"whole set (typical spread {spread:.2f}) than any the model was trained on "
                     f"({training.spread_lo:.2f}..{training.spread_hi:.2f})")
    if as_given_scale is not None:
        lines.extend(_as_given_warning(values, as_given_scale))
    if fit is not None:
        lines.extend(shape_warnings(fit, K, given))
    return tuple(lines)


def shape_warnings(fit: EMResult, K: int, given: bool = False) -> list[str]:
    """Where the refinement ``fit`` (K clusters) should not be taken at its word: the points are not a
    mixture of Gaussians (pieces of a ring or a curve, a dense core in a wide halo), or the evidence for K is
    weak (another K fits almost as well by BIC, or one cluster is flat-topped, as two overlapping ones are).
    ``given``: K was the user's, so only the shapes are judged."""
    lines = []
    shapes = fit.shapes
    groups = shapes.n_groups() if shapes is not None else K
    if shapes is not None and (shapes.pieces or (K >= CHAIN_MIN and (K > 2 * groups or K == 2 * groups and
                                                                     shapes.chained))):
        flat = f", {shapes.pieces} of them flatter than Gaussians" if shapes.pieces else ""
        lines.append(f"the {plural(K, 'cluster')} lie in {plural(groups, 'group')} of clusters that touch{flat}: the "
                     "points may not be a mixture of Gaussians (a ring, a curve, a warped cluster?), and the "
                     "clusters then cut each shape into pieces; look at the figure (`plot`)")
    if shapes is not None and shapes.nested:
        lines.append(f"{plural(shapes.nested, 'cluster')} lie{'s' if shapes.nested == 1 else ''} inside a much wider "
                     "one about the same centre (a dense core in a wide halo?): the points may be one cluster that "
                     "is not Gaussian; look at the figure (`plot`)")
    if given:
        return lines
    other = fit.runner_up()
    chosen = dict(fit.posterior).get(K, 1.0)
    if chosen < COUNT_WEAK:  # the model's count and the BIC together (choose_k) gave K less than even odds
        alt, p = next(kp for kp in fit.posterior if kp[0] != K)
        lines.append(f"the evidence for {plural(K, 'cluster')} is weak: the model's count and the BIC give it "
                     f"probability {chosen:.2f}, and {plural(alt, 'cluster')} {p:.2f}; give `clusters` if you know "
                     "how many")
    elif other is not None and other[1] < WEAK_EVIDENCE:  # a count that overruled the BIC: a margin below 0
        how = (f"fit almost as well (BIC only {other[1]:.1f} higher, under {WEAK_EVIDENCE:g})" if other[1] >= 0 else
               f"fit better by BIC ({-other[1]:.1f} lower; the model's count chose {K})")
        lines.append(f"the evidence for {plural(K, 'cluster')} is weak: {plural(other[0], 'cluster')} {how}; give "
                     "`clusters` if you know how many")
    elif K == 1 and shapes is not None and shapes.flat:
        lines.append("the evidence for 1 cluster is weak: its points are flatter along their long axis than one "
                     "Gaussian's, as two or more overlapping clusters are; give `clusters` if you know how many")
    return lines


def _as_given_warning(values: np.ndarray, as_given_scale: float) -> list[str]:
    """Points used as given whose spread or centre is far from the training sets'."""
    n = len(values)
    with np.errstate(over="ignore"):
        std = float(np.sqrt(np.mean(np.var(values, axis=0)))) if n > 1 else 0.0
    centre = float(np.sqrt(np.sum(np.mean(values, axis=0) ** 2))) if n else 0.0
    off = []
    if not as_given_scale / SCALE_FACTOR <= std <= as_given_scale * SCALE_FACTOR:
        off.append(f"a spread of {std:.3g}, far from the {as_given_scale:.2f} of the model's training sets")
    if centre > SCALE_FACTOR * max(as_given_scale, 1.0):  # the training sets' means are drawn around 0
        off.append(f"a centre {centre:.3g} from the origin, far from where the training sets lie")
    return [f"the points used as given have {' and '.join(off)}: the model's clusters are not to be trusted; "
            "leave out `no_standardize`"] if off else []


def mergeable_pairs(values: np.ndarray, clusters: PointClusters) -> int:
    """The pairs of clusters (each of more points than parameters) whose points one Gaussian explains
    better than two, by BIC on the hard assignment: the sign of a split the model made inside one cluster."""
    x = standardization(values, 1.0).apply(values)  # unit spread: no overflow, whatever the units
    groups = [x[clusters.cluster == k] for k in range(len(clusters.sizes))]
    groups = [g for g in groups if len(g) > too_few_points(x.shape[1])]
    return sum(one_gaussian_is_better(groups[i], groups[j]) for i in range(len(groups))
               for j in range(i + 1, len(groups)))


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
