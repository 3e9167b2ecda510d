"""The clustering task: the default dataset is generated once, before training reads it."""

from swarmctl.config import ModelConfig, TrainConfig
from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.data.hdf5 import read_info
from swarmctl.runs import start_run
from swarmctl.tasks import clustering

TINY_PARAMS = dict(n_tasks=24, val_fraction=0.25, k_min=2, k_max=4, n_min=8, n_max=20)


def test_missing_default_dataset_is_generated_then_reused(tmp_path, monkeypatch):
    default = tmp_path / "data" / "clustering-seed0.h5"
    monkeypatch.setattr(clustering.ClusteringTask, "default_data", str(default))
    monkeypatch.setattr(clustering, "ClusteringParams", lambda: ClusteringParams(**TINY_PARAMS))
    data_cfg = clustering.ClusteringTask().data_config(None, None, None)
    assert data_cfg.path == str(default) and not default.exists()
    model_cfg = ModelConfig(name="swarm", dim_hidden=8, n_iter=2)
    start_run(model_cfg, TrainConfig(batch_size=6, max_epochs=1), data_cfg, tmp_path / "runs", "first")
    checksum = read_info(default)["checksum"]
    start_run(model_cfg, TrainConfig(batch_size=6, max_epochs=1), data_cfg, tmp_path / "runs", "second")
    assert read_info(default)["checksum"] == checksum  # the file made for the first run is the one reused


def test_an_explicit_missing_file_is_not_generated(tmp_path):
    import pytest

    from swarmctl.errors import DataError

    missing = tmp_path / "elsewhere.h5"
    data_cfg = clustering.ClusteringTask().data_config(missing, None, None)
    with pytest.raises(DataError):
        start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2), TrainConfig(max_epochs=1), data_cfg,
                  tmp_path / "runs", "x")
    assert not missing.exists() and not (tmp_path / "runs" / "x").exists()
