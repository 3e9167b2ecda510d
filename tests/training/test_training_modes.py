"""The step mode a run trains in (training/modes.py): what `auto` picks, from what it is told and from the step
timings measured on the card it runs on."""

import json

import pytest
import torch

from swarmctl.config import STEP_MODES, TrainConfig, from_dict, to_dict
from swarmctl.errors import ConfigError
from swarmctl.tasks import TASKS
from swarmctl.training.modes import (
    MODES,
    UNMEASURED,
    Measured,
    StepMode,
    choose_step_mode,
    parse_timings,
    resolve_step,
    step_timings,
)

MEASURED = {"eager": Measured(0.020, 2.0), "amp": Measured(0.015, 2.0), "graphs": Measured(0.010, 3.0),
            "compile": Measured(0.008, 45.0)}
CPU, CUDA = torch.device("cpu"), torch.device("cuda")
ALL = tuple(MODES)  # every mode proven: what the card measured decides


def _card(monkeypatch, name: str, tasks: dict | None = None) -> None:
    """Run as if on CUDA card ``name``, whose step timings (``tasks``: task -> mode -> Measured) are shipped."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    if tasks is not None:
        doc = {"cards": [{"card": name, "torch": "2.99", "date": "2026-01-02", "tasks": {
            t: {m: {"step_seconds": v.step_seconds, "start_seconds": v.start_seconds} for m, v in modes.items()}
            for t, modes in tasks.items()}}]}
        monkeypatch.setattr("swarmctl.training.modes.step_timings", lambda: parse_timings(doc))


def test_mode_names_round_trip():
    assert all(MODES[name].name == name for name in MODES)
    assert StepMode(amp=True, graphs=True).name == "amp+graphs"
    assert StepMode.named("amp+triton+graphs") == StepMode(amp=True, triton=True, graphs=True)
    assert STEP_MODES[0] == "auto" and tuple(MODES) == STEP_MODES[1:]


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


def test_auto_on_cuda_never_picks_a_mode_the_task_did_not_prove(monkeypatch):
    _card(monkeypatch, "Card X", {"clustering": MEASURED})
    cfg, _ = resolve_step(TrainConfig(), CUDA, "clustering", ("eager", "amp"))
    assert cfg.step == "amp"


def test_auto_on_cuda_without_measurements_is_eager():
    choice = choose_step_mode("auto", "cuda", {}, 3600)
    assert choice.mode == MODES["eager"]
    assert "no mode measured" in choice.reason


def test_auto_with_a_budget_shorter_than_every_start_up_takes_the_cheapest_start():
    assert choose_step_mode("auto", "cuda", MEASURED, 1.0).mode in (MODES["eager"], MODES["amp"])


def test_auto_ignores_unknown_or_unusable_measurements():
    odd = {"warp-drive": Measured(1e-9), "graphs": Measured(0.0), "eager": Measured(0.02)}
    assert choose_step_mode("auto", "cuda", odd, 3600).mode == MODES["eager"]


@pytest.mark.parametrize("name", [n for n in STEP_MODES if n != "auto"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_named_mode_is_forced_on_any_device(name, device):
    choice = choose_step_mode(name, device, MEASURED, 3600)
    assert choice.mode == MODES[name]
    assert choice.reason == "as asked"


@pytest.mark.parametrize("bad", ["", "AMP", "fast", "graphs+amp"])
def test_an_unknown_mode_is_a_config_error_listing_the_choices(bad):
    with pytest.raises(ConfigError, match="auto, eager, amp"):
        choose_step_mode(bad, "cuda", MEASURED, 60)


def test_the_shipped_step_timings_name_each_card_once_with_known_tasks_and_modes():
    """The package's step_timings.json loads (the loader checks each card's torch and date, eager for every
    task, known modes, step seconds > 0, start-up >= 0), and names only tasks swarmctl has."""
    cards = step_timings()
    assert cards, "no card measured: auto would train eagerly everywhere"
    for card in cards.values():
        assert card.torch and card.date and set(card.tasks) <= set(TASKS), card.card
        for modes in card.tasks.values():
            assert "eager" in modes and set(modes) <= set(MODES)
            assert all(m.step_seconds > 0 and m.start_seconds >= 0 for m in modes.values())


@pytest.mark.parametrize("fault", [{"mog": {"graphs": {"step_seconds": 0.01}}},  # no eager
                                   {"mog": {"eager": {"step_seconds": 0.01}, "warp": {"step_seconds": 0.01}}},
                                   {"mog": {"eager": {"step_seconds": 0.0}}},
                                   {"mog": {"eager": {"step_seconds": 0.01, "start_seconds": -1}}}])
def test_step_timings_without_eager_or_with_an_unknown_mode_or_time_are_refused(fault):
    with pytest.raises(ValueError, match="mog"):
        parse_timings({"cards": [{"card": "C", "torch": "2", "date": "d", "tasks": fault}]})


def test_every_task_lists_only_known_modes_as_proven_and_eager_among_them():
    for task in TASKS.values():
        assert "eager" in task.proven_modes and set(task.proven_modes) <= set(MODES), task.name


def test_the_paper_tasks_train_faster_than_eager_by_default_on_a_measured_card(monkeypatch):
    """With each task's default budget, auto on a card the timings name picks a mode measured faster there
    than the eager step, for every task measured on it."""
    for card in step_timings().values():
        _card(monkeypatch, card.card)
        for name, modes in card.tasks.items():
            task = TASKS[name]
            cfg, choice = resolve_step(task.defaults, CUDA, name, task.proven_modes)
            assert modes[cfg.step].step_seconds < modes["eager"].step_seconds, (card.card, name)
            assert f"measured on {card.card} (torch {card.torch}, {card.date})" in choice.reason


def test_auto_on_a_card_with_no_measurement_follows_the_one_rule(monkeypatch):
    """A card the timings do not name trains in UNMEASURED (eager), whatever another card measured, and the
    reason says so and how to choose another mode."""
    _card(monkeypatch, "Card Y", {"clustering": MEASURED})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Card Z")
    cfg, choice = resolve_step(TrainConfig(), CUDA, "clustering", ALL)
    assert UNMEASURED == "eager" and cfg.step == "eager"
    assert choice.reason.startswith("auto: no measurement for this card (Card Z): eager") and "`step`" in choice.reason


def test_auto_on_a_measured_card_reads_that_cards_timings(monkeypatch):
    _card(monkeypatch, "Card X", {"clustering": MEASURED, "image": {"eager": Measured(0.01)}})
    cfg, choice = resolve_step(TrainConfig(minutes=60), CUDA, "clustering", ALL)
    assert cfg.step == "compile" and "measured on Card X (torch 2.99, 2026-01-02)" in choice.reason
    cfg, choice = resolve_step(TrainConfig(minutes=1), CUDA, "clustering", ALL)
    assert cfg.step == "graphs"
    cfg, choice = resolve_step(TrainConfig(), CUDA, "mog", ALL)  # a task the card did not measure
    assert cfg.step == "eager" and "no mode of mog measured on Card X" in choice.reason


def test_resolve_step_records_the_chosen_mode_as_its_name(monkeypatch):
    _card(monkeypatch, "Card X", {"clustering": MEASURED})
    cfg, _ = resolve_step(TrainConfig(minutes=60), CUDA, "clustering", ALL)
    assert cfg.step == "compile" and StepMode.of(cfg) == StepMode(compile=True)
    cfg, _ = resolve_step(TrainConfig(step="amp+graphs"), CUDA, "clustering", ALL)
    assert cfg.step == "amp+graphs" and StepMode.of(cfg) == StepMode(amp=True, graphs=True)
    cfg, choice = resolve_step(TrainConfig(), CPU, "clustering", ALL)
    assert cfg.step == "eager" and "on cpu" in choice.reason
    cfg, choice = resolve_step(TrainConfig(step="graphs"), CPU, "clustering", ALL)
    assert cfg.step == "graphs" and "run eagerly here" in choice.reason


@pytest.mark.parametrize("switch", ["amp", "compile", "triton", "cuda_graphs"])
def test_the_step_mode_is_one_field(switch):
    """`step` alone holds the mode: the parts are no fields of their own, and a config written holds none."""
    with pytest.raises(TypeError):
        TrainConfig(**{switch: True})
    assert switch not in to_dict(TrainConfig(step="amp+triton+graphs"))


@pytest.mark.parametrize(("old", "mode"), [({"amp": True, "cuda_graphs": True}, "amp+graphs"),
                                           ({"amp": False, "compile": False, "triton": False,
                                             "cuda_graphs": False}, "eager"),
                                           ({"compile": True}, "compile"),
                                           ({"triton": True, "cuda_graphs": True}, "triton+graphs")])
@pytest.mark.parametrize("step", [None, "auto"])
def test_a_config_saved_with_the_old_switches_reads_as_the_mode_they_made(old, mode, step):
    saved = {"lr": 0.01, **({} if step is None else {"step": step}), **old}
    assert from_dict(TrainConfig, saved) == TrainConfig(lr=0.01, step=mode)
    named = {"lr": 0.01, "step": mode, "amp": "amp" in mode, "compile": "compile" in mode,
             "triton": "triton" in mode, "cuda_graphs": "graphs" in mode}  # as the last version wrote them
    assert from_dict(TrainConfig, named) == TrainConfig(lr=0.01, step=mode)


@pytest.mark.parametrize(("step", "switches", "match"),
                         [("graphs", {"amp": True}, "disagree"), ("eager", {"compile": True}, "disagree"),
                          ("auto", {"triton": True, "compile": True}, "make no step mode"),
                          ("auto", {"amp": 1}, "TrainConfig.amp must be bool")])
def test_an_old_config_whose_switches_make_no_mode_or_another_is_refused(step, switches, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(TrainConfig, {"step": step, **switches})


def test_an_unknown_step_mode_is_refused():
    with pytest.raises(ConfigError, match="unknown `step`"):
        TrainConfig(step="turbo")


def test_a_run_says_its_step_mode_first_and_keeps_it_on_resume(tiny_h5, tmp_path):
    from swarmctl.config import DataConfig, ModelConfig
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
    assert saved["step"] == "amp" and not {"amp", "compile", "triton", "cuda_graphs"} & set(saved)
    resume_run("amp", tmp_path, max_epochs=2, announce=lines.append)
    assert "amp step (the run's own)" in lines[2]
    assert json.loads((tmp_path / "amp" / "config.json").read_text())["train"]["step"] == "amp"


def test_a_run_saved_with_the_old_switches_resumes_in_its_mode(tiny_h5, tmp_path):
    """A run an earlier version wrote (config.json and last.pt with `amp` and the other switches beside a
    `step` of auto) continues in the mode its switches made, and is saved with `step` alone."""
    import dataclasses

    from swarmctl.config import DataConfig, ModelConfig
    from swarmctl.files import holding
    from swarmctl.runs import resume_run, start_run
    from swarmctl.training.checkpoint import load_checkpoint, save_checkpoint

    model = ModelConfig(name="swarm", dim_hidden=8, n_iter=2, n_layers=1)
    start_run(model, TrainConfig(batch_size=8, max_epochs=1, device="cpu", step="amp"), DataConfig(path=str(tiny_h5)),
              tmp_path, "old")
    old = {"step": "auto", "amp": True, "compile": False, "triton": False, "cuda_graphs": False}
    run = tmp_path / "old"
    config = json.loads((run / "config.json").read_text())
    config["train"].update(old)
    (run / "config.json").write_text(json.dumps(config))
    with holding(run):
        for name in ("last.pt", "best.pt"):
            ckpt = load_checkpoint(run / name)
            save_checkpoint(run / name, dataclasses.replace(ckpt, config={**ckpt.config,
                                                                         "train": {**ckpt.config["train"], **old}}))
    lines: list[str] = []
    resume_run("old", tmp_path, max_epochs=2, announce=lines.append)
    assert "amp step (the run's own)" in lines[0]
    saved = json.loads((run / "config.json").read_text())["train"]
    assert saved["step"] == "amp" and not set(old) - {"step"} & set(saved)
    assert load_checkpoint(run / "last.pt").state.epoch == 2


def test_the_triton_mode_is_a_mode_of_its_own_and_never_compiled():
    cfg, choice = resolve_step(TrainConfig(step="amp+triton"), CUDA, "clustering", ALL)
    assert (cfg.step, StepMode.of(cfg), choice.reason) == ("amp+triton", StepMode(amp=True, triton=True), "as asked")
    cfg, choice = resolve_step(TrainConfig(step="triton+graphs"), CPU, "clustering", ALL)
    assert StepMode.of(cfg) == StepMode(triton=True, graphs=True)
    assert "run eagerly here" in choice.reason and "Triton cell runs on CUDA only" in choice.reason
    assert not [m for m in MODES.values() if m.triton and m.compile]
    with pytest.raises(ConfigError, match="unknown `step`"):
        TrainConfig(step="triton+compile")


def test_a_triton_mode_on_cuda_without_triton_is_refused_before_the_run(monkeypatch):
    import sys

    import swarmctl.layers
    from swarmctl.training.modes import resumed_step

    monkeypatch.setitem(sys.modules, "swarmctl.layers._triton", None)  # `import` of it raises ImportError
    monkeypatch.delattr(swarmctl.layers, "_triton", raising=False)  # (once imported, the package holds it)
    with pytest.raises(ConfigError, match="Triton cannot be imported here"):
        resolve_step(TrainConfig(step="triton"), CUDA, "clustering", ALL)
    with pytest.raises(ConfigError, match="Triton cannot be imported here.*resume it on the CPU"):
        resumed_step(TrainConfig(step="amp+triton"), "cuda")
    assert StepMode.of(resolve_step(TrainConfig(step="triton"), CPU, "clustering", ALL)[0]).triton  # not needed
    # off CUDA; auto passes over a mode this machine cannot run
    _card(monkeypatch, "Card X", {"clustering": {**MEASURED, "triton": Measured(1e-6, 0.0)}})
    cfg, choice = resolve_step(TrainConfig(), CUDA, "clustering", ALL)
    assert not StepMode.of(cfg).triton and choice.reason.startswith("auto")


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
    assert saved["step"] == "triton" and "triton" not in saved
