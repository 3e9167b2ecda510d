"""The clustering task: the default dataset is generated once, before training reads it."""

import pytest
import torch

from swarmctl import create_model
from swarmctl.config import ModelConfig, TrainConfig
from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.data.dataset import bucketed_batches
from swarmctl.data.hdf5 import read_dataset
from swarmctl.runs import start_run
from swarmctl.tasks import clustering
from swarmctl.tasks.hungarian import hungarian_ce, matched_accuracy, oracle_logits

TINY_PARAMS = dict(n_tasks=24, val_fraction=0.25, k_min=2, k_max=4, n_min=8, n_max=20)


def test_missing_default_dataset_is_generated_then_reused(tmp_path, monkeypatch):
    default = tmp_path / "data" / "clustering-seed0.h5"
    monkeypatch.setattr(clustering.ClusteringTask, "default_data", str(default))
    monkeypatch.setattr(clustering, "ClusteringParams", lambda: ClusteringParams(**TINY_PARAMS))
    data_cfg = clustering.ClusteringTask().data_config(None, None, None)
    assert data_cfg.path == str(default) and not default.exists()
    model_cfg = ModelConfig(name="swarm", dim_hidden=8, n_iter=2)
    start_run(model_cfg, TrainConfig(batch_size=6, max_epochs=1), data_cfg, tmp_path / "runs", "first")
    made = default.stat()
    start_run(model_cfg, TrainConfig(batch_size=6, max_epochs=1), data_cfg, tmp_path / "runs", "second")
    # the very file made for the first run, untouched: a regeneration (deterministic, so of equal checksum)
    # would write a new file and rename it into place, giving another inode and modification time
    again = default.stat()
    assert (again.st_ino, again.st_mtime_ns, again.st_size) == (made.st_ino, made.st_mtime_ns, made.st_size)
    assert sorted(p.name for p in default.parent.iterdir()) == [default.name]  # and no second file beside it


def test_an_explicit_missing_file_is_not_generated(tmp_path):
    from swarmctl.errors import DataError

    missing = tmp_path / "elsewhere.h5"
    data_cfg = clustering.ClusteringTask().data_config(missing, None, None)
    with pytest.raises(DataError):
        start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2), TrainConfig(max_epochs=1), data_cfg,
                  tmp_path / "runs", "x")
    assert not missing.exists() and not (tmp_path / "runs" / "x").exists()


@pytest.mark.slow
def test_the_true_mixtures_oracle_scores_0118_on_the_seed0_validation_split(tmp_path, cli):
    """The paper's dataset (gen-data defaults, seed 0) and the Bayes oracle of its true mixtures: 0.1180 nats
    per point and 94.9 % matched accuracy on the 1,000 validation tasks (README; paper: about 0.118). Guards
    the generator, the HDF5 round trip, the oracle's posterior and the Hungarian-matched loss together."""
    path = tmp_path / "clustering-seed0.h5"
    result = cli("gen-data", "--out", path)
    assert result.exit_code == 0, result.output
    splits, info = read_dataset(path)
    tasks = splits["val"]
    assert info["seed"] == 0 and len(tasks) == 1000 and len(splits["train"]) == 9000
    means, covs, n_clusters = (torch.from_numpy(a) for a in (tasks.means, tasks.covs, tasks.n_clusters))
    loss = accuracy = 0.0
    for batch in bucketed_batches(tasks, 100):
        idx = batch.index
        logits = oracle_logits(batch.x, means[idx], covs[idx], n_clusters[idx])
        matched = hungarian_ce(logits, batch.labels, batch.mask)
        loss += matched.per_task.double().sum().item()
        accuracy += matched_accuracy(logits, batch.labels, batch.mask, matched.assignment).sum().item()
    assert loss / len(tasks) == pytest.approx(0.1180, abs=5e-5)
    assert accuracy / len(tasks) == pytest.approx(0.949, abs=5e-4)


def test_with_cuda_graphs_the_training_batches_come_in_a_few_shapes_and_lose_nothing(tmp_path):
    """CUDA graphs capture one graph per batch shape after a few visits: padded to multiples of 100 points,
    the paper's sizes 100..1000 give at most 10 shapes (not one per batch); the tasks and their losses stay."""
    from swarmctl.config import DataConfig
    from swarmctl.data.hdf5 import generate_dataset
    from swarmctl.tasks import get_task

    path = tmp_path / "d.h5"
    generate_dataset(path, ClusteringParams(n_tasks=400, n_min=100, n_max=1000), seed=0)
    task, data = get_task("clustering"), DataConfig(path=str(path))
    plain = task.prepare(TrainConfig(batch_size=10), data)
    graphed = task.prepare(TrainConfig(batch_size=10, step="graphs"), data)
    shapes = {tuple(b.x.shape) for b in graphed.train}
    assert len({tuple(b.x.shape) for b in plain.train}) > 20 and len(shapes) <= 10
    assert all(b.x.shape[1] % 100 == 0 for b in graphed.train)
    torch.manual_seed(0)
    model = create_model(ModelConfig(name="swarm", dim_hidden=8, n_iter=2))
    for a, b in zip(plain.train, graphed.train, strict=True):
        assert torch.equal(a.index, b.index) and torch.equal(a.mask.sum(1), b.mask.sum(1))
        torch.testing.assert_close(graphed.loss_fn(model, b), plain.loss_fn(model, a), rtol=1e-5, atol=1e-6)


