"""Mixture-of-Gaussians clustering tasks (the paper, sec. 4.1.1, Dataset), drawn from an explicit legacy NumPy
RandomState in exactly the authors' order so that seed 0 reproduces their dataset's draws."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from swarmctl.errors import ConfigError, DataError

MAX_CLUSTERS = 10
MAX_SET_SIZE = 100_000  # entities per set that readers accept (the paper's sets hold at most 1,000)


@dataclass(frozen=True)
class ClusteringParams:
    """Generator parameters; the defaults are the paper's."""

    n_tasks: int = 10_000
    val_fraction: float = 0.1
    k_min: int = 3
    k_max: int = 10
    n_min: int = 100
    n_max: int = 1000
    wishart_df: float = 4.0
    wishart_scale: float = 0.05

    def __post_init__(self) -> None:
        if self.n_tasks < 2:
            raise ConfigError(f"`n_tasks` must be >= 2 (one train and one validation task), got {self.n_tasks}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"`val_fraction` must be in (0, 1), got {self.val_fraction}")
        if not 1 <= self.k_min <= self.k_max <= MAX_CLUSTERS:
            raise ConfigError(f"need 1 <= `k_min` <= `k_max` <= {MAX_CLUSTERS}, got {self.k_min}..{self.k_max}")
        if not 2 <= self.n_min <= self.n_max:
            raise ConfigError(f"need 2 <= `n_min` <= `n_max` (sets of at least 2 points), got "
                              f"{self.n_min}..{self.n_max}")
        if self.n_max > MAX_SET_SIZE:
            raise ConfigError(f"`n_max` must be <= {MAX_SET_SIZE:,}, got {self.n_max:,}")
        if not 1 < self.wishart_df < math.inf:
            raise ConfigError(f"`wishart_df` must be a finite number > 1, got {self.wishart_df}")
        if not 0 < self.wishart_scale < math.inf:
            raise ConfigError(f"`wishart_scale` must be a finite number > 0, got {self.wishart_scale}")

    def memory_bytes(self) -> float:
        """Estimated peak memory of generating and writing these tasks: per point float64 coordinates and
        an int64 label, about three copies (drawn, split, written); per task 10 means, covariances and
        weights, twice."""
        points = self.n_tasks * (self.n_min + self.n_max) / 2
        return 3 * 24 * points + 2 * 8 * 70 * self.n_tasks

    def point_std(self) -> float:
        """The typical standard deviation of a task's points along one axis: sqrt(E[(K - 1) / K] + E[Sigma_11]),
        the spread of K equally weighted N(0, 1) means about their average plus one cluster's own variance
        (the inverse-Wishart mean, scale / (df - 3); its mode, scale / (df + 3), where df <= 3 makes the
        mean infinite). 0.93 for the paper's parameters."""
        ks = np.arange(self.k_min, self.k_max + 1)
        spread = float(np.mean((ks - 1) / ks))
        within = self.wishart_scale / (self.wishart_df - 3) if self.wishart_df > 3 else \
            self.wishart_scale / (self.wishart_df + 3)
        return math.sqrt(spread + within)

    @property
    def n_val(self) -> int:
        return max(1, min(self.n_tasks - 1, round(self.n_tasks * self.val_fraction)))


@dataclass(frozen=True)
class ClusteringTasks:
    """Ragged tasks: task t owns points[offsets[t]:offsets[t+1]].

    points (total, 2) float32; labels (total,) int64; offsets (n+1,) int64; n_clusters (n,) int64;
    means (n, 10, 2), covs (n, 10, 2, 2) and mixture weights (n, 10) float64, zero beyond each task's K.
    """

    points: np.ndarray
    labels: np.ndarray
    offsets: np.ndarray
    n_clusters: np.ndarray
    means: np.ndarray
    covs: np.ndarray
    weights: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def task(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        sl = slice(self.offsets[t], self.offsets[t + 1])
        return self.points[sl], self.labels[sl]

    def select(self, index: np.ndarray | slice) -> ClusteringTasks:
        """The tasks at ``index`` (in that order), as a new ragged set."""
        idx = np.arange(len(self))[index]
        sizes = self.sizes[idx]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        take = np.concatenate([np.arange(self.offsets[t], self.offsets[t + 1]) for t in idx]) if len(idx) else []
        return ClusteringTasks(self.points[take], self.labels[take], offsets, self.n_clusters[idx], self.means[idx],
                               self.covs[idx], self.weights[idx])


def generate_clustering(
    params: ClusteringParams, seed: int, progress: Callable[[int], None] | None = None
) -> ClusteringTasks:
    """Draw ``params.n_tasks`` tasks from ``RandomState(seed)``.

    Per task, in this order: K ~ U{k_min..k_max}; N ~ U{n_min..n_max}; counts ~ Multinomial(N, 1/K);
    then for every cluster (empty ones included) Sigma ~ InvWishart(df, scale I), mu ~ N(0, I) and its
    points ~ N(mu, Sigma) as float32; finally one random permutation of the task's points.
    ``progress(k)`` is called after every task with the number of tasks done.
    """
    # imported here: importing scipy.stats takes over half a second, which every command would pay
    from scipy.stats import invwishart, multinomial, multivariate_normal

    rs = np.random.RandomState(seed)
    scale = params.wishart_scale * np.eye(2)
    n = params.n_tasks
    n_clusters = np.zeros(n, dtype=np.int64)
    means = np.zeros((n, MAX_CLUSTERS, 2))
    covs = np.zeros((n, MAX_CLUSTERS, 2, 2))
    all_points, all_labels, sizes = [], [], np.zeros(n, dtype=np.int64)
    for t in range(n):
        K = rs.randint(params.k_min, params.k_max + 1)
        N = rs.randint(params.n_min, params.n_max + 1)
        counts = multinomial.rvs(N, [1.0 / K] * K, random_state=rs)
        pts, lab = [], []
        for j in range(K):
            cov = invwishart.rvs(df=params.wishart_df, scale=scale, random_state=rs)
            mu = rs.randn(2)
            means[t, j], covs[t, j] = mu, cov
            if counts[j] > 0:
                try:
                    x = multivariate_normal.rvs(mu, cov, size=counts[j], random_state=rs)
                except (ValueError, np.linalg.LinAlgError):  # a covariance with inf or NaN entries
                    raise DataError(f"the inverse-Wishart parameters (df {params.wishart_df:.10g}, scale "
                                    f"{params.wishart_scale:.10g}) give covariances that are not finite, which no "
                                    f"model can train on; choose values nearer the defaults (df "
                                    f"{ClusteringParams.wishart_df:g}, scale {ClusteringParams.wishart_scale:g})"
                                    ) from None
                with np.errstate(over="ignore"):  # an overflow gives inf points, which the caller refuses
                    pts.append(np.asarray(x, dtype=np.float32).reshape(-1, 2))
                lab.append(np.full(counts[j], j, dtype=np.int64))
        perm = rs.permutation(N)
        all_points.append(np.concatenate(pts)[perm])
        all_labels.append(np.concatenate(lab)[perm])
        n_clusters[t], sizes[t] = K, N
        if progress is not None:
            progress(t + 1)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    weights = (np.arange(MAX_CLUSTERS)[None, :] < n_clusters[:, None]) / n_clusters[:, None]  # equal weights
    return ClusteringTasks(np.concatenate(all_points), np.concatenate(all_labels), offsets, n_clusters, means, covs,
                           weights)


BROAD_MAX_CLUSTERS = 16  # the cluster slots of a model trained on the broad prior


@dataclass(frozen=True)
class BroadParams:
    """A broad prior over clustering tasks, for models meant for real data (the paper's generator draws
    3..10 small, round clusters at one scale).

    Per task: K uniform in ``k_min..k_max``; N log-uniform in ``n_min..n_max``; mixture weights from a
    symmetric Dirichlet (``weight_concentration``: small values give very unequal clusters); means
    N(0, I); one relative spread r per task, log-uniform in ``spread_min..spread_max``, times the means'
    typical spacing 1 / sqrt(K): a cluster's major standard deviation is r * spacing * exp(0.3 z) (z
    standard normal), so r = 0.05 gives tight, well-separated blobs and r = 0.7 overlapping ones; its minor
    one is that times an axis ratio uniform in ``axis_ratio_min..1`` (elongated), rotated by a uniform
    angle. So r controls the overlap between clusters, the concentration the inequality of their weights.

    Beyond Gaussians (both off by default, which keeps the draws of the broad model's training):
    ``size_spread`` is the standard deviation of the log of the clusters' sizes within a task (0.3 above);
    ``warp_share`` of the clusters are bent into arcs (bananas): in a cluster's own frame the point at
    standard coordinates (z0, z1) moves along the minor axis by b * major * (z0^2 - 1) / 2, with b uniform in
    ``-warp_max..warp_max`` (b = 1 bends the ends of a cluster back by about its length); and each cluster
    holds at least ``min_cluster_points`` points where the set is large enough (``min(that, N // K)``), so
    that a cluster counted in K is one the points show."""

    n_tasks: int = 10_000
    k_min: int = 1
    k_max: int = BROAD_MAX_CLUSTERS
    n_min: int = 50
    n_max: int = 3000
    spread_min: float = 0.05
    spread_max: float = 0.7
    axis_ratio_min: float = 0.1
    weight_concentration: float = 3.0
    size_spread: float = 0.3
    warp_share: float = 0.0
    warp_max: float = 1.0
    min_cluster_points: int = 0

    def __post_init__(self) -> None:
        if self.n_tasks < 1:
            raise ConfigError(f"`n_tasks` must be >= 1, got {self.n_tasks}")
        if not 1 <= self.k_min <= self.k_max <= BROAD_MAX_CLUSTERS:
            raise ConfigError(f"need 1 <= `k_min` <= `k_max` <= {BROAD_MAX_CLUSTERS}, got {self.k_min}..{self.k_max}")
        if not 2 <= self.n_min <= self.n_max <= MAX_SET_SIZE:
            raise ConfigError(f"need 2 <= `n_min` <= `n_max` <= {MAX_SET_SIZE:,}, got {self.n_min}..{self.n_max}")
        if not 0 < self.spread_min <= self.spread_max < math.inf:
            raise ConfigError(f"need 0 < `spread_min` <= `spread_max`, got {self.spread_min}..{self.spread_max}")
        if not 0 < self.axis_ratio_min <= 1:
            raise ConfigError(f"`axis_ratio_min` must be in (0, 1], got {self.axis_ratio_min}")
        if not 0 < self.weight_concentration < math.inf:
            raise ConfigError(f"`weight_concentration` must be a finite number > 0, got {self.weight_concentration}")
        if not 0 <= self.size_spread < math.inf:
            raise ConfigError(f"`size_spread` must be a finite number >= 0, got {self.size_spread}")
        if not 0 <= self.warp_share <= 1:
            raise ConfigError(f"`warp_share` must be in [0, 1], got {self.warp_share}")
        if not 0 <= self.warp_max < math.inf:
            raise ConfigError(f"`warp_max` must be a finite number >= 0, got {self.warp_max}")
        if self.min_cluster_points < 0:
            raise ConfigError(f"`min_cluster_points` must be >= 0, got {self.min_cluster_points}")


# The prior of the model with a count head: every K the slots hold, from 30 points, clusters from
# tight to heavily overlapping, very unequal weights, flat and warped clusters, unequal sizes within a set.
WIDE_PRIOR = BroadParams(k_min=1, k_max=BROAD_MAX_CLUSTERS, n_min=30, n_max=1000, spread_min=0.03, spread_max=1.2,
                         axis_ratio_min=0.05, weight_concentration=1.0, size_spread=0.5, warp_share=0.3,
                         warp_max=1.0, min_cluster_points=5)


def draw_broad_task(params: BroadParams, rs: np.random.RandomState, n: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One task of the broad prior (``n`` points, or N drawn): points (N, 2) float32, labels (N,) int64,
    and the K means (K, 2), covariances (K, 2, 2) and weights (K,) that generated them."""
    K = rs.randint(params.k_min, params.k_max + 1)
    N = n if n is not None else int(round(math.exp(rs.uniform(math.log(params.n_min), math.log(params.n_max)))))
    weights = rs.dirichlet(np.full(K, params.weight_concentration))
    means = rs.randn(K, 2)
    r = math.exp(rs.uniform(math.log(params.spread_min), math.log(params.spread_max)))
    major = r / math.sqrt(K) * np.exp(params.size_spread * rs.randn(K))
    minor = major * rs.uniform(params.axis_ratio_min, 1.0, size=K)
    angle = rs.uniform(0.0, math.pi, size=K)
    rot = np.stack([np.stack([np.cos(angle), -np.sin(angle)], -1), np.stack([np.sin(angle), np.cos(angle)], -1)], -2)
    covs = rot @ (np.stack([major, minor], -1)[:, :, None] ** 2 * rot.transpose(0, 2, 1))
    least = min(params.min_cluster_points, N // K)
    if least:  # each cluster its least points, the rest by the weights, in a random order
        labels = rs.permutation(np.concatenate([np.repeat(np.arange(K), least), rs.choice(K, size=N - K * least,
                                                                                          p=weights)]))
    else:
        labels = rs.choice(K, size=N, p=weights)
    z = rs.randn(N, 2)
    factors = rot * np.stack([major, minor], -1)[:, None, :]  # (K, 2, 2): R diag(major, minor)
    points = means[labels] + np.einsum("nij,nj->ni", factors[labels], z)
    if params.warp_share > 0:  # bent clusters: a shift along the minor axis, quadratic along the major one
        bend = np.where(rs.uniform(size=K) < params.warp_share, rs.uniform(-params.warp_max, params.warp_max, K), 0.0)
        shift = bend[labels] * major[labels] * (z[:, 0] ** 2 - 1.0) / 2.0  # (N,)
        points += rot[labels][:, :, 1] * shift[:, None]  # the minor axis is R's second column
    return points.astype(np.float32), labels.astype(np.int64), means, covs, weights


@dataclass(frozen=True)
class TrainingRange:
    """What a model trained on a prior has seen: set sizes ``n_min..n_max``, ``k_min..k_max`` clusters,
    and clusters whose major standard deviation relative to their set's spread (the root mean square of its
    coordinates' standard deviations) lay in ``spread_lo..spread_hi`` (the prior's 2nd and 98th
    percentiles; the ratio is the same in any units)."""

    n_min: int
    n_max: int
    k_min: int
    k_max: int
    spread_lo: float
    spread_hi: float


def relative_spreads(means: np.ndarray, covs: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The major standard deviation of each of K clusters (K, 2) / (K, 2, 2) / (K,) divided by the
    mixture's spread: the root mean square of the standard deviations of its coordinates."""
    mean = weights @ means
    second = np.einsum("k,kij->ij", weights, covs + np.einsum("ki,kj->kij", means, means))
    total = second - np.outer(mean, mean)
    rms = math.sqrt(max(float(np.trace(total)) / means.shape[1], 1e-300))
    return np.sqrt(np.linalg.eigvalsh(covs)[:, -1]) / rms


def training_range(params: ClusteringParams | BroadParams, draws: int = 400, seed: int = 0) -> TrainingRange:
    """The :class:`TrainingRange` of a prior, its spreads from ``draws`` tasks' mixtures (no points drawn)."""
    from scipy.stats import invwishart

    rs = np.random.RandomState(seed)
    spreads = []
    for _ in range(draws):
        if isinstance(params, BroadParams):
            _, _, means, covs, weights = draw_broad_task(params, rs, n=1)
        else:
            K = rs.randint(params.k_min, params.k_max + 1)
            covs = invwishart.rvs(df=params.wishart_df, scale=params.wishart_scale * np.eye(2), size=K,
                                  random_state=rs).reshape(K, 2, 2)
            means, weights = rs.randn(K, 2), np.full(K, 1.0 / K)
        spreads.append(relative_spreads(means, covs, weights))
    lo, hi = np.quantile(np.concatenate(spreads), [0.02, 0.98])
    return TrainingRange(params.n_min, params.n_max, params.k_min, params.k_max, float(lo), float(hi))
