"""The step mode a run trains in (training/modes.py): what `auto` picks, from what it is told."""

import pytest

from swarmctl.errors import ConfigError
from swarmctl.tasks import TASKS
from swarmctl.training.modes import CHOICES, MODES, Measured, StepMode, choose_step_mode, resolve_step

MEASURED = {"eager": Measured(0.020, 2.0), "amp": Measured(0.015, 2.0), "graphs": Measured(0.010, 3.0),
            "compile": Measured(0.008, 45.0)}


def test_mode_names_round_trip():
    assert all(MODES[name].name == name for name in MODES)
    assert StepMode(amp=True, graphs=True).name == "amp+graphs"
    assert CHOICES[0] == "auto"


def test_auto_on_the_cpu_is_eager_whatever_was_measured():
    choice = choose_step_mode("auto", "cpu", MEASURED, 3600)
    assert choice.mode == StepMode()
    assert "cpu" in choice.reason


def test_auto_on_cuda_takes_the_most_steps_in_the_budget():
    # an hour: compile's 45 s start-up pays off (8 ms a step against 10 ms)
    assert choose_step_mode("auto", "cuda", MEASURED, 3600).mode == MODES["compile"]
    # a minute: (60 - 45) / 0.008 = 1,875 steps against (60 - 3) / 0.010 = 5,700: graphs
    choice = choose_step_mode("auto", "cuda", MEASURED, 60)
    assert choice.mode == MODES["graphs"]
    assert "2.00x the eager step" in choice.reason


def test_auto_on_cuda_never_picks_a_mode_the_task_did_not_prove():
    proven = {k: v for k, v in MEASURED.items() if k in ("eager", "amp")}
    assert choose_step_mode("auto", "cuda", proven, 3600).mode == MODES["amp"]


def test_auto_on_cuda_without_measurements_is_eager():
    choice = choose_step_mode("auto", "cuda", {}, 3600)
    assert choice.mode == MODES["eager"]
    assert "no mode measured" in choice.reason


def test_auto_with_a_budget_shorter_than_every_start_up_takes_the_cheapest_start():
    assert choose_step_mode("auto", "cuda", MEASURED, 1.0).mode in (MODES["eager"], MODES["amp"])


def test_auto_ignores_unknown_or_unusable_measurements():
    odd = {"warp-drive": Measured(1e-9), "graphs": Measured(0.0), "eager": Measured(0.02)}
    assert choose_step_mode("auto", "cuda", odd, 3600).mode == MODES["eager"]


