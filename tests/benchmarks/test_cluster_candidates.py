"""benchmarks/cluster_candidates.py's pieces that its numbers rest on: each covariance type's parameter count
in the BIC against a brute-force count of what its M-step can produce, the rounding floor, the merges by
entropy, and the pool's choices on sets whose answer is known."""

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")  # the benchmarks' dependency ('.[bench]')
BENCHMARKS = str(Path(__file__).resolve().parents[2] / "benchmarks")


def _module():
    sys.path.insert(0, BENCHMARKS)  # the script imports cluster_vs_em beside it, as `python benchmarks/...` does
    try:
        import cluster_candidates
    finally:
        sys.path.remove(BENCHMARKS)
    return cluster_candidates


cc = _module()


def _free_dimensions(kind: str, k: int, d: int) -> int:
    """The dimension of everything the M-step of ``kind`` can return (weights, means, covariances), by brute
    force: the rank of many returns' differences, from random points and responsibilities."""
    rs = np.random.RandomState(0)
    rows = []
    for _ in range(4 * cc.n_parameters(k, d, "full") + 8):
        x = rs.randn(40, d) * rs.uniform(0.5, 2.0, size=d)
        resp = rs.dirichlet(np.ones(k), size=40)
        mix = cc.m_step(x, resp, kind, 0.0)
        rows.append(np.concatenate([mix.weights, mix.means.ravel(), mix.covs.ravel()]))
    rows = np.array(rows)
    return int(np.linalg.matrix_rank(rows[1:] - rows[0], tol=1e-8))


@pytest.mark.parametrize("kind", cc.TYPES)
@pytest.mark.parametrize(("k", "d"), [(1, 2), (3, 2), (2, 3)])
def test_each_covariance_types_parameter_count_is_what_its_m_step_can_vary(kind, k, d):
    assert cc.n_parameters(k, d, kind) == _free_dimensions(kind, k, d)


def test_the_rounding_floor_is_the_variance_of_the_rounding_step():
    rs = np.random.RandomState(1)
    rounded = np.round(rs.randn(500, 2) * 3, 1)  # to 0.1
    assert cc.rounding_floor(rounded) == pytest.approx(0.1**2 / 12, rel=1e-6)
    assert cc.rounding_floor(rs.randn(500, 2)) < 1e-4  # continuous points: next to nothing


def test_merging_by_entropy_joins_the_pair_that_shares_the_points():
    resp = np.array([[0.5, 0.5, 0.0], [0.4, 0.6, 0.0], [0.0, 0.1, 0.9], [0.0, 0.0, 1.0]])
    merged = cc.merge_to(resp, 2)
    assert merged.shape == (4, 2)
    columns = sorted(map(tuple, merged.T))
    assert np.allclose(columns, sorted([tuple(resp[:, 0] + resp[:, 1]), tuple(resp[:, 2])]))


def _blobs(spreads: list[np.ndarray], n: int = 150) -> tuple[np.ndarray, np.ndarray]:
    rs = np.random.RandomState(2)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [5.0, 9.0]])
    labels = np.repeat(np.arange(3), n)
    return np.concatenate([c + rs.randn(n, 2) @ s for c, s in zip(centres, spreads, strict=True)]), labels


def test_three_separate_round_blobs_of_three_sizes_give_three_clusters_and_the_spherical_type():
    x, labels = _blobs([0.5 * np.eye(2), np.eye(2), 1.5 * np.eye(2)])
    fits = cc.pool(x, np.eye(3)[labels], None, {2, 3, 4}, floor=False)
    best = min(fits, key=lambda f: f["bic"])
    assert (best["k"], best["type"]) == (3, "spherical")
    for name, pred in cc.rules(fits, labels).items():
        assert len(np.unique(pred)) == 3, name


def test_stretched_blobs_of_one_shape_pick_the_tied_type():
    x, labels = _blobs([np.array([[1.5, 0.6], [0.0, 0.4]])] * 3)
    best = min(cc.pool(x, np.eye(3)[labels], None, {3}, floor=False), key=lambda f: f["bic"])
    assert best["type"] == "tied"
