"""The EM that refines a model's clustering (swarmctl.studies.em), against brute force."""

from __future__ import annotations

import numpy as np
from scipy.stats import multivariate_normal

from swarmctl.studies.em import Mixture, component_log_density, e_step, m_step, refine


def _two_blobs(n: int, rs: np.random.RandomState) -> tuple[np.ndarray, np.ndarray, Mixture]:
    truth = Mixture(np.array([0.3, 0.7]), np.array([[-2.0, 0.5], [1.5, -1.0]]),
                    np.array([[[0.5, 0.2], [0.2, 0.3]], [[0.2, -0.1], [-0.1, 0.8]]]))
    labels = rs.choice(2, size=n, p=truth.weights)
    x = np.stack([rs.multivariate_normal(truth.means[k], truth.covs[k]) for k in labels])
    return x, labels, truth


def test_log_density_and_steps_match_brute_force():
    rs = np.random.RandomState(0)
    x = rs.randn(50, 2)
    mix = Mixture(np.array([0.2, 0.5, 0.3]), rs.randn(3, 2), np.stack([np.eye(2) * s + 0.1 for s in (0.5, 1, 2)]))
    brute = np.stack([multivariate_normal(mix.means[k], mix.covs[k]).logpdf(x) for k in range(3)], axis=1)
    np.testing.assert_allclose(component_log_density(x, mix.means, mix.covs), brute, rtol=1e-10)
    joint = brute + np.log(mix.weights)
    resp, ll = e_step(x, mix)
    np.testing.assert_allclose(resp, np.exp(joint) / np.exp(joint).sum(1, keepdims=True), rtol=1e-10)
    assert abs(ll - np.log(np.exp(joint).sum(1)).mean()) < 1e-12
    fitted = m_step(x, resp, reg=0.0)
    for k in range(3):
        w = resp[:, k]
        mu = (w[:, None] * x).sum(0) / w.sum()
        cov = sum(w[n] * np.outer(x[n] - mu, x[n] - mu) for n in range(len(x))) / w.sum()
        np.testing.assert_allclose(fitted.means[k], mu, rtol=1e-10)
        np.testing.assert_allclose(fitted.covs[k], cov, rtol=1e-10, atol=1e-14)
        assert abs(fitted.weights[k] - w.sum() / len(x)) < 1e-12


def test_log_likelihood_never_decreases():
    rs = np.random.RandomState(1)
    x = np.concatenate([rs.randn(200, 2) * 0.3 + c for c in ([0, 0], [2, 0], [1, 2])])
    start = rs.dirichlet(np.ones(4), size=len(x))  # a poor start: 4 components, random responsibilities
    res = refine(x, start, merge=False)
    steps = np.diff(res.history)
    assert len(steps) > 5 and steps.min() > -1e-10


def test_two_clusters_recover_the_generating_parameters():
    rs = np.random.RandomState(2)
    x, labels, truth = _two_blobs(6000, rs)
    noisy = np.eye(2)[labels] * 0.6 + 0.2  # a model that is right on average, unsure everywhere
    res = refine(x, noisy)
    assert len(res.mixture) == 2 and res.merged == 0
    order = np.argsort(res.mixture.weights)
    np.testing.assert_allclose(res.mixture.weights[order], truth.weights, atol=0.02)
    np.testing.assert_allclose(res.mixture.means[order], truth.means, atol=0.05)
    np.testing.assert_allclose(res.mixture.covs[order], truth.covs, atol=0.05)
    assert (res.resp.argmax(1) == np.argsort(order)[labels]).mean() > 0.99


def test_a_blob_split_in_two_is_merged_and_separate_blobs_are_not():
    rs = np.random.RandomState(3)
    blob = rs.randn(800, 2)
    halves = np.stack([blob[:, 0] < 0, blob[:, 0] >= 0], axis=1).astype(float)  # one Gaussian cut in two
    res = refine(blob, halves)
    assert len(res.mixture) == 1 and res.merged == 1
    x, labels, _ = _two_blobs(800, rs)
    res = refine(x, np.eye(2)[labels])
    assert len(res.mixture) == 2 and res.merged == 0


def test_empty_components_are_dropped():
    rs = np.random.RandomState(4)
    x, labels, _ = _two_blobs(500, rs)
    start = np.concatenate([np.eye(2)[labels], np.zeros((500, 3))], axis=1)  # three slots with no point
    res = refine(x, start, merge=False)
    assert len(res.mixture) == 2 and res.dropped == 3 and res.resp.shape == (500, 2)
