"""Resume on the real tasks: a run interrupted inside an epoch and resumed reaches the same weights, bit
for bit on the CPU, as one never interrupted, for MoG's batches drawn fresh every epoch and for image runs;
and a resume refuses a data file that changed since the run started."""

import signal

import pytest
import torch
from conftest import write_fake_mnist

from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.data.hdf5 import generate_dataset
from swarmctl.errors import DataError
from swarmctl.runs import resume_run, start_run
from swarmctl.training.checkpoint import load_checkpoint


class InterruptAt:
    """Progress hook: SIGINT to this process after the given number of training steps."""

    def __init__(self, step):
        self.step, self.seen = step, 0

    def begin(self, start):
        pass

    def epoch_start(self, epoch, n_batches, done):
        pass

    def batch_end(self, mean_loss, net_seconds):
        self.seen += 1
        if self.seen == self.step:
            signal.raise_signal(signal.SIGINT)

    def epoch_end(self, record):
        pass

    def generating(self, message, total):  # the DataProgress half: nothing to generate here
        raise AssertionError("no data should be generated")


def _straight_and_resumed(tmp_path, model_cfg, train_cfg, data_cfg, step):
    straight = start_run(model_cfg, train_cfg, data_cfg, tmp_path / "runs", "straight")
    cut = start_run(model_cfg, train_cfg, data_cfg, tmp_path / "runs", "cut", progress=InterruptAt(step))
    assert cut.interrupted
    resumed = resume_run("cut", tmp_path / "runs")
    assert not resumed.interrupted and resumed.epochs == straight.epochs
    for name in ("last.pt", "best.pt"):
        a = load_checkpoint(straight.run_dir / name).model
        b = load_checkpoint(resumed.run_dir / name).model
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


@pytest.mark.parametrize("step", [2, 4])  # inside epoch 0, and inside epoch 1 (after a checkpoint)
def test_mog_resume_is_bit_exact(tmp_path, step):
    _straight_and_resumed(tmp_path, ModelConfig(name="swarm-mog", dim_hidden=8, n_iter=2),
                          TrainConfig(batch_size=4, max_epochs=2, steps_per_epoch=3, val_batches=1, device="cpu",
                                      lr_decay_epoch=1),
                          DataConfig(path=None), step)


def test_image_resume_is_bit_exact(tmp_path):
    root = write_fake_mnist(tmp_path / "images")
    _straight_and_resumed(tmp_path, ModelConfig(name="swarm-image", dim_hidden=8, n_iter=2),
                          TrainConfig(batch_size=10, max_epochs=2, device="cpu"),
                          DataConfig(path=str(root), dataset="mnist"), 5)


def test_resume_refuses_a_changed_data_file(tmp_path):
    params = dict(n_tasks=24, val_fraction=0.25, k_min=2, k_max=4, n_min=8, n_max=20)
    data = tmp_path / "d.h5"
    generate_dataset(data, ClusteringParams(**params), seed=0)
    cut = start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2), TrainConfig(batch_size=6, max_epochs=2,
                    device="cpu"), DataConfig(path=str(data)), tmp_path / "runs", "a", progress=InterruptAt(2))
    assert cut.interrupted
    generate_dataset(data, ClusteringParams(**params), seed=1, force=True)  # same path, other content
    before = {p.name: p.read_bytes() for p in cut.run_dir.iterdir()}
    with pytest.raises(DataError, match="changed since"):
        resume_run("a", tmp_path / "runs")
    assert {p.name: p.read_bytes() for p in cut.run_dir.iterdir()} == before


def test_resume_records_the_hardware_of_the_runs_own_device(tiny_h5, tmp_path, monkeypatch):
    """A run on `device` cpu resumed without `device` trains on the CPU again, and its config records that,
    not what `auto` would pick on this machine (a card, where there is one)."""
    import json

    from swarmctl.runs import lifecycle

    model = ModelConfig(name="swarm", dim_hidden=8, n_iter=2, n_layers=1)
    start_run(model, TrainConfig(batch_size=8, max_epochs=1, device="cpu"), DataConfig(path=str(tiny_h5)), tmp_path,
              "r")
    resolve = lifecycle.resolve_device
    monkeypatch.setattr(lifecycle, "resolve_device",  # a machine whose `auto` is another device
                        lambda name, rank=0: torch.device("meta") if name == "auto" else resolve(name, rank))
    resume_run("r", tmp_path, max_epochs=2)
    hardware = json.loads((tmp_path / "r" / "config.json").read_text())["run"]["hardware"]
    assert all(h.startswith("cpu") for h in hardware), hardware
