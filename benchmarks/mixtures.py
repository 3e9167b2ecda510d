"""Clustering tasks of any size from the paper's generator distribution, for the benchmarks.

`swarmctl gen-data` draws N in 100..1,000 (and refuses sets above 100,000 points); these draws follow the
same recipe per task (K ~ U{3..10}, multinomial counts of equal weight, Sigma ~ InvWishart(4, 0.05 I),
mu ~ N(0, I)) at a size N the caller picks, from their own RandomState.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import invwishart

from swarmctl.data.clustering_generator import ClusteringParams


def draw_task(n: int, rs: np.random.RandomState, params: ClusteringParams = ClusteringParams()):
    """One task of ``n`` points: (points (n, 2) float32, labels (n,), means (K, 2), covs (K, 2, 2))."""
    K = rs.randint(params.k_min, params.k_max + 1)
    counts = rs.multinomial(n, [1.0 / K] * K)
    covs = np.stack([invwishart.rvs(df=params.wishart_df, scale=params.wishart_scale * np.eye(2), random_state=rs)
                     for _ in range(K)])
    means = rs.randn(K, 2)
    points = np.concatenate([rs.multivariate_normal(means[j], covs[j], size=counts[j]) for j in range(K)])
    labels = np.repeat(np.arange(K), counts)
    perm = rs.permutation(n)
    return points[perm].astype(np.float32), labels[perm], means, covs
