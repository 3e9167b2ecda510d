import numpy as np
import pytest

from swarmctl.data.clustering_generator import ClusteringParams, generate_clustering
from swarmctl.errors import ConfigError


def test_seed_zero_first_task_matches_the_protocol():
    tasks = generate_clustering(ClusteringParams(n_tasks=2), seed=0)
    assert tasks.n_clusters[0] == 7 and tasks.sizes[0] == 659  # the paper's generator (sec. 4.1.1), seed 0


def test_same_seed_gives_identical_arrays_and_another_seed_does_not():
    p = ClusteringParams(n_tasks=5, n_min=10, n_max=40)
    a, b, c = generate_clustering(p, 3), generate_clustering(p, 3), generate_clustering(p, 4)
    for key in ("points", "labels", "offsets", "n_clusters", "means", "covs"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.offsets, c.offsets) or not np.array_equal(a.points, c.points)


def test_tasks_respect_the_parameters():
    p = ClusteringParams(n_tasks=30, k_min=3, k_max=5, n_min=10, n_max=50)
    t = generate_clustering(p, 0)
    assert t.points.dtype == np.float32 and t.labels.dtype == np.int64
    assert ((3 <= t.n_clusters) & (t.n_clusters <= 5)).all()
    assert ((10 <= t.sizes) & (t.sizes <= 50)).all()
    for i in range(len(t)):
        _, lab = t.task(i)
        assert lab.max() < t.n_clusters[i]
        k = t.n_clusters[i]
        assert (np.linalg.eigvalsh(t.covs[i, :k]) > 0).all()  # covariances are positive definite
        assert (t.covs[i, k:] == 0).all() and (t.means[i, k:] == 0).all()


def test_points_are_shuffled_not_grouped_by_cluster():
    t = generate_clustering(ClusteringParams(n_tasks=2, k_min=5, k_max=5, n_min=200, n_max=200), 0)
    _, lab = t.task(0)
    assert (np.diff(lab) != 0).sum() > 50


def test_select_keeps_tasks_intact():
    t = generate_clustering(ClusteringParams(n_tasks=6, n_min=5, n_max=9), 1)
    s = t.select(np.array([4, 1]))
    np.testing.assert_array_equal(s.task(0)[0], t.task(4)[0])
    np.testing.assert_array_equal(s.task(1)[1], t.task(1)[1])


@pytest.mark.parametrize("bad", [dict(k_max=11), dict(n_min=1), dict(n_tasks=1), dict(val_fraction=1.0),
                                 dict(n_max=100_001)])  # larger sets than the readers accept
def test_bad_generator_parameters_are_config_errors(bad):
    with pytest.raises(ConfigError):
        ClusteringParams(**bad)


BROAD_DRAW = (145, 11, 75.30132835509721, 655)  # the third task of RandomState(7), drawn before the options came


def _draws(params, count=40, seed=0):
    from swarmctl.data.clustering_generator import draw_broad_task

    rs = np.random.RandomState(seed)
    return [draw_broad_task(params, rs) for _ in range(count)]


def test_the_broad_priors_defaults_draw_what_the_broad_model_was_trained_on():
    """The new options are off by default: the same tasks, to the bit, as before they were added."""
    from swarmctl.data.clustering_generator import BroadParams

    points, labels, means, covs, weights = _draws(BroadParams(n_max=800), count=3, seed=7)[2]
    assert (len(points), len(means)) == BROAD_DRAW[:2]
    assert float(np.float64(points).sum()) == pytest.approx(BROAD_DRAW[2], abs=1e-9)
    assert int(labels.sum()) == BROAD_DRAW[3]


def test_the_wide_prior_gives_every_cluster_its_least_points():
    from swarmctl.data.clustering_generator import WIDE_PRIOR

    for points, labels, means, *_ in _draws(WIDE_PRIOR, 60):
        K, N = len(means), len(points)
        least = min(WIDE_PRIOR.min_cluster_points, N // K)
        assert np.bincount(labels, minlength=K).min() >= least
        assert WIDE_PRIOR.n_min <= N <= WIDE_PRIOR.n_max and 1 <= K <= WIDE_PRIOR.k_max


def _bend(points, labels, means, covs):
    """Per cluster of 30 points or more: the correlation between its points' offset along the minor axis and
    the square of their offset along the major axis (0 for a Gaussian, far from it for an arc)."""
    out = []
    for k in range(len(means)):
        pts = points[labels == k].astype(np.float64)
        if len(pts) < 30:
            continue
        vectors = np.linalg.eigh(covs[k])[1]  # ascending: the minor axis first
        local = (pts - means[k]) @ vectors
        out.append(abs(np.corrcoef(local[:, 0], local[:, 1] ** 2)[0, 1]))
    return np.array(out)


def test_warped_clusters_bend_and_plain_ones_do_not():
    from swarmctl.data.clustering_generator import BroadParams

    params = BroadParams(k_min=2, k_max=4, n_min=600, n_max=800, spread_min=0.3, spread_max=0.3, axis_ratio_min=0.1)
    bent = np.concatenate([_bend(p, lab, m, c) for p, lab, m, c, _ in _draws(
        BroadParams(**{**params.__dict__, "warp_share": 1.0, "warp_max": 1.0}), 10)])
    plain = np.concatenate([_bend(p, lab, m, c) for p, lab, m, c, _ in _draws(params, 10)])
    assert np.median(plain) < 0.15 < np.median(bent)


def test_the_spread_sets_the_overlap_and_the_concentration_the_inequality_of_weights():
    from swarmctl.data.clustering_generator import BroadParams, relative_spreads

    def spread(r):
        return np.median([np.median(relative_spreads(m, c, w)) for _, _, m, c, w in _draws(
            BroadParams(k_min=5, k_max=5, n_min=50, n_max=50, spread_min=r, spread_max=r), 30)])

    assert spread(0.05) * 5 < spread(1.0)
    def smallest(a):
        return np.median([w.min() for *_, w in _draws(BroadParams(k_min=8, k_max=8, n_max=60, weight_concentration=a),
                                                         30)])

    assert smallest(0.5) < smallest(20.0) / 4


@pytest.mark.parametrize("bad", [{"warp_share": 1.5}, {"warp_max": -1.0}, {"size_spread": -0.1},
                                 {"min_cluster_points": -1}])
def test_the_broad_priors_new_options_are_checked(bad):
    from swarmctl.data.clustering_generator import BroadParams

    with pytest.raises(ConfigError, match=next(iter(bad))):
        BroadParams(**bad)