def test_the_default_dataset_generated_inside_a_commands_staged_outputs_is_readable_at_once(tmp_path, monkeypatch):
    """`eval` stages its own outputs to publish them together at the end; the paper's dataset it generates on
    first use is read by the same command, so it is written at once (it was staged, and `eval` then found
    no dataset file)."""
    from swarmctl.config import DataConfig
    from swarmctl.files import staged_outputs
    from swarmctl.tasks import get_task

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(clustering, "ClusteringParams", lambda: ClusteringParams(n_tasks=20))
    task = get_task("clustering")
    with staged_outputs():
        task.ensure_data(DataConfig(path=task.default_data))
        assert (tmp_path / task.default_data).is_file()


def test_cluster_counts_are_the_distinct_labels_of_each_sets_real_points():
    labels = torch.tensor([[0, 2, 2, 5, 5], [1, 1, 1, 3, 0], [4, 4, 4, 4, 4]])
    mask = torch.tensor([[True] * 5, [True, True, True, False, False], [True] * 5])
    assert clustering.cluster_counts(labels, mask, 6).tolist() == [3, 1, 1]  # padding's labels do not count
    assert clustering.cluster_counts(labels, mask, 16).tolist() == [3, 1, 1]


def test_a_count_model_is_trained_on_its_count_beside_the_matched_loss():
    torch.manual_seed(0)
    model = create_model(ModelConfig(name="swarm-count", dim_hidden=8, n_iter=2, dim_out=6))
    x = torch.randn(3, 7, 2)
    labels = torch.tensor([[0, 1, 2, 0, 1, 2, 0], [0, 0, 0, 0, 1, 1, 1], [3, 3, 3, 3, 3, 3, 3]])
    mask = torch.ones(3, 7, dtype=torch.bool)
    batch = clustering.ClusteringBatch(x, labels, mask, torch.arange(3))
    logits, count = model.forward_with_count(x, mask)
    matched = hungarian_ce(logits, labels, mask).per_task
    ce = torch.nn.functional.cross_entropy(count, torch.tensor([2, 1, 0]), reduction="none")
    torch.testing.assert_close(clustering.clustering_loss(model, batch), matched + clustering.COUNT_WEIGHT * ce)
    plain = create_model(ModelConfig(name="swarm", dim_hidden=8, n_iter=2, dim_out=6))
    torch.testing.assert_close(clustering.clustering_loss(plain, batch),
                               hungarian_ce(plain(x, mask), labels, mask).per_task)


def test_a_count_model_gives_its_distribution_over_k_with_the_clusters_of_a_users_points():
    torch.manual_seed(0)
    model = create_model(ModelConfig(name="swarm-count", dim_hidden=8, n_iter=2, dim_out=6))
    points = torch.randn(50, 2).double().numpy()
    found = clustering.ClusteringTask().cluster_points(model, points, torch.device("cpu"), keep_probabilities=True)
    assert found.counts.shape == (6,) and abs(found.counts.sum() - 1) < 1e-9
    _, count = model.forward_with_count(torch.from_numpy(found.transform.apply(points)).float()[None])
    assert abs(found.counts - count[0].detach().double().softmax(-1).numpy()).max() < 1e-6
    plain = create_model(ModelConfig(name="swarm", dim_hidden=8, n_iter=2, dim_out=6))
    assert clustering.ClusteringTask().cluster_points(plain, points, torch.device("cpu")).counts is None


def test_eval_reports_how_often_the_count_heads_most_probable_k_is_right(tmp_path):
    from types import SimpleNamespace

    from swarmctl.data.hdf5 import generate_dataset

    data = tmp_path / "d.h5"
    generate_dataset(data, ClusteringParams(**TINY_PARAMS), seed=0)
    model = create_model(ModelConfig(name="swarm-count", dim_hidden=8, n_iter=2, dim_out=6))
    ckpt = SimpleNamespace(data_config=SimpleNamespace(checksum=None, path=None))  # what score reads of a checkpoint
    res = clustering.ClusteringTask().score(model, ckpt, data, "val", torch.device("cpu"))
    assert 0.0 <= res["count_accuracy"] <= 1.0
    assert any("number of clusters" in row[0] for row in clustering.ClusteringTask().eval_table(res)[1])
