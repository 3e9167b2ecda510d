import json
import math
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from swarmctl.config import TrainConfig
from swarmctl.training.checkpoint import RunWriter
from swarmctl.training.loop import TrainingData, fit, should_backtrack


def test_backtracking_never_fires_in_the_first_six_epochs():
    for e in range(6):
        history = [math.inf] + [0.1] * e  # every earlier epoch better than the current one
        assert not should_backtrack(history, 1.0, e, beta=0.2)


def test_backtracking_needs_more_than_max_5_and_beta_e_recent_epochs_at_least_as_good():
    # epochs 6..25 need 6 immediately preceding epochs at least as good (ties count)
    assert should_backtrack([math.inf, 2.0] + [1.0] * 6, 1.0, 7, 0.2)
    assert not should_backtrack([math.inf, 2.0, 2.0] + [1.0] * 5, 1.0, 7, 0.2)
    # from e = 26 on more than 0.2 e: e = 30 needs 7
    assert should_backtrack([math.inf] + [2.0] * 23 + [1.0] * 7, 1.5, 30, 0.2)
    assert not should_backtrack([math.inf] + [2.0] * 24 + [1.0] * 6, 1.5, 30, 0.2)


def test_non_finite_validation_loss_backtracks_at_once():
    assert should_backtrack([math.inf], float("nan"), 0, 0.2)
    assert should_backtrack([math.inf, 1.0], float("inf"), 1, 0.2)


@dataclass
class ToyBatch:
    x: torch.Tensor
    y: torch.Tensor

    def to(self, device):
        return self

    def __len__(self):
        return len(self.x)


def toy_batches(n=3):
    g = torch.Generator().manual_seed(0)
    return [ToyBatch(torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)) for _ in range(n)]


class FakeClock:
    def __init__(self, step=1.0):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def scripted_loss(val_losses):
    it = iter(val_losses)

    def loss_fn(model, batch):
        if model.training:
            return ((model(batch.x) - batch.y) ** 2).mean(1)
        return torch.full((len(batch),), next(it))

    return loss_fn


def test_fit_backtracks_by_the_rule_restores_best_weights_and_decays_lr(tmp_path):
    vals = [1.0, 0.9] + [0.95] * 7  # epoch 7 backtracks (r = 6); two in a row: test_training_interactions.py
    cfg = TrainConfig(lr=0.1, minutes=100, max_epochs=8, beta=0.2, alpha=0.5)
    model = nn.Linear(3, 1)
    res = fit(model, TrainingData(toy_batches(), [toy_batches(1)[0]], scripted_loss(vals)), cfg,
              RunWriter(tmp_path, {}, "toy"), device=torch.device("cpu"), clock=FakeClock())
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["backtracked"] for r in records] == [False] * 7 + [True]
    assert [r["lr"] for r in records] == [0.1] * 8
    assert res.best_val == pytest.approx(0.9) and res.best_epoch == 1 and res.backtracks == 1
    # a toy model with no config: load_checkpoint would refuse it, so read the files as saved
    last, best = (torch.load(tmp_path / name, weights_only=True) for name in ("last.pt", "best.pt"))
    assert last["state"]["lr"] == pytest.approx(0.05)
    for k in best["model"]:  # the backtrack in the last epoch left the best weights in place
        torch.testing.assert_close(last["model"][k], best["model"][k])


def test_fit_budget_counts_optimisation_time_only(tmp_path):
    # each training step takes 1 fake second; evaluation also advances the clock but must not count
    cfg = TrainConfig(minutes=6 / 60, max_epochs=100)
    data = TrainingData(toy_batches(3), [toy_batches(1)[0]], scripted_loss([1.0] * 10))
    res = fit(nn.Linear(3, 1), data, cfg, RunWriter(tmp_path, {}, "toy"), device=torch.device("cpu"),
              clock=FakeClock())
    assert res.epochs == 2 and res.net_seconds == pytest.approx(6.0) and res.stop_reason == "time budget"
    assert res.eval_seconds > 0


def test_drawing_and_copying_a_batch_counts_as_optimisation_time(tmp_path):
    # batches drawn on access (as MoG tasks are) take 5 fake seconds each; on a GPU the copy of a batch
    # also waits for the queued steps, so the step's time runs from before the batch is fetched
    clock = FakeClock()

    class SlowToDraw(list):
        def __getitem__(self, i):
            clock.t += 5.0
            return super().__getitem__(i)

    cfg = TrainConfig(minutes=1.0, max_epochs=1)
    data = TrainingData(SlowToDraw(toy_batches(3)), [toy_batches(1)[0]], scripted_loss([1.0]))
    res = fit(nn.Linear(3, 1), data, cfg, RunWriter(tmp_path, {}, "toy"), device=torch.device("cpu"), clock=clock)
    assert res.net_seconds == pytest.approx(3 * (5.0 + 1.0))


def test_a_metrics_line_cut_short_by_a_full_disk_leaves_the_metrics_as_they_were(tmp_path, monkeypatch):
    """docs/guarantees.md, "Runs and training": a metrics line that cannot be written (part of it written, then
    the disk is full) leaves no partial line for the next one to join."""
    import errno
    import os

    from swarmctl.files import read_metrics
    from swarmctl.rundir import METRICS_KEYS

    writer, real = RunWriter(tmp_path, {}, "toy"), os.write
    writer.append_metrics(dict.fromkeys(METRICS_KEYS, 0))

    def half_then_full(fd, data):
        if len(data) > 2:
            return real(fd, data[:2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError, match="No space") as err:
        writer.append_metrics(dict.fromkeys(METRICS_KEYS, 1))
    monkeypatch.undo()
    writer.append_metrics(dict.fromkeys(METRICS_KEYS, 2))
    assert [r["epoch"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 2]
    assert err.value.filename == str(tmp_path / "metrics.jsonl")  # the file, not its temporary one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
