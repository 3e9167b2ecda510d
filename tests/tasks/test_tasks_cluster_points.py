"""Clustering a user's points (`swarmctl cluster`): the affine map to the training scale makes the labels
independent of the user's units and origin, and clusters are numbered by size."""

import numpy as np
import pytest
import torch

from swarmctl.data.clustering_generator import ClusteringParams, generate_clustering
from swarmctl.errors import DataError
from swarmctl.runs import load_model
from swarmctl.tasks import TASKS
from swarmctl.tasks.clustering import ClusteringTask
from swarmctl.tasks.point_clusters import standardization, summarize_logits

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def points():
    tasks = generate_clustering(ClusteringParams(n_tasks=2, k_min=4, k_max=4, n_min=400, n_max=400), seed=3)
    return tasks.task(0)[0].astype(np.float64)


@pytest.fixture
def model(trained_runs):
    runs, _ = trained_runs
    return load_model(runs / "swarm" / "best.pt")[0]


@pytest.mark.parametrize(("scale", "shift", "per_coordinate"), [
    (1000.0, 5e4, False), (1e-3, -2.0, False), (np.array([3.0, 0.02]), np.array([-7.0, 1e3]), True),
    (250.0, np.array([1e4, -3.0]), True),
    (1e300, 0.0, False), (1e-300, 0.0, False), (np.array([1e300, 1e-300]), np.array([1e301, 0.0]), True)])
def test_scaling_and_shifting_the_points_leaves_the_labels_unchanged(model, points, scale, shift, per_coordinate):
    task = ClusteringTask()
    base = task.cluster_points(model, points, CPU, per_coordinate=per_coordinate)
    moved = task.cluster_points(model, points * scale + shift, CPU, per_coordinate=per_coordinate)
    assert len(base.sizes) >= 2  # a model that put every point in one cluster would show nothing
    assert np.array_equal(moved.cluster, base.cluster)
    np.testing.assert_allclose(moved.probability, base.probability, rtol=1e-4, atol=1e-5)
    x = points * scale + shift
    if np.abs(x).max() > np.finfo(np.float32).max:  # as given, beyond what the model computes in: refused
        with pytest.raises(DataError, match="beyond float32"):
            task.cluster_points(model, x, CPU, standardize=False)
        return
    raw = task.cluster_points(model, x, CPU, standardize=False)
    assert raw.transform is None and not np.array_equal(raw.cluster, base.cluster)  # the map is what does it


def test_standardization_maps_to_the_training_scale(points):
    target = ClusteringParams().point_std()
    x = points * [40, 3] + 3
    m = standardization(x, target)
    mapped = m.apply(x)
    assert np.all(m.scale == m.scale[0])  # one factor for all coordinates: the clusters keep their shapes
    np.testing.assert_allclose(mapped.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(np.sqrt(np.mean(mapped.std(axis=0) ** 2)), target, rtol=1e-12)
    each = standardization(x, target, per_coordinate=True).apply(x)
    np.testing.assert_allclose(each.std(axis=0), target, rtol=1e-12)
    const = np.column_stack([points[:, 0], np.full(len(points), 5.0)])  # a constant coordinate is only centred
    assert np.array_equal(standardization(const, target, True).apply(const)[:, 1], np.zeros(len(points)))
    assert np.array_equal(standardization(np.ones((4, 2)), target).apply(np.ones((4, 2))), np.zeros((4, 2)))


def test_point_std_matches_the_generated_sets():
    params = ClusteringParams(n_tasks=400)
    tasks = generate_clustering(params, seed=1)
    rms = np.sqrt(np.mean([tasks.task(t)[0].astype(np.float64).var(axis=0) for t in range(len(tasks))]))
    assert abs(rms - params.point_std()) < 0.05 * params.point_std()


def test_clusters_are_numbered_by_size_with_probability_and_entropy():
    logits = torch.full((7, 10), -30.0)
    for i, cls in enumerate([3, 5, 2, 5, 9, 2, 5]):
        logits[i, cls] = 0.0
    logits[0, 3], logits[0, 5] = np.log(3.0), 0.0  # point 0: class 3 with 0.75, class 5 with 0.25
    res = summarize_logits(logits)
    assert res.cluster.tolist() == [2, 0, 1, 0, 3, 1, 0]  # class 5 (3 points), 2 (2), then 3 and 9 (1 each)
    assert res.sizes.tolist() == [3, 2, 1, 1]
    assert res.probability[0] == pytest.approx(0.75, abs=1e-6) and res.probability[1] == pytest.approx(1.0, abs=1e-6)
    assert res.entropy[0] == pytest.approx(-(0.75 * np.log(0.75) + 0.25 * np.log(0.25)), abs=1e-5)
    assert res.entropy[1] == pytest.approx(0.0, abs=1e-5)
    np.testing.assert_allclose(res.mean_confidence, [1.0, 1.0, 0.75, 1.0], atol=1e-6)


def test_only_the_clustering_task_clusters_points():
    assert [t.name for t in TASKS.values() if "cluster" in t.studies] == [ClusteringTask.name]
