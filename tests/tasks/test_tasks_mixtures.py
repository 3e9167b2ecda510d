"""The EM that refines a model's clustering (swarmctl.tasks.mixtures), against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from swarmctl.tasks.mixtures import Mixture, component_log_density, e_step, fit_k, m_step, refine, rounding_variance


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
    assert len(res.mixture) == 2
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


def _blobs(rs: np.random.RandomState, centres, n: int = 150, spread: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    x = np.concatenate([rs.randn(n, 2) * spread + c for c in centres])
    return x, np.repeat(np.arange(len(centres)), n)


def test_the_number_of_clusters_is_searched_around_the_model_start():
    """A start that lumps three separated blobs into one component (a model that under-splits) comes back
    with three: the fresh fits around the start's K find them, by BIC; without the search it stays one."""
    rs = np.random.RandomState(5)
    x, labels = _blobs(rs, ([0, 0], [4, 0], [0, 4]))
    lumped = np.ones((len(x), 1))
    assert len(refine(x, lumped, search=False).mixture) == 1
    res = refine(x, lumped)
    assert len(res.mixture) == 3 and not res.from_model and res.searched[0] == 1
    table = np.zeros((3, 3))
    np.add.at(table, (res.resp.argmax(1), labels), 1)
    assert table.max(axis=0).sum() == len(x)  # every blob whole, in a cluster of its own


def test_the_result_does_not_depend_on_the_order_of_the_points():
    rs = np.random.RandomState(6)
    x = rs.rand(400, 2)  # no clusters at all: many local optima, so the random starts decide
    start = rs.dirichlet(np.ones(6), size=len(x))
    res = refine(x, start)
    perm = rs.permutation(len(x))
    back = refine(x[perm], start[perm])
    assert len(back.mixture) == len(res.mixture)
    np.testing.assert_allclose(back.resp, res.resp[perm][:, _matching(back.resp, res.resp[perm])], atol=1e-6)