@pytest.mark.parametrize("name", [n for n in CHOICES if n != "auto"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_named_mode_is_forced_on_any_device(name, device):
    choice = choose_step_mode(name, device, MEASURED, 3600)
    assert choice.mode == MODES[name]
    assert choice.reason == "as asked"


@pytest.mark.parametrize("bad", ["", "AMP", "fast", "graphs+amp"])
def test_an_unknown_mode_is_a_config_error_listing_the_choices(bad):
    with pytest.raises(ConfigError, match="auto, eager, amp"):
        choose_step_mode(bad, "cuda", MEASURED, 60)


def test_every_task_lists_only_known_modes_with_positive_times():
    for task in TASKS.values():
        for name, m in task.step_modes.items():
            assert name in MODES, (task.name, name)
            assert m.step_seconds > 0 and m.start_seconds >= 0, (task.name, name)


def test_the_paper_tasks_train_faster_than_eager_by_default_on_cuda():
    """With each task's default budget, auto on CUDA picks a mode measured faster than the eager step."""
    for task in TASKS.values():
        if not task.step_modes:
            continue
        choice = choose_step_mode("auto", "cuda", task.step_modes, task.defaults.minutes * 60)
        assert task.step_modes[choice.mode.name].step_seconds < task.step_modes["eager"].step_seconds, task.name


def test_resolve_step_records_the_chosen_mode_and_its_switches():
    from swarmctl.config import TrainConfig

    cfg, choice = resolve_step(TrainConfig(minutes=60), "cuda", MEASURED)
    assert (cfg.step, cfg.amp, cfg.cuda_graphs, cfg.compile) == ("compile", False, False, True)
    cfg, _ = resolve_step(TrainConfig(step="amp+graphs"), "cuda", MEASURED)
    assert (cfg.step, cfg.amp, cfg.cuda_graphs, cfg.compile) == ("amp+graphs", True, True, False)
    cfg, _ = resolve_step(TrainConfig(), "cpu", MEASURED)
    assert (cfg.step, cfg.amp, cfg.cuda_graphs, cfg.compile) == ("eager", False, False, False)


def test_resolve_step_takes_switches_given_alone_as_the_mode_asked_for():
    from swarmctl.config import TrainConfig

    cfg, choice = resolve_step(TrainConfig(amp=True, cuda_graphs=True), "cuda", MEASURED)
    assert cfg.step == "amp+graphs" and choice.reason == "as asked"
    cfg, choice = resolve_step(TrainConfig(cuda_graphs=True), "cpu", MEASURED)
    assert cfg.step == "graphs" and "run eagerly here" in choice.reason


@pytest.mark.parametrize(("step", "switches"), [("graphs", {"amp": True}), ("eager", {"compile": True}),
                                                 ("amp", {"amp": True, "cuda_graphs": True})])
def test_a_step_mode_and_switches_that_disagree_are_refused(step, switches):
    from swarmctl.config import TrainConfig

    with pytest.raises(ConfigError, match="disagree"):
        TrainConfig(step=step, **switches)


def test_a_step_mode_with_its_own_switches_is_accepted():
    from swarmctl.config import TrainConfig

    assert TrainConfig(step="amp+graphs", amp=True, cuda_graphs=True).step == "amp+graphs"
    with pytest.raises(ConfigError, match="unknown `step`"):
        TrainConfig(step="turbo")


def test_a_run_says_its_step_mode_first_and_keeps_it_on_resume(tiny_h5, tmp_path):
    import json

    from swarmctl.config import DataConfig, ModelConfig, TrainConfig
    from swarmctl.runs import resume_run, start_run

    lines: list[str] = []
    model = ModelConfig(name="swarm", dim_hidden=8, n_iter=2, n_layers=1)
    start_run(model, TrainConfig(batch_size=8, max_epochs=1, device="cpu"), DataConfig(path=str(tiny_h5)),
              tmp_path, "auto", announce=lines.append)
    start_run(model, TrainConfig(batch_size=8, max_epochs=1, device="cpu", step="amp"), DataConfig(path=str(tiny_h5)),
              tmp_path, "amp", announce=lines.append)
    assert lines[0].startswith("training auto: swarm (8-2-1) on cpu, ")
    assert "eager step (auto: on cpu" in lines[0]
    assert "amp step (as asked)" in lines[1]
    saved = json.loads((tmp_path / "amp" / "config.json").read_text())["train"]
    assert (saved["step"], saved["amp"]) == ("amp", True)
    resume_run("amp", tmp_path, max_epochs=2, announce=lines.append)
    assert "amp step (the run's own)" in lines[2]
    assert json.loads((tmp_path / "amp" / "config.json").read_text())["train"]["amp"] is True


def test_the_triton_switch_is_a_mode_of_its_own_and_never_compiled():
    from swarmctl.config import TrainConfig

    cfg, choice = resolve_step(TrainConfig(triton=True, amp=True), "cuda", MEASURED)
    assert (cfg.step, cfg.triton, cfg.amp, choice.reason) == ("amp+triton", True, True, "as asked")
    cfg, choice = resolve_step(TrainConfig(step="triton+graphs"), "cpu", MEASURED)
    assert (cfg.triton, cfg.cuda_graphs) == (True, True)
    assert "run eagerly here" in choice.reason and "Triton cell runs on CUDA only" in choice.reason
    with pytest.raises(ConfigError, match="make no step mode .the Triton cell is not compiled"):
        TrainConfig(triton=True, compile=True)
    with pytest.raises(ConfigError, match="make no step mode; choose"):
        TrainConfig(compile=True, cuda_graphs=True)
    with pytest.raises(ConfigError, match="disagree"):
        TrainConfig(step="triton", amp=True)


def test_a_triton_mode_on_cuda_without_triton_is_refused_before_the_run(monkeypatch):
    import sys

    import swarmctl.layers
    from swarmctl.config import TrainConfig
    from swarmctl.training.modes import resumed_step

    monkeypatch.setitem(sys.modules, "swarmctl.layers._triton", None)  # `import` of it raises ImportError
    monkeypatch.delattr(swarmctl.layers, "_triton", raising=False)  # (once imported, the package holds it)
    with pytest.raises(ConfigError, match="Triton cannot be imported here"):
        resolve_step(TrainConfig(step="triton"), "cuda", MEASURED)
    with pytest.raises(ConfigError, match="Triton cannot be imported here.*resume it on the CPU"):
        resumed_step(TrainConfig(step="amp+triton", amp=True, triton=True), "cuda")
    assert resolve_step(TrainConfig(step="triton"), "cpu", MEASURED)[0].triton  # not needed off CUDA
    fastest = {**MEASURED, "triton": Measured(1e-6, 0.0)}  # auto passes over a mode this machine cannot run
    cfg, choice = resolve_step(TrainConfig(), "cuda", fastest)
    assert not cfg.triton and choice.reason.startswith("auto")


TRITON_TRAIN = """
import json, sys
from swarmctl.layers import _triton
from swarmctl.layers.swarm import SwarmLayer
calls, forwards = [], []
apply, states = _triton.TritonCell.apply, SwarmLayer.states
_triton.TritonCell.apply = lambda *a: calls.append(1) or apply(*a)
SwarmLayer.states = lambda self, *a, **k: forwards.append(self.n_iter) or states(self, *a, **k)
from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.runs import start_run
lines = []
for step in ("eager", "triton"):
    before, seen = len(calls), len(forwards)
    start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2, n_layers=1),
              TrainConfig(batch_size=8, max_epochs=2, device="cpu", step=step), DataConfig(path=sys.argv[1]),
              sys.argv[2], step, announce=lines.append)
    print(json.dumps({"step": step, "calls": len(calls) - before, "iterations": sum(forwards[seen:])}))
print(json.dumps({"lines": lines}))
"""


@pytest.mark.slow
def test_a_triton_run_trains_through_the_triton_cell_as_the_eager_run_does(tiny_h5, tmp_path):
    """`--step triton` on the CPU under Triton's interpreter (where the cell runs on CPU tensors): every step
    and validation goes through the Triton cell, and the run's losses are the eager run's to rounding."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton", reason="Triton cannot be imported here: there is no Triton cell to train with")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", TRITON_TRAIN, str(tiny_h5), str(tmp_path)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    calls = {o["step"]: (o["calls"], o["iterations"]) for o in out if "step" in o}
    assert calls["eager"][0] == 0 and calls["triton"][0] == calls["triton"][1] > 0, out  # every iteration of every
    # forward, training and validation, went through the cell
    assert "triton step (as asked)" in out[-1]["lines"][1]
    eager, triton = ([json.loads(line) for line in (tmp_path / s / "metrics.jsonl").read_text().splitlines()]
                     for s in ("eager", "triton"))
    for a, b in zip(eager, triton, strict=True):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-4)
    saved = json.loads((tmp_path / "triton" / "config.json").read_text())["train"]
    assert (saved["step"], saved["triton"]) == ("triton", True)
