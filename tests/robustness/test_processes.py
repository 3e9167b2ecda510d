"""Signals and kills at the edges of a run: SIGTERM as the run folder appears (in this process in the default
suite), and real processes killed at random points in the slow one: `train` always resumes or restarts under its
name to the same final epoch count, `gen-data` never leaves a temporary file or a half-written dataset, and two
writers never share a run."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from swarmctl.data.hdf5 import read_dataset
from swarmctl.training.checkpoint import load_checkpoint

ENV = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
TRAIN = [sys.executable, "-m", "swarmctl", "train", "swarm"]
TINY = ["--hidden", "8", "--iters", "2", "--batch-size", "3", "--device", "cpu"]
GEN = [sys.executable, "-m", "swarmctl", "gen-data", "--tasks", "3000", "--n-min", "20", "--n-max", "60"]


def _popen(args):
    return subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)


def _wait_for(predicate, proc, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the process ended early: {proc.communicate()}")
        time.sleep(0.02)
    raise AssertionError("timed out")


def _temps(folder):
    return sorted(p.name for p in folder.rglob("*.tmp"))


def _epochs(run_dir):
    return [json.loads(line)["epoch"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # the default suite: test_lifecycle's second writer refused beside a lock held in-process
def test_a_second_writer_on_a_running_run_is_refused(cli, tiny_h5, tmp_path):
    runs = tmp_path / "runs"
    first = _popen([*TRAIN, *TINY, "--data", tiny_h5, "--runs-dir", runs, "--name", "x", "--max-epochs", 100000])
    try:
        _wait_for(lambda: (runs / "x" / "last.pt").is_file(), first)
        for second in (["--resume", "x"], [*TINY, "--data", tiny_h5, "--name", "x"]):  # resume, fresh start
            r = cli("train", "swarm", *second, "--runs-dir", runs)
            assert r.exit_code == 1 and f"process {first.pid}" in r.output, r.output
            assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    assert first.returncode == 130
    epochs = _epochs(runs / "x")
    assert epochs == list(range(len(epochs)))  # one writer: every epoch once, in order


def test_sigterm_as_the_run_folder_appears_saves_a_resumable_run_in_this_process(cli, tiny_h5, tmp_path, monkeypatch):
    """SIGTERM right after config.json is written, before training starts (the first optimizer does not exist
    yet), stops cleanly: exit 130, one line naming the signal and the resume, and the resume trains the run."""
    from swarmctl.runs import lifecycle

    real, sent = lifecycle.fit, []

    def signalled_first(*args, **kwargs):
        sent.append(json.loads((tmp_path / "runs" / "x" / "config.json").read_text())["model"]["name"])
        signal.raise_signal(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(lifecycle, "fit", signalled_first)
    runs = tmp_path / "runs"
    r = cli("train", "swarm", *TINY, "--data", tiny_h5, "--runs-dir", runs, "--name", "x", "--max-epochs", 1)
    assert sent == ["swarm"], sent  # the signal came once the run's config was on disk
    assert r.exit_code == 130 and "interrupted (SIGTERM)" in r.output and "Traceback" not in r.output, r.output
    assert "--resume x" in r.output.replace("\n", "")
    monkeypatch.setattr(lifecycle, "fit", real)
    r = cli("train", "swarm", "--resume", "x", "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    assert _epochs(runs / "x") == [0] and _temps(runs) == []


@pytest.mark.slow  # the default suite: the same moment in this process, above; a real process's start-up signals:
# test_signal_edges
def test_sigterm_as_the_run_folder_appears_saves_a_resumable_run(cli, tiny_h5, tmp_path):
    """SIGTERM right after config.json is written (before the first optimizer exists) stops cleanly."""
    runs = tmp_path / "runs"
    proc = _popen([*TRAIN, *TINY, "--data", tiny_h5, "--runs-dir", runs, "--name", "x", "--max-epochs", 1])
    _wait_for(lambda: (runs / "x" / "config.json").is_file(), proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted (SIGTERM)" in err and "Traceback" not in err, err
    assert "--resume x" in err
    r = cli("train", "swarm", "--resume", "x", "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    assert _epochs(runs / "x") == [0] and _temps(runs) == []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_train_killed_at_random_points_always_finishes_under_its_name(tiny_h5, tmp_path, sig):
    rng = random.Random(f"train-{sig.name}")
    target = 4
    for trial in range(5):
        runs = tmp_path / f"runs{trial}"
        run = runs / "x"
        kills = 0
        for _ in range(12):
            if (run / "config.json").exists():
                args = [*TRAIN, "--resume", "x", "--runs-dir", runs, "--max-epochs", target]
            else:
                args = [*TRAIN, *TINY, "--data", tiny_h5, "--runs-dir", runs, "--name", "x", "--max-epochs", target]
            proc = _popen(args)
            if kills < 3:
                time.sleep(rng.uniform(0.5, 6.0))  # from the imports to the last epoch on this tiny run
                proc.send_signal(sig)
                kills += 1
            out, err = proc.communicate(timeout=300)
            assert "Traceback" not in err, err
            assert proc.returncode in (0, 130, -sig), (proc.returncode, err)  # -sig: before Python started
            if proc.returncode == 0:
                break
        assert proc.returncode == 0, f"trial {trial} did not finish"
        assert _epochs(run) == list(range(target))
        assert load_checkpoint(run / "last.pt").state.epoch == target
        assert _temps(runs) == [], f"orphans after trial {trial}"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_gen_data_killed_at_random_points_leaves_no_temporary_file(tmp_path, sig):
    rng = random.Random(f"gen-{sig.name}")
    reference = tmp_path / "reference.h5"
    out = subprocess.run([str(a) for a in [*GEN, "--out", reference]], capture_output=True, text=True, env=ENV)
    assert out.returncode == 0, out.stderr
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "data.h5"
    for _ in range(6):
        proc = _popen([*GEN, "--out", path, "--force"])
        time.sleep(rng.uniform(0.5, 5.0))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
        assert "Traceback" not in err, err
        if sig == signal.SIGTERM:
            assert proc.returncode in (0, 130, -sig), err  # -sig: killed while Python started
            assert _temps(folder) == []  # removed on the way out
        if path.exists():  # never half-written: either absent or the whole dataset
            assert read_dataset(path)[1]["checksum"] == read_dataset(reference)[1]["checksum"]
        done = subprocess.run([str(a) for a in [*GEN, "--out", path, "--force"]], capture_output=True, text=True,
                              env=ENV)
        assert done.returncode == 0, done.stderr
        assert _temps(folder) == []  # a SIGKILL's orphan is removed by the next gen-data
        assert read_dataset(path)[1]["checksum"] == read_dataset(reference)[1]["checksum"]


@pytest.mark.slow
def test_a_sweep_stopped_by_sigterm_finishes_every_run_when_the_same_command_runs_again(tiny_h5, tmp_path):
    """Each job of a chain with a wall-time limit (docs/experiments.md) runs the same `swarmctl sweep SPEC`
    and is stopped by SIGTERM at its limit; the next job's run of it finishes every run."""
    epochs = 12
    spec = tmp_path / "chain.toml"
    spec.write_text(f'name = "chain"\nseeds = [0, 1]\nminutes = 5\nmax_epochs = {epochs}\nbatch_size = 3\n'
                    f'data = "{tiny_h5}"\ndevice = "cpu"\n'
                    '[[grid]]\nmodel = "swarm"\nhidden = 8\niters = 2\nlayers = 1\n')
    runs = tmp_path / "runs"
    folder = runs / "sweep-chain"
    sweep = [sys.executable, "-m", "swarmctl", "sweep", spec, "--runs-dir", runs]
    first = _popen(sweep)
    _wait_for(lambda: (folder / "swarm-8-2-1-s0" / "metrics.jsonl").is_file(), first)  # the first run is writing
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130 and "interrupted (SIGTERM)" in err and "Traceback" not in err, err
    assert f"continue with: swarmctl sweep {spec} --runs-dir {runs}" in err
    assert not all((folder / f"swarm-8-2-1-s{s}" / "curves.png").is_file() for s in (0, 1))  # stopped before the end
    again = subprocess.run([str(a) for a in sweep], capture_output=True, text=True, env=ENV, timeout=600)
    assert again.returncode == 0, again.stderr
    for seed in (0, 1):
        run = folder / f"swarm-8-2-1-s{seed}"
        assert _epochs(run) == list(range(epochs)), seed
        assert load_checkpoint(run / "last.pt").state.epoch == epochs
    assert _temps(runs) == []
