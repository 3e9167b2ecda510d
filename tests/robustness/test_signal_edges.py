"""Signals at the edges of a command: while it starts (PyTorch loading), while the figures are drawn after
training, and inside code Python cannot raise from (a weakref callback). Each ends with exit 130, one line
naming the signal (with how to continue when there is something to continue) and nothing half-written;
a re-run draws the figures the signal stopped."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import tiered
from faults import cli

from swarmctl.cli import continue_with, run

REPO = Path(__file__).resolve().parents[2]


def _sigcgt(pid):
    """The signals process ``pid`` catches (a bit mask), from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    return 0


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see the handler installed")
# a process each: Ctrl-C (SIGINT) in the default suite, SIGTERM (which the next test sends) in the slow one
@pytest.mark.parametrize("sig", [tiered(signal.SIGINT, default=True), tiered(signal.SIGTERM, default=False)])
def test_a_signal_while_the_commands_load_is_one_line_and_130(tmp_path, sig):
    """Synchronised on the handler itself: the signal is sent as soon as the process catches SIGTERM, which
    swarmctl's start-up does before it loads the commands (loading PyTorch takes a second or more)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "swarmctl", "models"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None and not _sigcgt(proc.pid) & (1 << (signal.SIGTERM - 1)):
        time.sleep(0.001)  # a poll interval, not a wait for an event
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, out, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and f"interrupted ({sig.name}) while starting" in lines[0] and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


# A real swarmctl process whose SIGTERM arrives when a command, its options parsed, loads PyTorch: the moment
# between the start-up handler and the command's own handling, which Typer turned into a bare exit 130.
_SIGNAL_AT_TORCH = """
import importlib.abc, signal, sys
class SignalAtTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            signal.raise_signal(signal.SIGTERM)
        return None
sys.meta_path.insert(0, SignalAtTorch())
sys.argv = ["swarmctl", *sys.argv[1:]]
from swarmctl.cli import main
main()
"""


# a process each, loading PyTorch: `train` in the default suite, the other commands in the slow one
@pytest.mark.parametrize("command", [
    tiered(["train", "set-linear", "--data", "d.h5", "--max-epochs", "1"], default=True),
    tiered(["cluster", "p.csv"], default=False),
    tiered(["eval", "nosuchrun"], default=False),
])
def test_a_signal_while_a_command_loads_pytorch_is_one_line_and_130(tmp_path, command):
    (tmp_path / "p.csv").write_text("x,y\n0,0\n1,1\n2,0\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-c", _SIGNAL_AT_TORCH, *command], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, (proc.returncode, proc.stdout, proc.stderr)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "interrupted (SIGTERM)" in lines[0], proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def _ignores_sigterm(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see the signal ignored")
def test_a_signal_after_the_last_line_keeps_the_commands_exit_code(tmp_path):
    """The interpreter's teardown after a command (over half a second once PyTorch loaded) ended a SIGTERM
    with the default action's 143, the command's output complete. Synchronised on the process: the signal
    is sent once the teardown has begun, where Python restores the default action."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "swarmctl", "models"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while proc.poll() is None and not _ignores_sigterm(proc.pid):
            time.sleep(0.001)  # a poll interval, not a wait for an event
    except FileNotFoundError:  # the process has gone: its teardown never ignored the signal
        pass
    ended = proc.poll() is not None
    if not ended:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert not ended, "the process ended without ignoring SIGTERM in its teardown"
    assert proc.returncode == 0, (proc.returncode, err)
    assert err == "" and "swarm" in out, err


class _SignalsInDel:
    """Sends SIGTERM to this process while Python runs its __del__, where an exception cannot propagate."""

    def __del__(self):
        signal.raise_signal(signal.SIGTERM)


def test_a_signal_python_has_to_drop_still_stops_the_command(capfd):
    done, hook, handler = [], sys.unraisablehook, signal.getsignal(signal.SIGTERM)

    def work():
        continue_with("swarmctl again")
        obj = _SignalsInDel()
        del obj  # the handler's Interrupted is raised inside __del__ and dropped by Python
        done.append("the work went on")

    assert run(work) == 130
    assert done == ["the work went on"]
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err, err
    assert "interrupted (SIGTERM)" in err and "continue with: swarmctl again" in err
    assert signal.getsignal(signal.SIGTERM) is handler and sys.unraisablehook is hook  # restored


