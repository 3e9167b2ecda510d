"""Gaussian mixtures with full covariances, in NumPy: parameter counts, BIC, log-densities, EM, merges, and
the refinement of a model's clustering (`swarmctl cluster`): :func:`refine` (`--refine`, K by BIC around
the model's and a k-means scan's, and upward while it falls) and :func:`fit_k` (`--clusters K`);
docs/cluster.md describes both; :func:`shapes`, the signs that the points are not a mixture of Gaussians.
The one place that counts a Gaussian's parameters or scores a fit by BIC.

Float64, vectorized over points and components: no extra dependency, and fast on a CPU (each iteration is a
few matrix products of (N, K) and (N, D*D) arrays). Every random choice is made on the points sorted by
their coordinates, so the result does not depend on the order of the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from swarmctl.tasks.point_clusters import AffineMap, standardization

MAX_ITER = 300
TOL = 1e-4  # stop when the mean log-likelihood per point gains less than this
SEARCH_TOL = 1e-3  # the same while merging and searching: the winner is then fitted to TOL
MERGE_CANDIDATES = 2  # the pairs whose responsibilities overlap most, tried at each merge
REG = 1e-6  # added to each covariance's diagonal, times the data's variance: keeps every Cholesky factor finite
# (raised to the variance of the data's rounding where that is larger: :func:`rounding_variance`)
Floor = float | np.ndarray  # what goes on a covariance's diagonal: one number, or one per coordinate
OFF_STEP = 0.1  # the most points (share) that values held by one point each may hold and still lie off a step
SAME_VALUE = 1e-9  # scaled points (unit robust spread) closer than this: one value written two ways (far below REG's
# resolution, its square root: merging them cannot floor points that have no step)
MAX_ZOOM = 1e6  # the robust scale puts no point further out than this (its squares stay far from overflow)
SEARCH_BELOW, SEARCH_ABOVE = 1, 4  # fresh fits at K-1 .. K+4 clusters around the merged model start's K
SCAN_ALL, SCAN_STEP = 8, 1.25  # the scan for K tries every K up to 8, then steps up by a quarter
SCAN_PATIENCE = 6  # past 8, the scan goes on upward until this many steps in a row did not beat its best
SCAN_AROUND = 1  # fresh fits at the scan's K and this many either side of it
WEAK_EVIDENCE = 10.0  # a BIC margin below this between the K chosen and another is weak evidence (Kass-Raftery)
SHARED = 0.02  # two components touch when they share more than this share of the smaller's probability mass
SHAPE_POINTS = 4000  # the shapes of a fit are judged on an even sample of this many points at most
FLAT_Z = 1.5  # standard errors of the kurtosis below a Gaussian's: flat (a ring's or a curve's pieces)
CHAINED_Z = 2.0  # the same, pooled over every touching component (touching Gaussians, truncated, reach 1.75)
NESTED = 4.0  # a component whose covariance's determinant is this many times another's, about the same centre
SEARCH_POINTS = 2000  # the search for K runs on a sample of this many points at most
KMEANS_ITER = 20
K_TOL, K_MAX_ITER = 1e-3, 100  # EM at a K given: scikit-learn's GaussianMixture defaults
K_POINTS = 20_000  # EM at a K given starts on a sample of this many points at most (one fit: no search)
SEED = 0


def gaussian_parameters(d: int) -> int:
    """The free parameters of one full-covariance Gaussian in ``d`` dimensions: d means and d(d + 1)/2
    covariances."""
    return d + d * (d + 1) // 2


def mixture_parameters(k: int, d: int) -> int:
    """The free parameters of a mixture of ``k`` such Gaussians: theirs and k - 1 weights."""
    return (k - 1) + k * gaussian_parameters(d)


def bic(log_likelihood: float, n_parameters: int, n: int) -> float:
    """The Bayesian information criterion of a fit of ``n_parameters`` to ``n`` points whose total
    ``log_likelihood`` it is (lower is better)."""
    return -2.0 * log_likelihood + n_parameters * np.log(n)


def too_few_points(d: int) -> int:
    """The most points a cluster in ``d`` dimensions can hold and still be too small to judge: one more
    than a Gaussian has parameters."""
    return gaussian_parameters(d) + 1


def gaussian_log_likelihood(x: np.ndarray, reg: Floor = 1e-9) -> float:
    """The total log-likelihood of points ``x`` (n, D) under their own maximum-likelihood Gaussian, ``reg`` on its
    covariance's diagonal (+inf when they are degenerate, e.g. on a line)."""
    n, D = x.shape
    cov = np.cov(x, rowvar=False, bias=True).reshape(D, D) + reg * np.eye(D)
    sign, logdet = np.linalg.slogdet(cov)
    if sign <= 0:
        return float("inf")
    return float(-0.5 * n * (D * np.log(2 * np.pi) + logdet + D))


def one_gaussian_is_better(a: np.ndarray, b: np.ndarray, reg: Floor = 1e-9) -> bool:
    """Whether the points ``a`` and ``b`` (each (n, D)) together are explained better by one Gaussian than
    by a mixture of two, one per group (BIC on the hard assignment)."""
    both = np.concatenate([a, b])
    n_a, n_b, n = len(a), len(b), len(both)
    D = both.shape[1]
    two = gaussian_log_likelihood(a, reg) + gaussian_log_likelihood(b, reg) + n_a * np.log(n_a / n) + n_b * np.log(
        n_b / n)
    return bic(gaussian_log_likelihood(both, reg), mixture_parameters(1, D), n) < bic(two, mixture_parameters(2, D), n)


