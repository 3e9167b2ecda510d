"""The accelerator path of the trainer (batches copied to the device once, the loss read on the host
every few steps) run on the CPU: it must train exactly as the step-by-step path does."""

import json

import pytest
import torch

from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.data.dataset import ClusteringBatch
from swarmctl.runs import start_run
from swarmctl.signals import StopSignals
from swarmctl.training import loop
from swarmctl.training.checkpoint import load_checkpoint


def _train(tiny_h5, runs, name):
    return start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=3), TrainConfig(batch_size=4, max_epochs=3,
                     device="cpu"), DataConfig(path=str(tiny_h5)), runs, name)


def test_reading_the_loss_every_few_steps_trains_identically(tmp_path, tiny_h5, monkeypatch):
    step_by_step = _train(tiny_h5, tmp_path, "every-step")
    monkeypatch.setattr(loop, "host_sync_interval", lambda device: 3)  # 5 batches per epoch: reads at 3 and 5
    lazy = _train(tiny_h5, tmp_path, "every-3")
    assert (lazy.epochs, lazy.best_epoch, lazy.best_val) == (step_by_step.epochs, step_by_step.best_epoch,
                                                             step_by_step.best_val)
    a = load_checkpoint(tmp_path / "every-step" / "last.pt").model
    b = load_checkpoint(tmp_path / "every-3" / "last.pt").model
    for k in a:
        assert torch.equal(a[k], b[k]), k
    ra, rb = ([json.loads(line) for line in (tmp_path / n / "metrics.jsonl").read_text().splitlines()]
              for n in ("every-step", "every-3"))
    for x, y in zip(ra, rb, strict=True):
        assert y["train_loss"] == pytest.approx(x["train_loss"], rel=1e-12)
        assert y["batches"] == x["batches"] and y["val_loss"] == x["val_loss"]


def test_fixed_batches_are_copied_to_the_device_once():
    batch = ClusteringBatch(torch.zeros(2, 3, 2), torch.zeros(2, 3, dtype=torch.long),
                            torch.ones(2, 3, dtype=torch.bool), torch.arange(2))
    moved = loop.on_device([batch, batch], torch.device("meta"))
    assert isinstance(moved, list) and all(t.device.type == "meta" for b in moved for t in (b.x, b.labels, b.mask))
    assert loop.on_device([batch], torch.device("cpu"))[0] is batch  # nothing to copy on the CPU
    drawn = lambda epoch: [batch]  # noqa: E731 -- batches drawn per epoch are moved as they are used
    assert loop.on_device(drawn, torch.device("meta"))(0) == [batch]
    assert loop.on_device(drawn, torch.device("cpu")) is drawn


def test_batches_drawn_per_epoch_are_drawn_on_the_device_when_they_can():
    """A sequence with ``on(device)`` (fresh MoG tasks) is asked for its device version each epoch."""
    from swarmctl.data.mog import FreshBatches, MogParams

    placed = loop.on_device(lambda epoch: FreshBatches(2, 3, 0, 0, epoch, MogParams()), torch.device("meta"))
    assert placed(4).device == torch.device("meta") and placed(4).key == (0, 0, 4)


def test_the_host_reads_the_loss_every_step_on_the_cpu_and_every_few_on_a_gpu():
    assert loop.host_sync_interval(torch.device("cpu")) == 1
    assert loop.host_sync_interval(torch.device("meta")) > 1


def test_under_torchrun_the_ranks_agree_on_stopping_every_few_steps_not_every_step(monkeypatch):
    """The collective that agrees on a signal or the budget makes the host wait for the device: once per
    DIST_CHECK_STEPS steps under torchrun (at the same cursors on every rank), never per step."""
    from swarmctl.training.device import DistContext

    calls = []
    monkeypatch.setattr(loop, "any_rank", lambda flags, ctx, device: (calls.append(ctx.enabled), flags)[1])
    steps = []
    state = loop.TrainState(lr=0.01)
    n = 3 * loop.DIST_CHECK_STEPS + 5
    batches = [torch.zeros(1) for _ in range(n)]
    loop._train_epoch(torch.nn.Linear(1, 1), lambda batch: (steps.append(batch), torch.zeros(()))[1], batches,
                      list(range(n)), state, 1e9, StopSignals(), DistContext(rank=0, world_size=2),
                      torch.device("cpu"), lambda: 0.0, None)
    assert len(steps) == n and calls == [True] * 4  # cursors 0, 32, 64, 96
