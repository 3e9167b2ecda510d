"""How the trainer's rules meet: the budget running out mid-epoch, backtracking in that epoch, a NaN
validation loss, two backtracks in a row, the budget carried over by a resume, and resumes that must land
on the same weights, bit for bit, as a run never interrupted (across a backtrack and an lr decay)."""

import json

import pytest
import torch
from torch import nn

from swarmctl.config import TrainConfig
from swarmctl.signals import StopSignals
from swarmctl.training.checkpoint import Checkpoint, RunWriter, TrainState
from swarmctl.training.loop import TrainingData, fit

N_BATCHES = 3


class Batch:
    def __init__(self, x, y, val=None):
        self.x, self.y, self.val = x, y, val

    def to(self, device):
        return self

    def __len__(self):
        return len(self.x)


def _train_batches():
    g = torch.Generator().manual_seed(0)
    return [Batch(torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)) for _ in range(N_BATCHES)]


def _data(vals):
    """Toy regression; epoch e's validation loss is ``vals[e]`` (scripted by epoch, so a resumed run sees
    the same values as one never interrupted)."""
    def val(epoch):
        return [Batch(torch.zeros(1, 3), torch.zeros(1, 1), vals[epoch])]

    def loss_fn(model, batch):
        if batch.val is None:
            return ((model(batch.x) - batch.y) ** 2).mean(1)
        return torch.full((len(batch),), float(batch.val))

    return TrainingData(_train_batches(), val, loss_fn)