@dataclass(frozen=True)
class Mixture:
    """K Gaussians: ``weights`` (K,), ``means`` (K, D), ``covs`` (K, D, D)."""

    weights: np.ndarray
    means: np.ndarray
    covs: np.ndarray

    def __len__(self) -> int:
        return len(self.weights)

    def n_parameters(self) -> int:
        return mixture_parameters(*self.means.shape)


@dataclass(frozen=True)
class EMResult:
    """What :func:`refine` and :func:`fit_k` found, and how."""

    mixture: Mixture
    resp: np.ndarray  # (N, K) each point's posterior probabilities
    log_likelihood: float  # the mean per point
    history: tuple[float, ...]  # it after each iteration of the last fit; falls only by rounding or a dropped component
    merged: int  # duplicate pairs merged from the model's start (whether or not it won)
    dropped: int  # empty components removed
    searched: tuple[int, ...] = ()  # the numbers of clusters of the fresh fits tried (empty: no search)
    from_model: bool = True  # whether the winner grew from the model's start
    largest: int = 0  # the most clusters the search could try, set by search_points (0: no search)
    split_from: int = 0  # the clusters that splitting grew the winner from (0: no split won)
    search_points: int = 0  # the points the search ran on (0: no search)
    scores: tuple[tuple[int, float], ...] = ()  # (K, BIC) of every fit compared on the search's points, best first
    scanned: int = 0  # the K where the scan of k-means partitions put the best BIC (0: no scan)
    shapes: Shapes | None = None  # how the winner's components sit: chains, cores in halos, a flat one
    counts: tuple[float, ...] = ()  # the model's probabilities of 1, 2, ... clusters that chose K with the BIC
    posterior: tuple[tuple[int, float], ...] = ()  # (K, probability) of the candidates that count and BIC weighed

    def runner_up(self) -> tuple[int, float] | None:
        """The best other number of clusters the search fitted, and by how much its BIC is higher than the
        winner's (None: no other was fitted)."""
        k = len(self.mixture)
        won = dict(self.scores).get(k)
        others = [(j, score) for j, score in self.scores if j != k]
        if won is None or not others:
            return None
        return others[0][0], others[0][1] - won


@dataclass(frozen=True)
class Shapes:
    """Signs in a fitted mixture that the points are not a mixture of Gaussians, or that its K is uncertain."""

    groups: tuple[int, ...]  # per component, its group: components joined by no dip in density between them
    nested: int  # pairs of components about one centre, one much wider (a dense core in a wide halo)
    flat: bool  # one component whose points are flatter along its major axis than a Gaussian's (two overlapping?)
    pieces: int = 0  # components in flat groups of three or more: pieces of a shape that is not Gaussian
    chained: bool = False  # the components that touch another, pooled, are flat by CHAINED_Z: pieces of shapes

    def n_groups(self) -> int:
        return len(set(self.groups))


def component_log_density(x: np.ndarray, means: np.ndarray, covs: np.ndarray) -> np.ndarray:
    """log N(x_n | mu_k, Sigma_k), (N, K): the Mahalanobis terms as two matrix products,
    (x - mu)' P (x - mu) = x' P x - 2 mu' P x + mu' P mu with P = Sigma^-1 (from its Cholesky factor)."""
    N, D = x.shape
    chol = np.linalg.cholesky(covs)  # (K, D, D)
    inv_chol = np.linalg.inv(chol)
    prec = np.einsum("kji,kjl->kil", inv_chol, inv_chol)  # (K, D, D): L^-T L^-1
    p_mu = np.einsum("kij,kj->ki", prec, means)  # (K, D)
    maha = (_outer_rows(x) @ prec.reshape(len(means), D * D).T - 2.0 * (x @ p_mu.T)
            + np.einsum("ki,ki->k", means, p_mu)[None, :])
    np.maximum(maha, 0.0, out=maha)  # rounding can take a point at a mean just below zero
    logdet = 2.0 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)
    return -0.5 * (maha + logdet[None, :] + D * np.log(2 * np.pi))


def _outer_rows(x: np.ndarray) -> np.ndarray:
    """(N, D*D): each row's outer product with itself, flattened."""
    return (x[:, :, None] * x[:, None, :]).reshape(len(x), -1)


def _logsumexp(a: np.ndarray) -> np.ndarray:
    top = a.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return (top + np.log(np.exp(a - top).sum(axis=1, keepdims=True)))[:, 0]


def e_step(x: np.ndarray, mix: Mixture) -> tuple[np.ndarray, float]:
    """Posterior responsibilities (N, K) and the mean log-likelihood per point."""
    with np.errstate(divide="ignore"):
        joint = component_log_density(x, mix.means, mix.covs) + np.log(mix.weights)[None, :]
    norm = _logsumexp(joint)
    return np.exp(joint - norm[:, None]), float(norm.mean())


def m_step(x: np.ndarray, resp: np.ndarray, reg: Floor) -> Mixture:
    """Maximum-likelihood weights, means and covariances for responsibilities ``resp`` (N, K); ``reg`` on each
    covariance's diagonal (one number, or one per coordinate)."""
    nk = resp.sum(axis=0)  # (K,)
    means = (resp.T @ x) / nk[:, None]
    D = x.shape[1]
    # centred on the mean of all points, so that the sums of squares stay small
    centre = x.mean(axis=0)
    xc, mc = x - centre, means - centre
    second = (resp.T @ _outer_rows(xc)).reshape(-1, D, D) / nk[:, None, None]
    covs = second - mc[:, :, None] * mc[:, None, :]
    covs = 0.5 * (covs + covs.transpose(0, 2, 1)) + reg * np.eye(D)[None]
    return Mixture(nk / nk.sum(), means, covs)


