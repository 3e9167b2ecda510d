"""EM for a Gaussian mixture with full covariances, seeded by a model's responsibilities (`swarmctl cluster
--refine`): the model's soft assignment is the first E-step, EM runs to convergence from there, and the
model's number of clusters stands, except that empty components are dropped and duplicate ones merged (two
components are duplicates when one Gaussian explains their points better by BIC).

NumPy only, float64, vectorized over points and components: no extra dependency, and fast enough on a CPU
for a million points (each iteration is a few passes over an (N, K) array).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from swarmctl.tasks.point_clusters import standardization

MAX_ITER = 300
TOL = 1e-4  # stop when the mean log-likelihood per point gains less than this
MIN_POINTS = 1.0  # a component whose responsibilities sum to less than this many points is empty
REG = 1e-6  # added to each covariance's diagonal, times the data's variance: keeps every Cholesky factor finite


@dataclass(frozen=True)
class Mixture:
    """K Gaussians: ``weights`` (K,), ``means`` (K, D), ``covs`` (K, D, D)."""

    weights: np.ndarray
    means: np.ndarray
    covs: np.ndarray

    def __len__(self) -> int:
        return len(self.weights)

    def n_parameters(self) -> int:
        K, D = self.means.shape
        return (K - 1) + K * D + K * D * (D + 1) // 2


@dataclass(frozen=True)
class EMResult:
    """The fitted ``mixture``; per point (N, K) ``resp`` (posterior probabilities); the mean
    ``log_likelihood`` per point after each iteration of the last fit (``history``: never decreasing, but for
    rounding and a component dropped as empty);
    ``merged``: the number of duplicate pairs merged and ``dropped``: empty components removed."""

    mixture: Mixture
    resp: np.ndarray
    log_likelihood: float
    history: tuple[float, ...]
    merged: int
    dropped: int

    def bic(self, n: int) -> float:
        return -2.0 * self.log_likelihood * n + self.mixture.n_parameters() * np.log(n)


def component_log_density(x: np.ndarray, means: np.ndarray, covs: np.ndarray) -> np.ndarray:
    """log N(x_n | mu_k, Sigma_k), (N, K)."""
    D = x.shape[1]
    chol = np.linalg.cholesky(covs)  # (K, D, D)
    diff = x[None, :, :] - means[:, None, :]  # (K, N, D)
    z = np.linalg.solve(chol, diff.transpose(0, 2, 1))  # (K, D, N): L^-1 (x - mu)
    maha = np.einsum("kdn,kdn->kn", z, z)
    logdet = 2.0 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)
    return (-0.5 * (maha + logdet[:, None] + D * np.log(2 * np.pi))).T


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


def m_step(x: np.ndarray, resp: np.ndarray, reg: float) -> Mixture:
    """Maximum-likelihood weights, means and covariances for responsibilities ``resp`` (N, K)."""
    nk = resp.sum(axis=0)  # (K,)
    means = (resp.T @ x) / nk[:, None]
    diff = x[None, :, :] - means[:, None, :]  # (K, N, D)
    covs = np.einsum("nk,kni,knj->kij", resp, diff, diff) / nk[:, None, None]
    covs += reg * np.eye(x.shape[1])[None]
    return Mixture(nk / nk.sum(), means, covs)


def _drop_empty(resp: np.ndarray, min_points: float) -> tuple[np.ndarray, int]:
    keep = resp.sum(axis=0) >= min_points
    if not keep.any():  # nothing holds a point's worth: one component for all
        keep = resp.sum(axis=0) == resp.sum(axis=0).max()
        keep[np.argmax(keep) + 1:] = False
    resp = resp[:, keep]
    total = resp.sum(axis=1, keepdims=True)
    resp = np.where(total > 0, resp / np.where(total > 0, total, 1.0), 1.0 / resp.shape[1])
    return resp, int((~keep).sum())


def _fit(x: np.ndarray, resp: np.ndarray, reg: float, max_iter: int, tol: float
         ) -> tuple[Mixture, np.ndarray, list[float], int]:
    """EM from responsibilities ``resp`` (the first E-step), dropping components that go empty."""
    history: list[float] = []
    dropped = 0
    mix = m_step(x, resp, reg)
    for _ in range(max_iter):
        resp, ll = e_step(x, mix)
        history.append(ll)
        if len(history) > 1 and history[-1] - history[-2] < tol:
            break
        resp, gone = _drop_empty(resp, MIN_POINTS)
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
    return -2.0 * ll * n + mix.n_parameters() * np.log(n)


def refine(x: np.ndarray, resp: np.ndarray, *, max_iter: int = MAX_ITER, tol: float = TOL, merge: bool = True,
           candidates: int = 2) -> EMResult:
    """EM on points ``x`` (N, D) from responsibilities ``resp`` (N, C) (rows sum to 1; a column is a
    component), to convergence; then, with ``merge``, while merging a pair of components and refitting
    lowers the BIC, the best such merge (the ``candidates`` pairs whose responsibilities overlap most are
    tried). Components holding less than one point's worth are
    dropped along the way.

    EM runs on the points centred and scaled to unit spread (one factor: the result is the same in any
    units, and values near 1e300 or 1e-300 neither overflow nor underflow); the mixture is returned in
    the units of ``x`` and its log-likelihood in the scaled ones."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    unit = standardization(x, 1.0)
    x = unit.apply(x)
    reg = REG
    resp, dropped = _drop_empty(np.asarray(resp, dtype=np.float64), MIN_POINTS)
    mix, resp, history, gone = _fit(x, resp, reg, max_iter, tol)
    dropped += gone
    merged = 0
    while merge and len(mix) > 1:
        current = _bic(history[-1], mix, n)
        # the pairs most alike first: the cosine of their responsibility columns (Ueda et al. 2000's merge
        # criterion), all pairs in one (K, K) product
        norms = np.sqrt((resp * resp).sum(axis=0))
        overlap = (resp.T @ resp) / np.outer(norms, norms)
        i_up, j_up = np.triu_indices(len(mix), k=1)
        pairs = list(zip(i_up.tolist(), j_up.tolist(), strict=True))
        lls = overlap[i_up, j_up]
        best = None
        for p in np.argsort(lls)[::-1][:candidates]:
            i, j = pairs[p]
            start = e_step(x, _merged(mix, i, j))[0]
            m2, r2, h2, g2 = _fit(x, start, reg, max_iter, tol)
            if _bic(h2[-1], m2, n) < current and (best is None or h2[-1] > best[2][-1]):
                best = (m2, r2, h2, g2)
        if best is None:
            break
        mix, resp, h2, g2 = best
        history = h2
        dropped += g2
        merged += 1
    s = 1.0 / unit.scale[0]
    with np.errstate(over="ignore"):
        mix = Mixture(mix.weights, mix.means * s + unit.shift, mix.covs * s * s)
    return EMResult(mix, resp, history[-1], tuple(history), merged, dropped)