def _matching(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The column order of ``b`` that lines it up with ``a``."""
    return np.array([int(np.argmax(b.T @ a[:, k])) for k in range(a.shape[1])])


def test_a_large_set_is_searched_on_a_sample_and_fitted_on_all_points(monkeypatch):
    from swarmctl.tasks import mixtures as em

    monkeypatch.setattr(em, "SEARCH_POINTS", 300)
    rs = np.random.RandomState(7)
    x, labels, truth = _two_blobs(3000, rs)
    res = refine(x, np.ones((len(x), 1)))
    assert len(res.mixture) == 2 and res.resp.shape == (3000, 2)
    order = np.argsort(res.mixture.weights)
    np.testing.assert_allclose(res.mixture.means[order], truth.means, atol=0.08)  # from all 3000 points
    assert (res.resp.argmax(1) == np.argsort(order)[labels]).mean() > 0.98


def test_kmeans_start_is_a_partition_even_with_fewer_distinct_points_than_clusters():
    from swarmctl.tasks.mixtures import kmeans_start

    rs = np.random.RandomState(8)
    x, labels = _blobs(rs, ([0, 0], [5, 0], [0, 5]), n=40, spread=0.1)
    resp = kmeans_start(x, 3, rs)
    assert set(np.unique(resp)) == {0.0, 1.0} and (resp.sum(1) == 1).all()
    assert len({(int(a), int(b)) for a, b in zip(resp.argmax(1), labels, strict=True)}) == 3
    twice = np.repeat(np.array([[0.0, 0.0], [1.0, 1.0]]), 5, axis=0)
    resp = kmeans_start(twice, 4, rs)
    assert (resp.sum(1) == 1).all() and len(np.unique(resp.argmax(1))) == 2
    res = refine(twice, np.full((10, 4), 0.25))
    assert np.isfinite(res.resp).all() and len(res.mixture) <= 2


def test_a_start_on_some_rows_is_fitted_to_all_points():
    """The model's probabilities for a sample of the rows start EM; the result covers every point."""
    from swarmctl.tasks.mixtures import sample_rows

    rs = np.random.RandomState(9)
    x, labels, truth = _two_blobs(2500, rs)
    rows = sample_rows(x, 400)
    assert len(np.unique(rows)) == 400
    res = refine(x, np.eye(2)[labels[rows]], rows=rows)
    assert res.resp.shape == (2500, 2)
    order = np.argsort(res.mixture.weights)
    assert (res.resp.argmax(1) == np.argsort(order)[labels]).mean() > 0.98
    perm = rs.permutation(len(x))
    assert set(perm[sample_rows(x[perm], 400)]) == set(rows)  # the same points, whatever the row order


def test_components_on_fewer_than_d_plus_one_points_are_dropped():
    """78 points of one Gaussian, started as 26 clusters of 3 points: EM could shrink components onto a few
    points and buy likelihood without limit; components under D + 1 points' worth go, and one cluster stays."""
    rs = np.random.RandomState(10)
    x = rs.randn(78, 2)
    start = np.eye(26)[np.repeat(np.arange(26), 3)][rs.permutation(78)]
    res = refine(x, start)
    assert len(res.mixture) <= 2
    assert (res.resp.sum(0) >= 3).all()


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_rounded_points_give_the_same_clusters_in_any_row_order():
    """Integer-valued points (many repeats): EM on them is sensitive to the last bit of the scale, which must
    therefore be computed from the points in one canonical order, not the file's."""
    rs = np.random.RandomState(1)
    centres = rs.randn(4, 2) * 3
    x = np.round(centres[rs.randint(4, size=600)] + rs.randn(600, 2) * 0.4)  # 4 blobs on a few integer points
    start = rs.dirichlet(np.ones(5), size=len(x))
    res = refine(x, start)
    for _ in range(3):
        perm = rs.permutation(len(x))
        back = refine(x[perm], start[perm])
        assert _same_partition(back.resp.argmax(1), res.resp.argmax(1)[perm])


def test_a_coarse_column_does_not_blur_a_fine_one():
    """The rounding floor is per coordinate: a column that takes two values 10 apart (an indicator; its floor
    is 100/12) beside a continuous one with three clusters of sd 0.3 still gives the 6 clusters. One floor for
    both, their mean, gave 2."""
    rs = np.random.RandomState(0)
    y, side = rs.randint(3, size=600), rs.randint(2, size=600)
    x = np.column_stack([10.0 * side, np.array([-3.0, 0.0, 3.0])[y] + 0.3 * rs.randn(600)])
    res = refine(x, np.eye(2)[rs.randint(2, size=600)])
    assert len(res.mixture) == 6
    assert len(set(zip(res.resp.argmax(axis=1).tolist(), (2 * y + side).tolist(), strict=True))) == 6


def test_the_rounding_variance_is_that_of_the_step_between_values():
    """h^2 / 12 for points on a grid of step h in each coordinate (brute force: a uniform error over one step);
    continuous points have no step worth the name; a constant coordinate adds nothing."""
    rs = np.random.RandomState(0)
    grid = np.round(rs.randn(500, 2) * [3.0, 0.4] / [0.5, 0.1]) * [0.5, 0.1]
    err = np.linspace(-0.5, 0.5, 100_001)
    assert rounding_variance(grid) == pytest.approx([(err * h).var() for h in (0.5, 0.1)], rel=1e-4)
    assert rounding_variance(rs.randn(500, 2)).max() < 1e-9
    assert rounding_variance(np.column_stack([np.full(9, 2.0), np.arange(9.0) * 2])).tolist() == [0.0, 4 / 12]


def _rounded_blobs(rs: np.random.RandomState) -> tuple[np.ndarray, np.ndarray]:
    """Three unit Gaussians, 200 points each, before rounding, and their labels."""
    y = np.repeat(np.arange(3), 200)
    return np.array([[0.0, 0.0], [6.0, 0.0], [3.0, 5.0]])[y] + rs.randn(600, 2), y


def test_a_few_values_off_the_rounding_step_do_not_take_the_floor_away():
    """Whole numbers with 1% of the points left unrounded (5 of 600), or decimals written two ways (0.1 * 3 is
    0.30000000000000004, np.round gives 0.3): the smallest gap is then a stray's or float64's, the floor
    vanished and EM shrank components onto stacks of repeated values again (27 to 29 clusters for 3); or 3% of
    a column given its mean (imputed), a stack 0.09 from a whole number: 9 clusters."""
    rs = np.random.RandomState(4)
    x0, y = _rounded_blobs(rs)
    x = np.round(x0)
    stray = np.where((rs.rand(600) < 0.01)[:, None], x0, x)
    two_ways = np.round(x / 10, 1)
    two_ways[::3] = 0.1 * x[::3]
    imputed = x.copy()
    imputed[rs.rand(600) < 0.03, 0] = x[:, 0].mean()  # a stack off the step, 0.09 from a whole number
    for points in (stray, two_ways, imputed):
        res = refine(points, rs.dirichlet(np.ones(5), size=600))
        assert len(res.mixture) == 3
        assert len(set(zip(res.resp.argmax(axis=1).tolist(), y.tolist(), strict=True))) < 12


def test_stacks_among_many_continuous_points_are_clusters_not_a_step():
    """60% of a column's points on two codes (0 and 100: a missing value), the others three clusters of sd 1
    between them: the codes' gap is no rounding step (taken as one, its floor, sd 29, gave 1 cluster for 5)."""
    rs = np.random.RandomState(0)
    code = rs.rand(1000) < 0.6
    y = np.where(code, 3 + rs.randint(2, size=1000), rs.randint(3, size=1000))
    x = np.column_stack([np.array([40.0, 50.0, 60.0, 0.0, 100.0])[y] + np.where(code, 0.0, rs.randn(1000)),
                         3.0 * rs.randn(1000)])
    res = refine(x, rs.dirichlet(np.ones(5), size=1000))
    assert len(res.mixture) == 5
    assert len(set(zip(res.resp.argmax(axis=1).tolist(), y.tolist(), strict=True))) == 5


def test_the_rounding_step_is_that_of_the_stacks_of_repeated_values():
    """A step holds when most points sit on values that repeat: values held by one point each (a few strays, a
    mean imputed) are off the step, not a finer one; continuous points, or continuous points with a few
    duplicated rows, keep no step worth the name; values closer than ``same`` are one value."""
    rs = np.random.RandomState(0)
    grid = np.round(rs.randn(500, 2) * 3.0 / 0.5) * 0.5
    grid[:5] += rs.rand(5, 2) * 1e-3  # 1% strays
    assert rounding_variance(grid) == pytest.approx([0.25 / 12] * 2)
    dense = np.round(rs.randn(20_000, 1) * 3.0 / 0.5) * 0.5
    dense[:1000] += rs.rand(1000, 1) * 1e-4  # 5% strays, closer to each other than ``same``: still no stack
    assert rounding_variance(dense, same=1e-6) == pytest.approx([0.25 / 12])
    dense[:1000] = 0.3  # a stack off the step, 0.2 from the nearest: its two gaps occur once each
    assert rounding_variance(dense, same=1e-6) == pytest.approx([0.25 / 12])
    continuous = rs.randn(500, 2)
    continuous[:6] = continuous[[10, 10, 10, 200, 200, 200]]  # a few repeated rows: no step
    assert rounding_variance(continuous).max() < 1e-9
    twice = np.round(rs.randn(400, 1) * 30) / 10
    twice[::2] = np.round(twice[::2] * 10) * 0.1  # the same decimals, a few 1 ulp off
    assert rounding_variance(twice, same=1e-9) == pytest.approx([0.01 / 12])


def test_a_gaussians_parameters_are_counted_once_for_bic():
    """2-D: 2 means and 3 covariances; a mixture adds K - 1 weights; BIC is -2 log L + p log n."""
    from swarmctl.tasks.mixtures import bic, gaussian_parameters, mixture_parameters, too_few_points

    assert [gaussian_parameters(d) for d in (1, 2, 3)] == [2, 5, 9]
    assert mixture_parameters(1, 2) == 5 and mixture_parameters(3, 2) == 17 and too_few_points(2) == 6
    mix = Mixture(np.full(3, 1 / 3), np.zeros((3, 2)), np.stack([np.eye(2)] * 3))
    assert mix.n_parameters() == 17
    assert bic(-100.0, 17, 50) == 200.0 + 17 * np.log(50)


def _three_blobs(rs: np.random.RandomState) -> tuple[np.ndarray, np.ndarray]:
    labels = np.repeat(np.arange(3), [120, 80, 50])
    return np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0]])[labels] + 0.5 * rs.randn(len(labels), 2), labels


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_fit_k_gives_exactly_k_components_from_any_number_of_the_models():
    """The model's answer has 1, 3 or 8 clusters; EM comes back with the K asked for, each with points."""
    from swarmctl.tasks.mixtures import fit_k

    rs = np.random.RandomState(3)
    x, labels = _three_blobs(rs)
    for columns in (1, 3, 8):
        start = rs.dirichlet(np.ones(columns), size=len(x))
        for k in (1, 2, 3, 5, 7):
            res = fit_k(x, start, k)
            assert len(res.mixture) == k and len(np.unique(res.resp.argmax(1))) == k, (columns, k)
            np.testing.assert_allclose(res.resp.sum(1), 1.0)


