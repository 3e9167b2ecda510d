import json
import math
import os
import signal
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.training.checkpoint import load_checkpoint, read_checkpoint
from swarmctl.training.loop import fit, should_backtrack
from swarmctl.training.runs import resume_run, start_run


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
    vals = [1.0, 0.9] + [0.95] * 7  # epochs 7 and 8 must backtrack (r = 6, then 7)
    cfg = TrainConfig(lr=0.1, minutes=100, max_epochs=8, beta=0.2, alpha=0.5)
    model = nn.Linear(3, 1)
    res = fit(model, toy_batches(), [toy_batches(1)[0]], scripted_loss(vals), cfg, tmp_path, config={}, task="toy",
              device=torch.device("cpu"), clock=FakeClock())
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["backtracked"] for r in records] == [False] * 7 + [True]
    assert [r["lr"] for r in records] == [0.1] * 8
    assert res.best_val == pytest.approx(0.9) and res.best_epoch == 1 and res.backtracks == 1
    last, best = read_checkpoint(tmp_path / "last.pt"), read_checkpoint(tmp_path / "best.pt")  # a toy model: no config
    assert last["state"]["lr"] == pytest.approx(0.05)
    for k in best["model"]:  # the backtrack in the last epoch left the best weights in place
        torch.testing.assert_close(last["model"][k], best["model"][k])


def test_fit_budget_counts_optimisation_time_only(tmp_path):
    # each training step takes 1 fake second; evaluation also advances the clock but must not count
    cfg = TrainConfig(minutes=6 / 60, max_epochs=100)
    res = fit(nn.Linear(3, 1), toy_batches(3), [toy_batches(1)[0]], scripted_loss([1.0] * 10), cfg, tmp_path,
              config={}, task="toy", device=torch.device("cpu"), clock=FakeClock())
    assert res.epochs == 2 and res.net_seconds == pytest.approx(6.0) and res.stop_reason == "time budget"
    assert res.eval_seconds > 0


def _tiny_run(tiny_h5, runs, name, max_epochs):
    return start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=3),
                            TrainConfig(batch_size=4, minutes=10, max_epochs=max_epochs),
                            DataConfig(path=str(tiny_h5)), runs, name)


def _weights(run_dir):
    return load_checkpoint(run_dir / "last.pt")["model"]


def test_resume_continues_exactly_where_an_uninterrupted_run_would_be(tiny_h5, tmp_path):
    straight = _tiny_run(tiny_h5, tmp_path, "straight", 4)
    _tiny_run(tiny_h5, tmp_path, "split", 2)
    resumed = resume_run("split", tmp_path, max_epochs=4)
    assert resumed.epochs == straight.epochs == 4
    a, b = _weights(straight.run_dir), _weights(resumed.run_dir)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    lines = (resumed.run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [0, 1, 2, 3]


def test_interrupt_saves_position_inside_the_epoch_and_resume_matches(tiny_h5, tmp_path, monkeypatch):
    import swarmctl.training.clustering as clustering

    straight = _tiny_run(tiny_h5, tmp_path, "straight", 2)
    calls = {"n": 0}
    real = clustering.clustering_loss

    def interrupting(model, batch):
        calls["n"] += model.training
        if calls["n"] == 6 and model.training:
            os.kill(os.getpid(), signal.SIGINT)  # arrives during the 6th step; the loop stops after it
        return real(model, batch)

    monkeypatch.setattr(clustering, "clustering_loss", interrupting)
    res = _tiny_run(tiny_h5, tmp_path, "cut", 2)
    monkeypatch.setattr(clustering, "clustering_loss", real)
    assert res.interrupted and "SIGINT" in res.stop_reason
    state = load_checkpoint(res.run_dir / "last.pt")["state"]
    assert (state["epoch"], state["cursor"]) == (1, 1)  # 5 batches per epoch: epoch 0 done, 1 step into epoch 1
    resumed = resume_run("cut", tmp_path)
    assert resumed.epochs == 2
    a, b = _weights(straight.run_dir), _weights(resumed.run_dir)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
