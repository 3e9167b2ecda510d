"""What `train` shows while it trains: the net budget used and left, when the epoch ends, the best validation
loss so far and the device, on the bar and on every per-epoch line; one line on what the budget buys; where
an interrupted run was saved (epoch and batch) and, on resume, how much of the budget is left."""

import io
import os
import re
import signal
from types import SimpleNamespace

from rich.console import Console

from swarmctl.cli._progress import EpochProgress
from swarmctl.tasks import task_of
from swarmctl.training.loop import TrainingStart

TINY = ["--hidden", "8", "--iters", "3", "--batch-size", "6", "--device", "cpu", "--minutes", "10"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _shown(terminal, drive, width=250):
    """What an EpochProgress for the clustering task prints while ``drive(display)`` calls its hooks."""
    buf = io.StringIO()
    out = Console(file=buf, force_terminal=terminal, width=width, color_system=None)
    with EpochProgress(task_of("swarm"), out=out) as display:
        drive(display)
    return ANSI.sub("", buf.getvalue())


def _epoch_of_90_steps(display, steps=20, rate=6.5, start=None):
    display.begin(start or TrainingStart("cpu", 3600.0, 1000, 0, 0, 0.0, None, False))
    display.epoch_start(0, 90, 0)
    for k in range(1, steps + 1):
        display.batch_end(1.0 + 1 / k, k * rate)


def test_the_bar_shows_the_budget_the_epochs_eta_the_best_loss_and_the_device():
    text = _shown(True, _epoch_of_90_steps)
    bar = [ln for ln in text.splitlines() if "20/90" in ln][-1]
    assert "net 2.2/60 min" in bar and "cpu" in bar and "best -" in bar
    assert "epoch ends in ~7:35" in bar  # 70 steps left at 6.5 s


def test_on_an_80_column_terminal_the_bar_keeps_its_count_the_budget_and_the_eta():
    bar = [ln for ln in _shown(True, _epoch_of_90_steps, width=80).splitlines() if "/90" in ln][-1]
    assert "20/90" in bar and "net 2.2/60 min, epoch ends in ~7:35" in bar, bar


def test_the_bar_says_when_the_budget_ends_before_the_epoch():
    start = TrainingStart("cpu", 300.0, 1000, 0, 0, 0.0, 0.75, True)
    bar = [ln for ln in _shown(True, lambda d: _epoch_of_90_steps(d, start=start)).splitlines() if "20/90" in ln][-1]
    assert "net 2.2/5.0 min" in bar and "budget ends in ~2:50" in bar and "best 0.7500" in bar


def test_on_an_accelerator_the_eta_comes_from_the_steps_already_timed():
    """On a GPU the trainer reads the loss and the time once an epoch: between, the bar estimates them."""
    def drive(display):
        display.begin(TrainingStart("cuda:0", 3600.0, 1000, 0, 0, 0.0, None, False))
        display.epoch_start(0, 90, 0)
        for _ in range(89):
            display.batch_end(None, 0.0)
        display.batch_end(1.0, 90.0)  # read at the epoch's end: 1 s per step
        display.epoch_end({"epoch": 0, "train_loss": 1.0, "val_loss": 0.9, "best_val": 0.9, "lr": 0.01,
                           "net_seconds": 90.0, "backtracked": False})
        display.epoch_start(1, 90, 0)
        for _ in range(10):
            display.batch_end(None, 90.0)

    bar = [ln for ln in _shown(True, drive).splitlines() if "10/90" in ln][-1]
    assert "net 1.7/60 min" in bar and "epoch ends in ~1:20" in bar and "best 0.9000" in bar and "cuda:0" in bar


def test_one_line_says_what_the_budget_buys_and_how_far_that_is_from_the_tasks_usual_run():
    text = _shown(False, _epoch_of_90_steps)
    bought = [ln for ln in text.splitlines() if "buys about" in ln]
    assert len(bought) == 1, text
    assert bought[0].startswith("at 6.50 s/step, the net budget of 60 min buys about 6.2 epochs of 90 steps")
    assert "far fewer than the task's usual run (about 1000 epochs" in bought[0]


def test_the_budget_line_says_when_the_epoch_limit_ends_the_run_first():
    start = TrainingStart("cpu", 3600.0, 3, 0, 0, 0.0, None, False)
    text = _shown(False, lambda d: _epoch_of_90_steps(d, rate=0.5, start=start))
    assert "buys about 80 epochs of 90 steps; its limit of 3 epochs ends it first" in text
    assert "usual run" not in text


def test_train_per_epoch_lines_carry_the_same_facts_when_the_output_is_not_a_terminal(tiny_h5, tmp_path, cli):
    r = cli("train", "swarm", *TINY, "--max-epochs", 2, "--data", tiny_h5, "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("epoch ")]
    assert len(lines) == 2, r.output
    for line in lines:
        assert re.search(r"best \d\.\d{4}", line)
        assert re.search(r"net \d+\.\d/10 min \(\d+\.\d min left\), ~\d+:\d\d net per epoch, cpu", line), line
    # two tiny epochs end within seconds: no line on what the 10 minutes would buy (QUIET_S)
    assert not [ln for ln in r.output.splitlines() if "buys about" in ln], r.output


def test_ctrl_c_names_the_epoch_and_batch_saved_and_the_resume_names_the_budget_left(
        tiny_h5, tmp_path, cli, clustering_training_loss):
    calls = {"n": 0}

    def interrupting(real):
        def loss(model, batch):
            calls["n"] += model.training
            if calls["n"] == 5 and model.training:
                os.kill(os.getpid(), signal.SIGINT)  # during the 5th step: 3 batches per epoch, so epoch 1, batch 2
            return real(model, batch)
        return loss

    runs = tmp_path / "runs"
    clustering_training_loss(interrupting)
    r = cli("train", "swarm", *TINY, "--max-epochs", 2, "--data", tiny_h5, "--runs-dir", runs, "--name", "cut")
    clustering_training_loss(None)
    assert r.exit_code == 130, r.output
    assert re.search(r"interrupted \(SIGINT\): saved \S+last\.pt at epoch 1, batch 2 of 3, net \d+\.\d of 10 min "
                     r"used; continue with: swarmctl train swarm --resume cut", r.output), r.output
    again = cli("train", "swarm", "--resume", "cut", "--runs-dir", runs)
    assert again.exit_code == 0, again.output
    assert re.search(r"resuming at epoch 1, batch 2: net \d+\.\d min of 10 min used, \d+\.\d min left", again.output), \
        again.output


def test_eval_shows_a_bar_with_time_left_while_it_scores(trained_runs, cli, monkeypatch, tmp_path):
    from swarmctl.cli import _progress

    runs, _ = trained_runs
    buf = io.StringIO()
    monkeypatch.setattr(_progress, "console", Console(file=buf, force_terminal=True, width=200, color_system=None))
    clock = iter(range(0, 10**6, 2))  # each reading 2 s after the last: longer than the bar's delay
    monkeypatch.setattr(_progress, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    r = cli("eval", "swarm", "--runs-dir", runs, "--out", tmp_path / "e.json")
    assert r.exit_code == 0, r.output
    assert re.search(r"scoring .* 100% \d:\d\d:\d\d \d:\d\d:\d\d", ANSI.sub("", buf.getvalue()))  # elapsed, left


def test_eval_reports_every_batch_it_scores(trained_runs, tmp_path):
    from swarmctl.studies.evaluation import evaluation

    runs, _ = trained_runs
    seen = []
    with evaluation("swarm", runs, "cpu", out=tmp_path / "e.json", scoring=lambda k, n: seen.append((k, n))):
        pass
    assert seen and seen == [(k, seen[0][1]) for k in range(1, seen[0][1] + 1)]


def test_shuffle_variance_shows_a_bar_with_time_left_per_run(trained_runs, cli, monkeypatch, tmp_path):
    from swarmctl.cli import _progress

    runs, _ = trained_runs
    buf = io.StringIO()
    monkeypatch.setattr(_progress, "console", Console(file=buf, force_terminal=True, width=200, color_system=None))
    r = cli("shuffle-variance", "swarm", "--runs-dir", runs, "--tasks", 3, "--shuffles", 3, "--out", tmp_path / "sv")
    assert r.exit_code == 0, r.output
    assert re.search(r"swarm \(8-3-1\) .* 3/3 \d:\d\d:\d\d \d:\d\d:\d\d", ANSI.sub("", buf.getvalue()))  # elapsed, left


def test_sampling_reports_every_sub_pixel_it_draws():
    from swarmctl import create_model
    from swarmctl.config import ModelConfig
    from swarmctl.studies.sampling import sample_grid

    model = create_model(ModelConfig(name="swarm-image", dim_hidden=4, n_iter=1, n_layers=1, dataset="mnist"))
    seen = []
    sample_grid(model, "tiny", per_class=1, progress=lambda k, n: seen.append((k, n)))
    assert seen == [(k, 28 * 28) for k in range(1, 28 * 28 + 1)]


def test_no_budget_line_when_the_epoch_limit_ends_the_run_within_a_minute():
    start = TrainingStart("cpu", 3600.0, 3, 0, 0, 0.0, None, False)
    text = _shown(False, lambda d: _epoch_of_90_steps(d, rate=0.05, start=start))  # 3 x 90 x 0.05 s = 13.5 s
    assert "buys about" not in text, text
