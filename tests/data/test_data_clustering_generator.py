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