def _spec(tmp_path, data):
    spec = tmp_path / "t.toml"
    spec.write_text(f'name = "t"\nseeds = [0]\nminutes = 5\nmax_epochs = 1\nbatch_size = 6\ndata = "{data}"\n'
                    'device = "cpu"\n[[grid]]\nmodel = "set-linear"\nhidden = [4, 8]\nlayers = 1\n')
    return spec


def test_a_signal_while_drawing_after_the_last_run_and_the_rerun(tmp_path, tiny_h5, monkeypatch):
    import swarmctl.plots.curves as fit_cli  # the drawer `sweep` hands to finish_runs

    real, drawn = fit_cli.save_run_curves, []

    def stopped_at_the_second(run_dir):
        drawn.append(run_dir)
        if len(drawn) == 2:
            signal.raise_signal(signal.SIGTERM)
        return real(run_dir)

    monkeypatch.setattr(fit_cli, "save_run_curves", stopped_at_the_second)
    spec, runs = _spec(tmp_path, tiny_h5), tmp_path / "runs"
    r = cli("sweep", spec, "--runs-dir", runs)
    assert r.exit_code == 130, r.output
    assert "interrupted (SIGTERM)" in r.output and f" with: swarmctl sweep {spec} --runs-dir {runs}" in \
        r.output.replace("\n", "")
    folder = runs / "sweep-t"
    assert sorted(p.name for p in folder.glob("*/curves.png")) == ["curves.png"]  # the second was stopped
    assert not list(folder.rglob("*.tmp"))
    monkeypatch.setattr(fit_cli, "save_run_curves", real)
    r = cli("sweep", spec, "--runs-dir", runs)
    assert r.exit_code == 0 and "0 run(s) trained" in r.output, r.output
    assert len(list(folder.glob("*/curves.png"))) == 2  # the re-run drew the missing one


def _logged_epochs(run):
    metrics = run / "metrics.jsonl"
    return [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()] if metrics.exists() else []


def _counting_loss(monkeypatch, signal_at_validation_batch=None):
    """Counts the training steps and validation batches (of 2 tasks) of every run the clustering task
    prepares; with ``signal_at_validation_batch`` k, SIGTERM arrives while validation batch k is computed."""
    import dataclasses

    from swarmctl.tasks import clustering
    from swarmctl.tasks.clustering import ClusteringTask

    monkeypatch.setattr(clustering, "EVAL_BATCH", 2)
    real, seen = ClusteringTask.prepare, {"steps": 0, "validated": 0}

    def prepare(self, train_cfg, data_cfg):
        data = real(self, train_cfg, data_cfg)

        def loss_fn(model, batch):
            if model.training:
                seen["steps"] += 1
            else:
                seen["validated"] += 1
                if seen["validated"] == signal_at_validation_batch:
                    signal.raise_signal(signal.SIGTERM)
            return data.loss_fn(model, batch)

        return dataclasses.replace(data, loss_fn=loss_fn)

    monkeypatch.setattr(ClusteringTask, "prepare", prepare)
    return seen


def test_a_signal_during_validation_stops_it_and_the_run_resumes_with_that_validation(tmp_path, tiny_h5,
                                                                                     monkeypatch):
    """A long validation pass answers a signal between batches: exit 130 with the resume hint, no best.pt or
    metrics line from part of the split, last.pt after the epoch's steps; the resume runs no step again and
    validates the whole split."""
    from swarmctl.training.checkpoint import load_checkpoint

    runs = tmp_path / "runs"
    args = ["--data", tiny_h5, "--runs-dir", runs, "--name", "x", "--batch-size", 2, "--device", "cpu"]
    seen = _counting_loss(monkeypatch, signal_at_validation_batch=1)
    r = cli("train", "set-linear", *args, "--max-epochs", 1)  # the last epoch: its end is the run's end
    assert r.exit_code == 130, r.output
    assert "interrupted (SIGTERM)" in r.output and "--resume x" in r.output.replace("\n", ""), r.output
    assert seen == {"steps": 9, "validated": 1}  # 18 tasks in 9 steps; 3 validation batches, 1 computed
    run = runs / "x"
    assert not (run / "best.pt").exists() and _logged_epochs(run) == []
    state = load_checkpoint(run / "last.pt").state
    assert (state.epoch, state.cursor, state.history) == (0, 9, [math.inf])  # the sentinel alone: nothing logged
    seen = _counting_loss(monkeypatch)
    r = cli("train", "set-linear", "--resume", "x", "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    assert seen == {"steps": 0, "validated": 3}
    assert _logged_epochs(run) == [0]
    assert (run / "best.pt").is_file() and not list(runs.rglob("*.tmp"))