class Clock:
    """Each call advances 1 s: a training step (timed by one call before and one after) takes 1 s."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1.0
        return self.t


class StopAt:
    """A progress hook that raises the stop flag after the given number of steps."""

    def __init__(self, signals, step):
        self.signals, self.step, self.seen = signals, step, 0

    def begin(self, start):
        pass

    def epoch_start(self, epoch, n_batches, done):
        pass

    def batch_end(self, mean_loss, net_seconds):
        self.seen += 1
        if self.seen == self.step:
            self.signals.received = "SIGTERM"

    def epoch_end(self, record):
        pass


def _fit(run_dir, vals, resume=False, stop_after=None, **cfg):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    cfg = TrainConfig(**{"lr": 0.1, "minutes": 100, "max_epochs": 8, "beta": 0.2, "alpha": 0.5, **cfg})
    run_dir.mkdir(exist_ok=True)
    with StopSignals() as signals:
        progress = StopAt(signals, stop_after) if stop_after is not None else None
        return fit(model, _data(vals), cfg, ToyWriter(run_dir, {}, "toy"), device=torch.device("cpu"),
                   resume=resume, clock=Clock(), signals=signals, progress=progress)


class ToyWriter(RunWriter):
    """The toy model is no registered model: its checkpoints are read back without the config checks."""

    def load(self, name, map_location="cpu"):
        path = self.dir / name
        if not path.is_file():
            return None
        raw = read_checkpoint(path)
        state = TrainState.from_dict(raw["state"])
        return Checkpoint(raw["task"], raw["config"], state, raw["model"], raw["optimizer"])


def read_checkpoint(path):
    return torch.load(path, weights_only=True)


def _records(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _weights(path):
    return read_checkpoint(path)["model"]


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


STALL = [1.0, 0.9] + [0.95] * 8  # epochs 7 and 8 backtrack by the rule


def test_the_budget_running_out_mid_epoch_ends_that_epoch_and_the_run(tmp_path):
    res = _fit(tmp_path, STALL, minutes=4 / 60)  # 4 s: one epoch (3 s) and one step of the next
    assert res.stop_reason == "time budget" and res.epochs == 2 and res.net_seconds == pytest.approx(4.0)
    records = _records(tmp_path)
    assert [r["batches"] for r in records] == [N_BATCHES, 1]  # the cut epoch is validated and logged
    state = read_checkpoint(tmp_path / "last.pt")["state"]
    assert state["finished"] and state["cursor"] == 0 and state["epoch"] == 2


def test_no_backtrack_in_the_epoch_the_budget_ran_out(tmp_path):
    full = _fit(tmp_path / "full", STALL, max_epochs=8)
    assert _records(tmp_path / "full")[7]["backtracked"]  # with time left, epoch 7 backtracks
    cut = _fit(tmp_path / "cut", STALL, max_epochs=8, minutes=(7 * N_BATCHES + 1) / 60)  # one step of epoch 7
    records = _records(tmp_path / "cut")
    assert cut.stop_reason == "time budget" and len(records) == 8 and records[7]["batches"] == 1
    assert not records[7]["backtracked"] and cut.backtracks == 0 and full.backtracks == 1
    last = read_checkpoint(tmp_path / "cut" / "last.pt")
    assert last["state"]["lr"] == pytest.approx(0.1)  # not decayed by alpha
    assert not _same(last["model"], _weights(tmp_path / "cut" / "best.pt"))  # the trained weights, kept


def test_a_nan_validation_loss_restores_the_best_weights(tmp_path):
    res = _fit(tmp_path, [1.0, float("nan"), 0.8], max_epochs=2)
    records = _records(tmp_path)
    assert records[1]["backtracked"] and records[1]["val_loss"] is None and res.backtracks == 1
    assert res.best_val == pytest.approx(1.0) and res.best_epoch == 0
    assert _same(_weights(tmp_path / "last.pt"), _weights(tmp_path / "best.pt"))
    assert read_checkpoint(tmp_path / "last.pt")["state"]["lr"] == pytest.approx(0.05)


def test_two_backtracks_in_a_row(tmp_path):
    res = _fit(tmp_path, STALL, max_epochs=9)
    records = _records(tmp_path)
    assert len(records) == 9 and res.epochs == 9
    assert [r["backtracked"] for r in records] == [False] * 7 + [True, True]
    assert [r["lr"] for r in records][6:] == pytest.approx([0.1, 0.1, 0.05])  # the lr each epoch trained with
    assert read_checkpoint(tmp_path / "last.pt")["state"]["lr"] == pytest.approx(0.025)
    assert res.backtracks == 2 and res.best_epoch == 1
    assert _same(_weights(tmp_path / "last.pt"), _weights(tmp_path / "best.pt"))


def test_a_resume_carries_the_budget_over(tmp_path):
    budget = 10 / 60  # 10 s: 3 epochs and one step
    cut = _fit(tmp_path, STALL, minutes=budget, stop_after=5)
    assert cut.interrupted and cut.net_seconds == pytest.approx(5.0)
    res = _fit(tmp_path, STALL, minutes=budget, resume=True)
    assert res.stop_reason == "time budget" and res.net_seconds == pytest.approx(10.0)  # 5 + 5, not 5 + 10
    assert [r["batches"] for r in _records(tmp_path)] == [N_BATCHES] * 3 + [1]


@pytest.mark.parametrize("stop_after", [2, 3, 7 * N_BATCHES + 1, 7 * N_BATCHES + 3, 8 * N_BATCHES + 2],
                         ids=["epoch0", "epoch-end", "before-backtrack", "after-step-of-backtrack", "after-backtrack"])
def test_resume_is_bit_exact_across_a_backtrack_and_an_lr_decay(tmp_path, stop_after):
    kw = dict(max_epochs=9, lr_decay_epoch=4)
    straight = _fit(tmp_path / "straight", STALL, **kw)
    assert straight.backtracks == 2  # the run crosses the decay (epoch 4) and both backtracks (7, 8)
    cut = _fit(tmp_path / "cut", STALL, stop_after=stop_after, **kw)
    assert cut.interrupted
    resumed = _fit(tmp_path / "cut", STALL, resume=True, **kw)
    assert resumed.epochs == straight.epochs and resumed.backtracks == straight.backtracks
    for name in ("last.pt", "best.pt"):
        assert _same(_weights(tmp_path / "cut" / name), _weights(tmp_path / "straight" / name)), name
    a, b = read_checkpoint(tmp_path / "cut" / "last.pt"), read_checkpoint(tmp_path / "straight" / "last.pt")
    assert a["state"]["lr"] == b["state"]["lr"] and a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for k in b["optimizer"]["state"]:
        for name, value in b["optimizer"]["state"][k].items():
            assert torch.equal(a["optimizer"]["state"][k][name], value), (k, name)
    strip = ("net_seconds", "eval_seconds")
    assert [{k: v for k, v in r.items() if k not in strip} for r in _records(tmp_path / "cut")] == \
        [{k: v for k, v in r.items() if k not in strip} for r in _records(tmp_path / "straight")]