def min_points(d: int) -> float:
    """The fewest points' worth of responsibility a component in ``d`` dimensions keeps: d + 1, the fewest
    points whose covariance is not singular (below that EM can buy likelihood without limit by shrinking a
    component onto a few points, and BIC does not stop it on small sets)."""
    return d + 1.0


def _drop_empty(resp: np.ndarray, least: float, owned: bool = False) -> tuple[np.ndarray, int]:
    """``resp`` without the components that hold less than ``least`` points' worth (with ``owned``, unless they are
    the most probable for a point), renormalized; and how many went."""
    mass = resp.sum(axis=0)
    keep = mass >= least
    if owned:  # the rounding floor spreads a point's probability onto its neighbours: one point's is just under 1
        keep |= np.bincount(resp.argmax(axis=1), minlength=resp.shape[1]) > 0
    if not keep.any():  # no component holds enough: the one of most mass for all
        keep[np.argmax(mass)] = True
    resp = resp[:, keep]
    total = resp.sum(axis=1, keepdims=True)
    resp = np.where(total > 0, resp / np.where(total > 0, total, 1.0), 1.0 / resp.shape[1])
    return resp, int((~keep).sum())


def rounding_variance(x: np.ndarray, same: float = 0.0) -> np.ndarray:
    """Per coordinate (D,), the variance that rounding to a step h adds, h^2 / 12, h the coordinate's smallest gap
    between distinct values. Real data is often rounded (iris to 0.1 cm): no component of a fit is narrower
    than that along a coordinate, else EM buys likelihood without limit by shrinking one onto a stack of
    repeated values. Continuous points have no step: their smallest gap is about their range over N^2. Per
    coordinate, not one number: a coarse column (an indicator, 0 or 10) must not blur a fine one.

    The step is that of the stacks: when all but a few points (:data:`OFF_STEP`) sit on values that repeat (two
    or more of them), values held by one point each (left unrounded, or typed in full) lie off the step, not on
    a finer one, and their gaps do not count; one stray point would otherwise take the floor away. More of
    them are points of their own between a few stacks (codes for a missing value, 0 and 100), not strays.
    Values less than ``same`` apart are one value written two ways (0.1 * 3 is 0.30000000000000004, 0.3 is
    0.3), not a step. On a step, a gap that occurs once is no step either when another occurs twice or more
    (within ``same``): a stack off the step (a mean imputed for the missing values) splits one step into two
    gaps of its own."""
    out = []
    for c in np.asarray(x, dtype=np.float64).T:
        values, counts = np.unique(c, return_counts=True)
        stacked = counts >= 2  # exact repeats: strays close together are no stack
        on_step = stacked.sum() >= 2 and len(c) - counts[stacked].sum() <= OFF_STEP * len(c)
        if on_step:
            values = values[stacked]
        values = values[np.concatenate([[True], np.diff(values) >= same])]  # (every value, with ``same`` 0)
        gaps = np.sort(np.diff(values))
        twice = gaps[:-1][np.diff(gaps) <= same] if on_step else ()  # the step's gaps, not a lone stack's
        h = twice[0] if len(twice) else gaps[0] if len(gaps) else 0.0
        out.append(h**2 / 12)
    return np.array(out)


def _fit(x: np.ndarray, resp: np.ndarray, tol: float, max_iter: int = MAX_ITER, least: float | None = None,
         reg: Floor = REG, owned: bool = False) -> tuple[Mixture, np.ndarray, list[float], int]:
    """EM from responsibilities ``resp`` (the first E-step), dropping components that hold less than
    ``least`` points' worth (None: :func:`min_points`; ``owned``: see :func:`_drop_empty`); ``reg`` on each
    covariance's diagonal."""
    history: list[float] = []
    dropped = 0
    least = min_points(x.shape[1]) if least is None else least
    mix = m_step(x, resp, reg)
    for _ in range(max_iter):
        resp, ll = e_step(x, mix)
        history.append(ll)
        if len(history) > 1 and history[-1] - history[-2] < tol:
            break
        resp, gone = _drop_empty(resp, least, owned)
        dropped += gone
        mix = m_step(x, resp, reg)
    return mix, resp, history, dropped


def _merged(mix: Mixture, i: int, j: int) -> Mixture:
    """The mixture with components i and j replaced by the one Gaussian of the same weight, mean and
    covariance as the two together (moment matching)."""
    w = mix.weights[i] + mix.weights[j]
    a, b = mix.weights[i] / w, mix.weights[j] / w
    mu = a * mix.means[i] + b * mix.means[j]
    d_i, d_j = mix.means[i] - mu, mix.means[j] - mu
    cov = a * (mix.covs[i] + np.outer(d_i, d_i)) + b * (mix.covs[j] + np.outer(d_j, d_j))
    keep = [k for k in range(len(mix)) if k not in (i, j)]
    return Mixture(np.append(mix.weights[keep], w), np.vstack([mix.means[keep], mu]),
                   np.concatenate([mix.covs[keep], cov[None]]))


def _bic(ll: float, mix: Mixture, n: int) -> float:
    """The BIC of ``mix`` on ``n`` points whose mean log-likelihood per point is ``ll``."""
    return bic(ll * n, mix.n_parameters(), n)


def kmeans_start(x: np.ndarray, k: int, rs: np.random.RandomState) -> np.ndarray:
    """Hard responsibilities (N, k) of k-means (Lloyd's iterations, at most :data:`KMEANS_ITER`) from a greedy k-means++
    seeding (each centre the best of 2 + log k candidates drawn in proportion to the squared distance)."""
    n = len(x)
    sq = np.einsum("nd,nd->n", x, x)
    centres = [x[rs.randint(n)]]
    d2 = ((x - centres[0]) ** 2).sum(axis=1)
    for _ in range(1, k):
        total = d2.sum()
        if total <= 0:  # fewer distinct points than centres: the rest stay empty
            break
        trials = rs.choice(n, size=2 + int(np.log(k)), p=d2 / total)
        cand = np.minimum(d2[None, :], sq[None, :] - 2.0 * x[trials] @ x.T + sq[trials][:, None])
        best = int(np.argmin(cand.sum(axis=1)))
        centres.append(x[trials[best]])
        d2 = np.maximum(cand[best], 0.0)
    return np.eye(k)[_lloyd(x, np.array(centres), KMEANS_ITER)]


