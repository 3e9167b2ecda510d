"""Reported numbers are scored in full precision: `swarmctl eval` (runs.evaluate_run) scores with TF32 and
autocast off whatever the process or the run's step mode set, restores the settings it found, and records a
TF32 score beside the full-precision one only where TF32 trains and the two differ by more than 1e-4."""

from __future__ import annotations

import contextlib

import pytest
import torch
from conftest import TINY_PARAMS

from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.data.hdf5 import generate_dataset
from swarmctl.runs import evaluate_run, open_run, start_run
from swarmctl.runs import read as read_mod
from swarmctl.training.device import use_tf32


def _flags() -> tuple[bool, bool, bool, bool]:
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda"))


@pytest.fixture(scope="module")
def amp_run(tmp_path_factory):
    """A tiny clustering run trained with bf16 autocast (`--step amp`) on the CPU."""
    root = tmp_path_factory.mktemp("amp")
    generate_dataset(root / "tiny.h5", ClusteringParams(**TINY_PARAMS), seed=0)
    start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2, n_layers=1),
              TrainConfig(batch_size=6, max_epochs=1, device="cpu", step="amp"),
              DataConfig(path=str(root / "tiny.h5")), root / "runs", "amp")
    return open_run("amp", root / "runs", "cpu")


@pytest.fixture
def scoring_flags(monkeypatch, amp_run):
    """The settings each call of the run's task's ``score`` saw, and what it returned."""
    seen = []
    task_cls = type(amp_run.task)
    real = task_cls.score

    def spy(self, *args, **kwargs):
        seen.append(_flags())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(task_cls, "score", spy)
    return seen


@pytest.fixture
def tf32_restored():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_eval_scores_with_tf32_and_autocast_off_and_restores_the_settings(amp_run, scoring_flags, tf32_restored):
    assert amp_run.config["train"]["step"] == "amp"
    use_tf32(True)  # a process (a notebook, the trainer) left TF32 on, and scores under bf16 autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        res = evaluate_run(amp_run)
        assert torch.is_autocast_enabled("cpu")  # restored
    assert scoring_flags == [(False, False, False, False)]  # once: the CPU trains without TF32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
    assert "tf32" not in res
    full = evaluate_run(amp_run)  # and the same numbers as scoring with nothing set
    assert full["loss"] == res["loss"]


def test_the_settings_are_restored_when_scoring_fails(amp_run, monkeypatch, tf32_restored):
    use_tf32(True)

    def broken(*args, **kwargs):
        raise RuntimeError("scoring failed")

    monkeypatch.setattr(type(amp_run.task), "score", broken)
    with pytest.raises(RuntimeError, match="scoring failed"):
        evaluate_run(amp_run)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)


@contextlib.contextmanager
def _tf32_on(device):  # what training's TF32 scope does on CUDA
    before = torch.backends.cuda.matmul.allow_tf32
    use_tf32(True)
    try:
        yield
    finally:
        use_tf32(before)


@pytest.mark.parametrize(("shift", "recorded"), [(2e-4, True), (5e-5, False)])
def test_a_tf32_score_is_recorded_beside_the_full_one_only_when_it_differs(amp_run, monkeypatch, tf32_restored,
                                                                         shift, recorded):
    """Where training uses TF32 (CUDA, simulated: the device says TF32 trains, and its scope sets the flag), the
    run is scored a second time with TF32 on and autocast off; a difference above 1e-4 is recorded."""
    task_cls = type(amp_run.task)
    real = task_cls.score
    seen = []

    def tf32_moves_the_loss(self, *args, **kwargs):
        seen.append(_flags())
        res = real(self, *args, **kwargs)
        if torch.backends.cuda.matmul.allow_tf32:
            res = {**res, "loss": res["loss"] + shift}
        return res

    monkeypatch.setattr(task_cls, "score", tf32_moves_the_loss)
    monkeypatch.setattr(read_mod, "tf32_trains", lambda device: True)
    monkeypatch.setattr(read_mod, "tf32_scope", _tf32_on)
    use_tf32(False)
    res = evaluate_run(amp_run)
    assert seen == [(False, False, False, False), (True, True, False, False)]
    assert torch.backends.cuda.matmul.allow_tf32 is False
    if recorded:
        assert res["tf32"] == {"loss": pytest.approx(res["loss"] + shift)}
    else:
        assert "tf32" not in res
