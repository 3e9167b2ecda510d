"""The step mode a run trains in (training/modes.py): what `auto` picks, from what it is told."""

import pytest

from swarmctl.errors import ConfigError
from swarmctl.tasks import TASKS
from swarmctl.training.modes import CHOICES, MODES, Measured, StepMode, choose_step_mode

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