def _label_means(x: np.ndarray, label: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The mean of the points ``x`` of each label 0..k-1 (zero for a label of no point), and their counts."""
    counts = np.bincount(label, minlength=k)
    sums = np.zeros((k, x.shape[1]))
    np.add.at(sums, label, x)
    return sums / np.maximum(counts, 1)[:, None], counts


def _lloyd(x: np.ndarray, c: np.ndarray, iters: int) -> np.ndarray:
    """The labels (N,) of k-means on ``x`` from the centres ``c`` (k, D): Lloyd's iterations, at most ``iters``
    (a centre that loses every point stays where it is)."""
    sq = np.einsum("nd,nd->n", x, x)
    label = np.zeros(len(x), dtype=np.int64)
    for _ in range(iters):
        label = np.argmin(sq[:, None] - 2.0 * x @ c.T + np.einsum("kd,kd->k", c, c)[None, :], axis=1)
        means, counts = _label_means(x, label, len(c))
        moved = np.where(counts[:, None] > 0, means, c)
        if np.array_equal(moved, c):
            break
        c = moved
    return label


def _within_sum_of_squares(x: np.ndarray, label: np.ndarray, k: int) -> float:
    """k-means' objective: the squared distances of the points ``x`` to the mean of their cluster."""
    return float(((x - _label_means(x, label, k)[0][label]) ** 2).sum())


def _merge_path(x: np.ndarray, mix: Mixture, resp: np.ndarray, history: list[float], reg: Floor
                ) -> tuple[Mixture, np.ndarray, list[float], int, int]:
    """While merging a pair of components and refitting lowers the BIC, the best such merge (of the
    :data:`MERGE_CANDIDATES` pairs whose responsibilities overlap most): (mixture, resp, history, merged,
    dropped)."""
    n = len(x)
    merged = dropped = 0
    while len(mix) > 1:
        current = _bic(history[-1], mix, n)
        # the pairs most alike first: the cosine of their responsibility columns (Ueda et al. 2000's merge
        # criterion), all pairs in one (K, K) product
        norms = np.sqrt((resp * resp).sum(axis=0))
        overlap = (resp.T @ resp) / np.outer(norms, norms)
        i_up, j_up = np.triu_indices(len(mix), k=1)
        best = None
        for p in np.argsort(overlap[i_up, j_up])[::-1][:MERGE_CANDIDATES]:
            start = e_step(x, _merged(mix, int(i_up[p]), int(j_up[p])))[0]
            m2, r2, h2, g2 = _fit(x, start, SEARCH_TOL, reg=reg)
            if _bic(h2[-1], m2, n) < current and (best is None or h2[-1] > best[2][-1]):
                best = (m2, r2, h2, g2)
        if best is None:
            break
        mix, resp, history, gone = best
        dropped += gone
        merged += 1
    return mix, resp, history, merged, dropped


def cluster_points(d: int) -> int:
    """The points a component of the search for K needs in ``d`` dimensions: one more than
    :func:`too_few_points`. The search tries at most as many components as the points allow."""
    return gaussian_parameters(d) + 2


def _partition_log_likelihood(x: np.ndarray, cut: np.ndarray, counts: np.ndarray, reg: Floor) -> float:
    """The classification log-likelihood of the parts ``cut`` of ``x`` (``counts`` points each), weights included."""
    return sum(gaussian_log_likelihood(x[cut == j], reg) for j in range(len(counts))) + float(
        (counts * np.log(counts / len(x))).sum())


def _local_split(x: np.ndarray, least: int, rs: np.random.RandomState, reg: Floor) -> np.ndarray | None:
    """The labels of the best cut of the points ``x`` (one component's) into 2, 4, 8, ... k-means clusters of
    ``least`` points or more each, by BIC on the hard assignment, when it beats one Gaussian; else None.
    Doubling, not 2 alone: a row of equal blobs looks, cut in two, like one uniform stretch (no gain) and
    shows its blobs only at a finer cut."""
    n, D = x.shape
    best, labels, k = bic(gaussian_log_likelihood(x, reg), mixture_parameters(1, D), n), None, 2
    while k * least <= n:
        cut = kmeans_start(x, k, rs).argmax(axis=1)
        counts = np.bincount(cut, minlength=k)
        if counts.min() < least:
            break
        ll = _partition_log_likelihood(x, cut, counts, reg)
        if np.isfinite(ll) and (score := bic(ll, mixture_parameters(k, D), n)) < best:
            best, labels = score, cut
        k *= 2
    return None if labels is None else _merge_parts(x, labels, reg)


def _merge_parts(x: np.ndarray, labels: np.ndarray, reg: Floor) -> np.ndarray | None:
    """The parts ``labels`` of the points ``x`` with each part merged into its nearest (by their means) while
    one Gaussian explains the two better than two (a cut finer than the blobs splits some in two); None when
    one part is left."""
    parts = [x[labels == j] for j in range(int(labels.max()) + 1)]
    while len(parts) > 1:
        means = np.stack([p.mean(axis=0) for p in parts])
        gaps = ((means[:, None] - means[None]) ** 2).sum(axis=2) + np.diag(np.full(len(parts), np.inf))
        for i in np.argsort(gaps.min(axis=1), kind="stable"):
            j = int(np.argmin(gaps[i]))
            if one_gaussian_is_better(parts[i], parts[j], reg):
                i, j = min(i, j), max(i, j)
                parts[i] = np.concatenate([parts[i], parts[j]])
                del parts[j]
                labels = np.where(labels == j, i, labels - (labels > j))
                break
        else:  # no pair merged
            break
    return None if len(parts) == 1 else labels


def _split_path(xs: np.ndarray, mix: Mixture, r: np.ndarray, history: list[float], largest: int,
                rs: np.random.RandomState, step: Callable[[], None], reg: Floor
                ) -> tuple[Mixture, np.ndarray, list[float], int]:
    """The search for K beyond its range: while it lowers the BIC, every component whose points (those it is
    the most probable for) several Gaussians explain better than one (:func:`_local_split`) is split and EM
    refitted, up to ``largest`` components: (the result, the number of components before the first split
    that won; 0 when none did)."""
    n, D = xs.shape
    least = cluster_points(D)
    start_k = 0
    while len(mix) < largest:
        label = r.argmax(axis=1)
        cols: list[np.ndarray] = []
        for j in range(len(mix)):
            own = np.flatnonzero(label == j)
            cut = _local_split(xs[own], least, rs, reg) if len(own) >= 2 * least else None
            parts = 0 if cut is None else int(cut.max()) + 1
            if not parts or len(cols) + parts + len(mix) - j - 1 > largest:
                cols.append(r[:, j])
                continue
            centres = np.stack([xs[own][cut == p].mean(axis=0) for p in range(parts)])
            near = np.argmin(((xs[:, None, :] - centres[None]) ** 2).sum(axis=2), axis=1)
            cols += [r[:, j] * (near == p) for p in range(parts)]
        if len(cols) == len(mix):
            break
        m2, r2, h2, _ = _fit(xs, _drop_empty(np.column_stack(cols), min_points(D))[0], SEARCH_TOL, reg=reg)
        if _bic(h2[-1], m2, n) >= _bic(history[-1], mix, n):
            break
        start_k = start_k or len(mix)
        mix, r, history = m2, r2, h2
        step()
    return mix, r, history, start_k


def _scan_k(x: np.ndarray, largest: int, rs: np.random.RandomState, reg: Floor) -> int:
    """The K whose k-means++ partition of the points ``x`` scores the lowest BIC of hard-assigned Gaussians (the
    classification likelihood, weights included): every K from 1 to :data:`SCAN_ALL`, then upward by factors
    of :data:`SCAN_STEP` until :data:`SCAN_PATIENCE` steps in a row did not beat the best (or ``largest``),
    then every K between the best step's neighbours. Steps, not every K: a grid of blobs cut into a few
    parts looks like one uniform stretch (no gain), and shows its blobs only at a fine cut. A partition
    with a part of fewer than :func:`cluster_points` points does not count. Cheap (k-means, no EM): it
    tells the search where to fit, whatever K the model proposed."""
    n, D = x.shape
    least = cluster_points(D)

    def score(k: int) -> float:
        if k == 1:
            return bic(gaussian_log_likelihood(x, reg), mixture_parameters(1, D), n)
        cut = kmeans_start(x, k, rs).argmax(axis=1)
        counts = np.bincount(cut, minlength=k)
        if counts.min() < least:
            return np.inf
        ll = _partition_log_likelihood(x, cut, counts, reg)
        return bic(ll, mixture_parameters(k, D), n) if np.isfinite(ll) else np.inf

    steps = list(range(1, min(SCAN_ALL, largest) + 1))
    while steps[-1] < largest:
        steps.append(min(largest, max(steps[-1] + 1, int(steps[-1] * SCAN_STEP))))
    scores: dict[int, float] = {}
    best = 0  # the index in steps of the best so far
    for i, k in enumerate(steps):
        if k > SCAN_ALL and i - max(best, SCAN_ALL - 1) > SCAN_PATIENCE:
            break
        scores[k] = score(k)
        if scores[k] < scores[steps[best]]:
            best = i
    if steps[best] > SCAN_ALL:  # every K between the best step's neighbours
        for k in range(steps[best - 1] + 1, steps[min(best + 1, len(steps) - 1)]):
            scores.setdefault(k, score(k))
    return min(scores, key=lambda k: (scores[k], k))


def shapes(x: np.ndarray, mix: Mixture, resp: np.ndarray, floor: Floor = 0.0) -> Shapes:
    """How the components of ``mix``, fitted to the points ``x`` (N, D) with responsibilities ``resp`` (N, K),
    sit. Two components touch when the probability they share, sum_n min(r_ni, r_nj), is more than
    :data:`SHARED` of the smaller one's mass; the groups are the connected sets of touching components
    (separate blobs are groups of one; a ring or a curve cut into Gaussians is one chain of many). A group of
    three or more is flat when its points are flatter than Gaussians (Mardia's kurtosis, weighted by the
    responsibilities, more than :data:`FLAT_Z` standard errors below a Gaussian's D(D + 2)): pieces of a
    shape that is not a Gaussian, not overlapping Gaussians; ``chained``: all components that touch another,
    pooled, are flat by :data:`CHAINED_Z` standard errors (pieces of curves, perhaps two to a group: a curve's
    end piece may touch its neighbour too little). A touching pair is nested when one covariance's determinant
    is :data:`NESTED` times the other's and the narrow one's mean lies within one standard deviation
    (Mahalanobis) of the wide one's (a dense core in a wide halo). ``flat``: one component whose points
    are flat along its major axis in the same sense (kurtosis below 3 by more than :data:`FLAT_Z` standard
    errors: two overlapping clusters, or a uniform stretch). On at most :data:`SHAPE_POINTS` points. ``floor``: what
    the fit added to each covariance's diagonal beyond :data:`REG` (the rounding's variance), taken off for the
    kurtosis: judged against covariances wider than the points' own, every point looks near its mean, flatter
    than a Gaussian's."""
    K, D = mix.means.shape
    if len(x) > SHAPE_POINTS:  # an even sample of the points (sorted by their coordinates: the same in any order)
        take = np.linspace(0, len(x) - 1, SHAPE_POINTS).astype(np.int64)
        x, resp = x[take], resp[take]
    mass = resp.sum(axis=0)
    shared = np.stack([np.minimum(resp[:, i:i + 1], resp).sum(axis=0) for i in range(K)])  # (K, K), N x K each
    parent = list(range(K))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    nested = 0
    logdet = np.linalg.slogdet(mix.covs)[1]
    prec = np.linalg.inv(mix.covs)
    touch = np.triu(shared > SHARED * np.minimum(mass[:, None], mass[None, :]), k=1)
    for i, j in zip(*np.nonzero(touch), strict=True):
        parent[root(int(i))] = root(int(j))
        diff = mix.means[i] - mix.means[j]
        wide = int(i) if logdet[i] > logdet[j] else int(j)
        inside = diff @ prec[wide] @ diff <= 1.0  # the narrow one's mean, in the wide one
        nested += int(inside and abs(logdet[i] - logdet[j]) >= np.log(NESTED))
    groups = np.array([root(k) for k in range(K)])
    diff = x[:, None, :] - mix.means[None]  # (N, K, D)
    own = prec if np.all(np.asarray(floor) == 0) else np.linalg.inv(mix.covs - floor * np.eye(D))
    d2 = np.einsum("nkd,kde,nke->nk", diff, own, diff)  # squared Mahalanobis distances, the points' own covariances

    def flatter(members: np.ndarray, z: float = FLAT_Z) -> bool:  # their Mardia kurtosis, z standard errors low
        w = resp[:, members]
        total = float(w.sum())
        return total > 0 and bool((w * d2[:, members] ** 2).sum() / total < D * (D + 2) - z * np.sqrt(
            8 * D * (D + 2) / total))

    size = np.bincount(groups, minlength=K)
    pieces = sum(int(size[g]) for g in np.unique(groups) if size[g] >= 3 and flatter(np.flatnonzero(groups == g)))
    chained = flatter(np.flatnonzero(size[groups] >= 2), CHAINED_Z)
    flat = False
    if K == 1 and len(x) > 8:
        z = (x - mix.means[0]) @ np.linalg.eigh(mix.covs[0])[1][:, -1]
        z = z - z.mean()  # identical points give identical z: no spread, no kurtosis, not flat
        flat = bool(np.ptp(z) > 0) and float(np.mean(z**4) / np.mean(z**2) ** 2) < 3.0 - FLAT_Z * np.sqrt(24.0 / len(x))
    return Shapes(tuple(int(g) for g in groups), nested, flat, pieces, chained)


def sample_rows(x: np.ndarray, m: int) -> np.ndarray:
    """Row indices of a seeded sample of ``m`` of the points ``x`` (N, D) (all rows when N <= m), drawn from the
    points sorted by their coordinates: the same points whatever the order of the rows."""
    n = len(x)
    order = np.lexsort(np.asarray(x).T[::-1])
    if n <= m:
        return order
    return order[np.sort(np.random.RandomState(SEED).choice(n, m, replace=False))]


@dataclass(frozen=True)
class _SortedPoints:
    """Points prepared for EM, sorted by their coordinates: every choice, the scale included, is made on them."""

    x: np.ndarray  # (N, D) sorted, centred on their median and scaled to unit robust spread
    back: np.ndarray  # puts the sorted rows back in the caller's order
    given: np.ndarray  # (M,) the sorted rows of the points a model's responsibilities belong to, ascending
    resp: np.ndarray  # (M, C) those responsibilities, in that order
    unit: AffineMap
    centre: np.ndarray
    robust: float
    reg: np.ndarray  # (D,) on each covariance's diagonal: REG, or the rounding's variance where larger

    @classmethod
    def of(cls, x: np.ndarray, resp: np.ndarray, rows: np.ndarray | None) -> _SortedPoints:
        x = np.asarray(x, dtype=np.float64)
        n = len(x)
        order = np.lexsort(x.T[::-1])
        x = x[order]
        # one factor, so the result is the same in any units: first to unit spread by exact powers of two (no
        # overflow or underflow at any magnitude), then to a unit median absolute deviation from the median
        # times 1.4826 (a normal's standard deviation): a far outlier does not squeeze the other points under
        # the covariance floor; at most so far that the farthest point lies MAX_ZOOM out (a MAD far below the
        # spread, a column spread over 1e-200 beside one of 0s and 1s, overflowed every square)
        unit = standardization(x, 1.0)
        z = unit.apply(x)
        centre = np.median(z, axis=0)
        deviation = np.abs(z - centre)
        mad = float(np.median(deviation)) * 1.4826
        robust = min(1.0 / mad, MAX_ZOOM / float(deviation.max())) if mad > 1e-300 else 1.0
        back = np.empty_like(order)
        back[order] = np.arange(n)
        given = back[np.arange(n) if rows is None else np.asarray(rows)]  # resp's rows among the sorted points
        by_place = np.argsort(given, kind="stable")
        z = (z - centre) * robust
        return cls(z, back, given[by_place], np.asarray(resp, dtype=np.float64)[by_place], unit, centre, robust,
                   np.maximum(REG, rounding_variance(z, SAME_VALUE)))

    def in_units(self, mix: Mixture) -> Mixture:
        """``mix`` of the scaled points, in the units of the caller's."""
        s = 1.0 / (self.unit.scale[0] * self.robust)
        with np.errstate(over="ignore"):
            return Mixture(mix.weights, (mix.means / self.robust + self.centre) / self.unit.scale[0] + self.unit.shift,
                           mix.covs * s * s)


def refine(x: np.ndarray, resp: np.ndarray, *, merge: bool = True, search: bool = True, rows: np.ndarray | None = None,
           progress: Callable[[float], None] | None = None) -> EMResult:
    """EM on points ``x`` (N, D) from responsibilities ``resp`` (rows sum to 1; a column is a component) of the
    points ``x[rows]`` (None: all points, in order), to convergence. With ``merge``, duplicate components are
    then merged while that lowers the BIC; with ``search`` (which needs ``merge``), fresh fits at K-1 .. K+4
    and at the K of a scan of k-means partitions and its neighbours (:func:`_scan_k`; the model's K caps
    nothing) compete by BIC, and the winner's components are split while that lowers it (docs/cluster.md).
    Every fit's BIC is kept (``scores``, for the evidence for K) and the winner's shapes judged
    (:func:`shapes`). The merges
    and the search run on a seeded sample of at most :data:`SEARCH_POINTS` of the given rows; the winner is
    fitted to all points.

    The mixture comes back in the units of ``x``, its log-likelihood in the scaled ones (:class:`_SortedPoints`),
    and the result depends on the set of rows, not on their order. ``progress(fraction_done)`` is called after
    each fit of the search (the split rounds, of unknown number, each take it half way to the end)."""
    report = _Report(progress)
    pts = _SortedPoints.of(x, resp, rows)
    x, given, n, D, reg = pts.x, pts.given, len(pts.x), pts.x.shape[1], pts.reg
    resp, dropped = _drop_empty(pts.resp, min_points(D))
    rs = np.random.RandomState(SEED)
    if merge and len(given) > SEARCH_POINTS:
        pick = np.sort(rs.choice(len(given), SEARCH_POINTS, replace=False))
        given, resp = given[pick], _drop_empty(resp[pick], min_points(D))[0]
    xs = x[given]
    coarse = SEARCH_TOL if merge else TOL
    mix, r, history, gone = _fit(xs, resp, coarse, reg=reg)
    dropped += gone
    merged, searched, from_model, largest, split_from = 0, (), True, 0, 0
    if merge:
        mix, r, history, merged, gone = _merge_path(xs, mix, r, history, reg)
        dropped += gone
    scores: dict[int, float] = {}
    scanned = 0
    if merge and search:
        largest = max(1, len(xs) // cluster_points(D))
        best = _bic(history[-1], mix, len(xs))
        scores[len(mix)] = best
        k_model = len(mix)
        # where to fit: around the model's K and around the K of the best k-means partition by BIC, which a
        # scan finds whatever the model proposed (the model's K does not cap the search)
        scanned = _scan_k(xs, largest, rs, reg)
        searched = tuple(sorted(set(range(max(1, k_model - SEARCH_BELOW), min(k_model + SEARCH_ABOVE, largest) + 1))
                                | set(range(max(1, scanned - SCAN_AROUND), min(scanned + SCAN_AROUND, largest) + 1))))
        # at each K two k-means starts: cut in the points' units and with each coordinate at unit spread (k-means
        # cuts round clusters; which are round depends on the units, EM's Gaussians do not), the second with its
        # own random numbers, so that the first are the same with or without it
        zs, rz = standardization(xs, 1.0, per_coordinate=True).apply(xs), np.random.RandomState(SEED + 1)
        for done, k in enumerate(searched, 1):
            for start in (kmeans_start(xs, k, rs), kmeans_start(zs, k, rz)):
                m2, r2, h2, _ = _fit(xs, _drop_empty(start, min_points(D))[0], SEARCH_TOL, reg=reg)
                score = _bic(h2[-1], m2, len(xs))
                scores[len(m2)] = min(score, scores.get(len(m2), np.inf))
                if score < best:
                    best, mix, r, history, from_model = score, m2, r2, h2, False
            report.to(0.5 * done / len(searched))
        mix, r, history, split_from = _split_path(xs, mix, r, history, largest, rs, report.half_way, reg)
        if split_from:  # a finer cut may have split a cluster in two: merge such pairs back
            mix, r, history, more, gone = _merge_path(xs, mix, r, history, reg)
            merged, dropped = merged + more, dropped + gone
            scores[len(mix)] = min(_bic(history[-1], mix, len(xs)), scores.get(len(mix), np.inf))
    if merge or len(given) < n:  # the winner, fitted to all points to the full tolerance
        mix, r, history, gone = _fit(x, e_step(x, mix)[0], TOL, reg=reg)
        dropped += gone
    report.to(1.0)
    return EMResult(pts.in_units(mix), r[pts.back], history[-1], tuple(history), merged, dropped, searched,
                    from_model, largest, split_from, len(xs) if largest else 0,
                    tuple(sorted(scores.items(), key=lambda ks: ks[1])), scanned, shapes(x, mix, r, reg - REG))


class _Report:
    """A fit's ``progress(fraction_done)`` (None: nothing reported)."""

    def __init__(self, progress: Callable[[float], None] | None) -> None:
        self._progress, self.done = (lambda fraction: None) if progress is None else progress, 0.0

    def to(self, fraction: float) -> None:
        self.done = fraction
        self._progress(fraction)

    def half_way(self) -> None:
        """One more step of unknown number: half the way left to 0.95."""
        self.to(self.done + (0.95 - self.done) / 2)


def fit_k(x: np.ndarray, resp: np.ndarray, k: int, *, rows: np.ndarray | None = None,
          progress: Callable[[float], None] | None = None) -> EMResult:
    """EM at exactly ``k`` (>= 1) components on points ``x`` (N, D), seeded by a model's responsibilities
    ``resp`` (M, C) of the points ``x[rows]`` (None: all points, in order), as docs/cluster.md describes (no
    merges, no search for K; ``from_model``: whether the model's start beat a fresh k-means++ one). Scaled,
    sorted and returned as by :func:`refine`. ``progress(fraction_done)`` after each stage (the starts, then
    each run of EM, of unknown number, half the way left)."""
    report = _Report(progress)
    pts = _SortedPoints.of(x, resp, rows)
    n = len(pts.x)
    # k-means' first centres: the mean of the points of each of the model's k columns (those it is the most
    # probable for), or, for a column that no point picks, its responsibility-weighted mean
    given = pts.x[pts.given]
    start = _k_columns(given, pts.resp, k, pts.reg)
    means, counts = _label_means(given, start.argmax(axis=1), start.shape[1])
    centres = np.where(counts[:, None] > 0, means, (start.T @ given) / start.sum(axis=0)[:, None])
    rs = np.random.RandomState(SEED)
    search = np.arange(n) if n <= K_POINTS else np.sort(rs.choice(n, K_POINTS, replace=False))
    xs = pts.x[search]
    seeded = _lloyd(xs, centres, K_MAX_ITER)
    report.to(0.1)
    fresh = kmeans_start(xs, k, rs).argmax(axis=1)
    from_model = _within_sum_of_squares(xs, seeded, k) <= _within_sum_of_squares(xs, fresh, k)
    report.to(0.2)
    mix, r, history, dropped = _fit_exactly(xs, np.eye(k)[seeded if from_model else fresh], k, report.half_way,
                                            pts.reg)
    if len(search) < n:  # the fit, taken to all points
        mix, r, history, gone = _fit_exactly(pts.x, e_step(pts.x, mix)[0], k, report.half_way, pts.reg)
        dropped += gone
    report.to(1.0)
    return EMResult(pts.in_units(mix), r[pts.back], history[-1], tuple(history), 0, dropped, (), from_model,
                    shapes=shapes(pts.x, mix, r, pts.reg - REG))


def _fit_exactly(x: np.ndarray, resp: np.ndarray, k: int, step: Callable[[], None], reg: Floor
                 ) -> tuple[Mixture, np.ndarray, list[float], int]:
    """EM at ``k`` components from ``resp`` (made ``k`` columns by :func:`_k_columns`, a column of less than
    one point's worth left out first), ending on an M-step and its E-step as scikit-learn's does; a component
    that goes empty (under one point's worth, the most probable for no point) is split off the widest again and
    EM rerun, at most ``k`` times, and no more once a round keeps no more components than the last (it would
    repeat itself)."""
    resp, dropped = _drop_empty(resp, 1.0)
    mix, r, history, gone = _fit(x, _k_columns(x, resp, k, reg), K_TOL, K_MAX_ITER, 1.0, reg, owned=True)
    dropped += gone
    step()
    for _ in range(k):
        if len(mix) >= k:
            break
        start = _k_columns(x, r, k, reg)
        if start.shape[1] == len(mix):  # nothing left to split
            break
        held = len(mix)
        mix, r, history, gone = _fit(x, start, K_TOL, K_MAX_ITER, 1.0, reg, owned=True)
        dropped += gone
        step()
        if len(mix) <= held:  # the split components went empty again: another round would repeat this one
            break
    mix = m_step(x, r, reg)
    r, ll = e_step(x, mix)
    return mix, r, [*history, ll], dropped


def _k_columns(x: np.ndarray, resp: np.ndarray, k: int, reg: Floor = REG) -> np.ndarray:
    """Responsibilities (N, k) from ``resp`` (N, C): with C >= k, the E-step of the Gaussians of the k
    columns of most mass (their M-step); with C < k, the widest component split across its major axis
    (the points on either side of its mean) until there are k, or fewer when no component has points on
    both sides."""
    if resp.shape[1] >= k:
        top = np.sort(np.argsort(-resp.sum(axis=0), kind="stable")[:k])
        return resp if resp.shape[1] == k else e_step(x, m_step(x, resp[:, top], reg))[0]
    c, total = resp.shape[1], resp.sum()
    out = np.zeros((len(x), k))
    out[:, :c] = resp
    mix = m_step(x, resp, reg)  # each split then refits its two halves alone: k splits cost k, not k squared
    values, vectors = np.linalg.eigh(mix.covs)  # ascending: the last is the major axis
    weights, means = np.append(mix.weights, np.zeros(k - c)), np.vstack([mix.means, np.zeros((k - c, x.shape[1]))])
    major = np.append(values[:, -1], np.zeros(k - c))
    axes = np.vstack([vectors[:, :, -1], np.zeros((k - c, x.shape[1]))])
    while c < k:
        for j in np.argsort(-weights[:c] * major[:c], kind="stable"):
            side = (x - means[j]) @ axes[j] > 0
            a, b = out[:, j] * side, out[:, j] * ~side
            if a.sum() > 0 and b.sum() > 0:
                break
        else:  # no component has points on both sides
            break
        out[:, j], out[:, c] = a, b
        two = m_step(x, np.column_stack([a, b]), reg)
        values, vectors = np.linalg.eigh(two.covs)
        for col, half in ((j, 0), (c, 1)):
            weights[col] = out[:, col].sum() / total
            means[col], major[col], axes[col] = two.means[half], values[half, -1], vectors[half, :, -1]
        c += 1
    return out[:, :c]