def test_fit_k_recovers_well_separated_blobs_whatever_the_models_start():
    from swarmctl.tasks.mixtures import fit_k

    rs = np.random.RandomState(4)
    x, labels = _three_blobs(rs)
    good = np.eye(3)[labels] * 0.9 + 0.1 / 3
    split = np.eye(6)[labels * 2 + rs.randint(0, 2, len(x))]  # every blob cut in two at random
    for start in (good, split, np.ones((len(x), 1))):
        assert _same_partition(fit_k(x, start, 3).resp.argmax(1), labels)


def test_fit_k_does_not_depend_on_the_order_of_the_rows():
    from swarmctl.tasks.mixtures import fit_k

    rs = np.random.RandomState(5)
    x, labels = _three_blobs(rs)
    x = x + 2.0 * rs.randn(len(x), 2)  # overlapping: the start and the stopping point matter
    start = rs.dirichlet(np.ones(5), size=len(x))
    perm = rs.permutation(len(x))
    a, b = fit_k(x, start, 4), fit_k(x[perm], start[perm], 4)
    np.testing.assert_array_equal(a.resp[perm], b.resp)
    np.testing.assert_array_equal(a.mixture.means, b.mixture.means)


def test_fit_k_splits_the_models_widest_cluster_when_it_found_too_few():
    """The model's answer joins two of three blobs: split across its major axis, it is as good a k-means
    start as a fresh one, and the fit says it grew from the model's answer."""
    from swarmctl.tasks.mixtures import fit_k

    x, labels = _three_blobs(np.random.RandomState(6))
    joined = np.eye(2)[np.minimum(labels, 1)]
    res = fit_k(x, joined, 3)
    assert res.from_model and _same_partition(res.resp.argmax(1), labels)


