"""Adding a task is a Task subclass plus one entry in TASKS, and adding a model is one registration: a toy
task (set-sum regression) and a toy model, both defined in this test alone, train, resume, evaluate,
sweep and report through the CLI without any change to the package."""

import json
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from swarmctl.cli import app
from swarmctl.config import TrainConfig
from swarmctl.errors import DataError
from swarmctl.models import registry
from swarmctl.tasks import TASKS, Task
from swarmctl.training.loop import TrainingData

runner = CliRunner()
# that a task and a model plug in is what these tests read: the curves and the report's frontier are saved undrawn
# (the figures take any task's records: tests/robustness/test_robust_results.py draws each kind for real)
pytestmark = pytest.mark.usefixtures("figures_unrendered")


def cli(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@dataclass(frozen=True)
class SumBatch:
    x: torch.Tensor  # (B, N, 1)
    mask: torch.Tensor  # (B, N) bool
    target: torch.Tensor  # (B,) the sum of each set's real values

    def to(self, device):
        return SumBatch(self.x.to(device), self.mask.to(device), self.target.to(device))

    def __len__(self):
        return len(self.x)


def sum_batch(batch_size: int, seed: int) -> SumBatch:
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(batch_size, 6, 1, generator=gen)
    mask = torch.arange(6) < torch.randint(2, 7, (batch_size, 1), generator=gen)
    return SumBatch(x, mask, (x.squeeze(-1) * mask).sum(1))


def sum_loss(model, batch):
    return (model(batch.x, batch.mask).squeeze(-1) - batch.target).square()


class SetSumTask(Task):
    name = "set-sum"
    summary = "toy task: the sum of a set of numbers"
    defaults = TrainConfig(lr=0.01, batch_size=8, max_epochs=3, minutes=1.0, steps_per_epoch=4, val_batches=2)
    default_split = "test"
    eval_data_help = "20 fixed sets"

    def prepare(self, train_cfg, data_cfg):
        if data_cfg.path is not None:
            raise DataError("set-sum draws its sets; drop --data")
        bs, seed = train_cfg.batch_size, train_cfg.seed
        steps, n_val = train_cfg.steps_per_epoch, train_cfg.val_batches
        return TrainingData(
            train=lambda epoch: [sum_batch(bs, seed * 10**6 + epoch * 100 + i) for i in range(steps)],
            val=lambda epoch: [sum_batch(bs, seed * 10**6 + epoch * 100 + 50 + i) for i in range(n_val)],
            loss_fn=sum_loss)

    @torch.no_grad()
    def score(self, model, ckpt, data, split, device, progress=None):
        batch = sum_batch(20, 12345).to(device)
        return {"data": "20 fixed sets", "split": split, "tasks": 20,
                "mse": sum_loss(model.eval(), batch).mean().item()}

    def eval_table(self, res):
        return ["", "squared error"], [["model", f"{res['mse']:.4f}"]]


class SumNet(nn.Module):
    """DeepSets: rho(sum phi(x))."""

    symmetry = "invariant"

    def __init__(self, hidden: int):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(1, hidden), nn.ReLU())
        self.rho = nn.Linear(hidden, 1)

    def forward(self, x, mask):
        return self.rho((self.phi(x) * mask.unsqueeze(-1)).sum(1))


@pytest.fixture
def set_sum(monkeypatch):
    """The toy task and model, registered for this test only."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register_model("sum-net", code=("dim_hidden",), defaults={"dim_hidden": 16}, task="set-sum")(
        lambda cfg: SumNet(cfg.dim_hidden))
    monkeypatch.setitem(TASKS, SetSumTask.name, SetSumTask())


def test_a_new_task_trains_resumes_evaluates_sweeps_and_reports_through_the_cli(set_sum, tmp_path):
    runs = tmp_path / "runs"
    r = cli("train", "sum-net", "--hidden", 8, "--max-epochs", 2, "--runs-dir", runs, "--device", "cpu")
    assert r.exit_code == 0, r.output
    run = runs / "sum-net-8-s0"
    assert json.loads((run / "config.json").read_text())["run"]["task"] == "set-sum"
    assert (run / "curves.png").is_file() and len((run / "metrics.jsonl").read_text().splitlines()) == 2

    r = cli("train", "sum-net", "--resume", "sum-net-8-s0", "--max-epochs", 3, "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3

    r = cli("eval", "sum-net-8-s0", "--runs-dir", runs, "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "squared error" in r.output
    res = json.loads((run / "eval-test.json").read_text())  # the task's default split
    assert res["task"] == "set-sum" and res["mse"] >= 0

    r = cli("train", "sum-net", "--data", tmp_path / "x.h5", "--runs-dir", runs, "--name", "bad")
    assert r.exit_code == 1 and "drop --data" in r.output and not (runs / "bad").exists()

    spec = tmp_path / "toy.toml"
    spec.write_text('seeds = [0, 1]\nminutes = 1\nmax_epochs = 1\ndevice = "cpu"\n'
                    '[[grid]]\nmodel = "sum-net"\nhidden = [4, 8]\n')
    r = cli("sweep", spec, "--runs-dir", runs, "--dry-run")
    assert r.exit_code == 0, r.output
    assert "sum-net" in r.output and "2 configurations x 2 seeds (0,1) = 4 runs" in r.output
    assert not (runs / "sweep-toy").exists()
    r = cli("sweep", spec, "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (runs / "sweep-toy").iterdir()) == [
        "sum-net-4-s0", "sum-net-4-s1", "sum-net-8-s0", "sum-net-8-s1"]
    r = cli("report", "--runs-dir", runs / "sweep-toy")
    assert r.exit_code == 0, r.output
    assert (runs / "sweep-toy" / "report.md").is_file()


def test_a_study_the_new_task_does_not_support_is_refused(set_sum, tmp_path):
    runs = tmp_path / "runs"
    assert cli("train", "sum-net", "--hidden", 4, "--max-epochs", 1, "--runs-dir", runs, "--device", "cpu"
               ).exit_code == 0
    r = cli("shuffle-variance", "sum-net-4-s0", "--runs-dir", runs, "--tasks", 2, "--shuffles", 2)
    assert r.exit_code == 1 and "needs a clustering run" in r.output and "set-sum run" in r.output
    assert not (runs / "sum-net-4-s0" / "shuffle-variance").exists()


def test_the_toy_task_is_not_left_registered():
    assert "set-sum" not in TASKS and "sum-net" not in registry.list_models()