def _row_of_blobs(rs: np.random.RandomState, centres: np.ndarray, n: int, spread: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    x = np.concatenate([rs.randn(n, 2) * spread + c for c in centres])
    return x, np.repeat(np.arange(len(centres)), n)


def _every_blob_whole(resp: np.ndarray, labels: np.ndarray) -> bool:
    """Each true blob in one cluster of its own, and each cluster one blob."""
    k = int(labels.max()) + 1
    table = np.zeros((resp.shape[1], k))
    np.add.at(table, (resp.argmax(1), labels), 1)
    return resp.shape[1] == k and (table > 0).sum(axis=0).max() == 1 and (table > 0).sum(axis=1).max() == 1


def test_the_search_goes_past_the_models_slots_while_the_bic_falls():
    """20 tight blobs of 12 points, a start of 10 clusters (a model with fewer slots than blobs): the search
    for K goes on upward, past the start's K + 4 (the scan of k-means partitions finds where the BIC is
    lowest, whatever the start's K), and finds all 20; it says where it searched and its cap."""
    rs = np.random.RandomState(11)
    centres = np.array([[i * 3.0, j * 3.0] for i in range(5) for j in range(4)])
    x, labels = _row_of_blobs(rs, centres, 12, 0.1)
    start = np.eye(10)[labels // 2]  # pairs of blobs lumped together
    res = refine(x, start)
    assert _every_blob_whole(res.resp, labels), len(res.mixture)
    assert len(res.mixture) == 20 and max(res.searched) >= 20 > 10 + 4 and res.largest == len(x) // 7
    assert res.scanned == 20 and not res.from_model


@pytest.mark.parametrize("shape", ["line", "grid"])
def test_25_well_separated_blobs_give_25_clusters(shape):
    """25 blobs of 40 points, sd 0.3: on a line 8 apart (from a start of 3 clusters) and on a 5 x 5 grid 10
    apart (from 8): 25 clusters, every blob whole (they came back as 3 and 10)."""
    rs = np.random.RandomState(0)
    if shape == "line":
        centres, k0 = np.stack([np.arange(25) * 8.0, np.zeros(25)], axis=1), 3
    else:
        centres, k0 = np.array([[i * 10.0, j * 10.0] for i in range(5) for j in range(5)]), 8
    x, labels = _row_of_blobs(rs, centres, 40, 0.3)
    bands = np.searchsorted(np.quantile(x[:, 0], np.linspace(0, 1, k0 + 1)[1:-1]), x[:, 0])
    res = refine(x, np.eye(k0)[bands])
    assert _every_blob_whole(res.resp, labels), len(res.mixture)


def test_fit_k_near_the_number_of_points_does_not_repeat_itself():
    """300 clusters of 400 distinct points: some components empty out whatever is split; EM stops once a round
    keeps no more components than the last (it reran the same fit 300 times: 16 s here, 86 s at K = 600)."""
    import time

    x = np.random.RandomState(1).rand(400, 2)
    start = time.perf_counter()
    res = fit_k(x, np.random.RandomState(2).dirichlet(np.ones(16), size=len(x)), 300)
    assert time.perf_counter() - start < 5.0 and len(res.mixture) >= 250


def test_fit_k_keeps_a_cluster_of_one_point_under_the_rounding_floor():
    """As many clusters given as distinct rounded points: each gets its own. The floor (variance h^2/12) spreads a
    point's probability a little onto its neighbours one step away, so a one-point cluster holds just under one
    point's worth: it was dropped (2 distinct points, K = 2: 1 cluster; 33 distinct integer points: 17)."""
    x = np.round(np.random.RandomState(0).randn(40, 2) * 3)
    for points in (np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([[1.0, 1.0], [1.0, 1.0], [2.0, 2.0]]), x):
        k = len(np.unique(points, axis=0))
        res = fit_k(points, np.full((len(points), 2), 0.5), k)
        assert len(res.mixture) == k
        assert len(np.unique(res.resp.argmax(axis=1))) == k


@pytest.mark.parametrize("given", [None, 40])
def test_the_fits_report_their_progress_to_the_end(given):
    """`progress(fraction_done)`: never going back, ending at 1 (the CLI's bar and its time left)."""
    rs = np.random.RandomState(3)
    x, _ = _row_of_blobs(rs, np.array([[i * 3.0, 0.0] for i in range(8)]), 15, 0.1)
    seen: list[float] = []
    start = np.eye(2)[(x[:, 0] > 10).astype(int)]
    if given is None:
        refine(x, start, progress=seen.append)
    else:
        fit_k(x, start, given, progress=seen.append)
    assert len(seen) > 2 and seen[-1] == 1.0 and all(b >= a for a, b in zip(seen, seen[1:], strict=False))


def test_the_search_for_k_is_not_capped_by_the_starts_k():
    """50 neighbouring blobs (a 10 x 5 grid, 8 standard deviations apart) from a start of one cluster: the
    scan of k-means partitions by BIC puts K near 50, whatever the start's K (the search ran over the start's
    K-1..K+4 only, and the ten digits' 2 clusters proposed could never reach 10)."""
    rs = np.random.RandomState(1)
    labels = np.repeat(np.arange(50), 20)
    x = np.array([[i * 2.0, j * 2.0] for i in range(10) for j in range(5)])[labels] + 0.25 * rs.randn(1000, 2)
    res = refine(x, np.ones((len(x), 1)))
    assert 45 <= res.scanned <= 55 and len(res.mixture) == 50, (res.scanned, len(res.mixture))
    assert res.scores[0][0] == 50 and res.runner_up() is not None and res.runner_up()[1] > 0  # the winner's BIC first


def test_shapes_tell_pieces_of_a_ring_from_separate_and_nested_gaussians():
    rs = np.random.RandomState(0)
    t = rs.uniform(0, 2 * np.pi, 600)
    r = np.where(rs.rand(600) < 0.5, 1.0, 2.0) + 0.05 * rs.randn(600)
    ring = refine(np.stack([r * np.cos(t), r * np.sin(t)], axis=1), np.ones((600, 1)))
    k, shapes = len(ring.mixture), ring.shapes
    assert k > 4 and (shapes.pieces or k > 2 * shapes.n_groups()), (k, shapes)
    labels = np.repeat(np.arange(3), 150)
    blobs = refine(np.array([[0, 0], [6, 0], [0, 6]])[labels] + 0.5 * rs.randn(450, 2), np.eye(3)[labels])
    assert blobs.shapes.n_groups() == 3 and not blobs.shapes.pieces and not blobs.shapes.nested
    core = rs.rand(600) < 0.6
    halo = refine(np.where(core[:, None], 0.2, 2.0) * rs.randn(600, 2), np.ones((600, 1)))
    assert len(halo.mixture) == 1 or halo.shapes.nested == 1, halo.shapes
