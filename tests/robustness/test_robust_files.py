"""Generated faults in the files around a command: a symbolic link, a FIFO or a folder planted in place
of every file a command reads or writes; a write that fails (EFBIG, ENOSPC) on every write path; an
output that would replace an input or a run's own file. The promise: no link is written through, no
command hangs, and a failing command ends in one line, its exit code, with no file left or changed."""

from __future__ import annotations

import errno
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiered
from faults import (
    PLANTED,
    assert_clean_failure,
    assert_no_traceback,
    cli,
    deadline,
    failing_writes,
    file_state,
    plant,
    snapshot,
)

from swarmctl.data.hdf5 import read_dataset
from swarmctl.training.checkpoint import load_checkpoint

TINY = ["--hidden", 4, "--iters", 2, "--batch-size", 8, "--device", "cpu"]
RUN_WRITES = (".lock", "config.json", "metrics.jsonl", "last.pt", "best.pt", "curves.png")


@pytest.fixture
def case(trained_runs, tmp_path):
    """A folder with a copy of a trained run (runs/x), its dataset, and a file outside both."""
    runs, data = trained_runs
    root = tmp_path / "case"
    shutil.copytree(runs / "swarm", root / "runs" / "x")
    shutil.copyfile(data, root / "data.h5")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not swarmctl's file\n")
    return root, outside


def _resume(root):
    return ["train", "swarm", "--resume", "x", "--runs-dir", root / "runs", "--max-epochs", 3, "--device", "cpu"]


def _fresh(root):
    return ["train", "swarm", *TINY, "--max-epochs", 1, "--data", root / "data.h5", "--runs-dir", root / "runs",
            "--name", "new"]


def _planted_cases(seeds):
    """(command, file, kind): one kind per file picked by the seed (fast), or every kind (slow)."""
    out = []
    for command in ("resume", "fresh"):
        for name in RUN_WRITES:
            kinds = PLANTED if seeds is None else [random.Random(f"{command}-{name}").choice(PLANTED)]
            out += [(command, name, kind) for kind in kinds]
    return out


def _check_planted_run_file(case, command, name, kind):
    root, outside = case
    run = root / "runs" / ("x" if command == "resume" else "new")
    plant(run / name, kind, outside)
    before = file_state(outside)
    with deadline():
        r = cli(*(_resume(root) if command == "resume" else _fresh(root)))
    assert_no_traceback(r)
    assert file_state(outside) == before, f"{name}: the link's target was written"
    if kind == "symlink" and r.exit_code == 0:  # a link may be removed (a restart clears it), never followed
        assert not (run / name).is_symlink() or name == "curves.png"


@pytest.mark.parametrize(("command", "name", "kind"), _planted_cases(seeds=1))
def test_a_planted_file_in_a_run_is_never_followed_and_never_hangs(case, command, name, kind):
    _check_planted_run_file(case, command, name, kind)


@pytest.mark.slow
@pytest.mark.parametrize(("command", "name", "kind"), _planted_cases(seeds=None))
def test_every_planted_file_in_a_run(case, command, name, kind):
    _check_planted_run_file(case, command, name, kind)


def test_a_planted_lock_link_is_refused_before_anything_is_written(case):
    root, outside = case
    plant(root / "runs" / "x" / ".lock", "symlink", outside)
    before, state = snapshot(root), file_state(outside)
    r = cli(*_resume(root))
    assert_clean_failure(r, root, before)
    assert "not a lock file" in r.output and file_state(outside) == state


# ---- outputs: a planted file in place of what a command writes -----------------------------------------

def _outputs(root):
    """(command line, the file it writes) for every command that writes a file outside training."""
    run, out = root / "runs" / "x", root / "out"
    return {
        "eval": (["eval", run, "--device", "cpu", "--out", out / "e.json"], out / "e.json"),
        "plot-entropy": (["plot-entropy", run, "--grid", 4, "--clusters", 3, "--size", 10, "--device", "cpu",
                          "--out", out], out / "classes.png"),
        "shuffle-variance": (["shuffle-variance", run, "--tasks", 2, "--shuffles", 2, "--device", "cpu", "--out",
                              out], out / "summary.json"),
        "report": (["report", "--runs-dir", root / "runs", "--out", out], out / "frontier.png"),
        "gen-data": (["gen-data", "--out", out / "d.h5", "--tasks", 4, "--n-min", 5, "--n-max", 20, "--force"],
                     out / "d.h5"),
    }


@pytest.mark.parametrize("kind", PLANTED)
@pytest.mark.parametrize("command", ["eval", "plot-entropy", "shuffle-variance", "report", "gen-data"])
def test_a_planted_file_in_place_of_an_output_is_refused(case, command, kind):
    root, outside = case
    args, target = _outputs(root)[command]
    plant(target, kind, outside)
    before, state = snapshot(root), file_state(outside)
    with deadline():
        r = cli(*args)
    assert_clean_failure(r, root, before)
    assert file_state(outside) == state and str(target.name) in r.output


# ---- inputs: a FIFO or folder in place of a file a command reads ---------------------------------------

def _inputs(root):
    """(command line, a file it reads)."""
    run = root / "runs" / "x"
    return [
        (["train", "swarm", *TINY, "--max-epochs", 1, "--data", root / "data.h5", "--runs-dir", root / "r2"],
         root / "data.h5"),
        (["eval", run, "--device", "cpu"], run / "best.pt"),
        (["eval", run, "--device", "cpu"], run / "config.json"),
        (["eval", run, "--device", "cpu", "--data", root / "data.h5"], root / "data.h5"),
        (_resume(root), run / "last.pt"),
        (_resume(root), run / "metrics.jsonl"),
        (["plot-entropy", run, "--replot", "--out", root / "ent"], root / "ent" / "entropy.npz"),
        (["shuffle-variance", run, "--replot", "--out", root / "sv"], root / "sv" / "x.npz"),
    ]


@pytest.mark.parametrize("kind", ["fifo", "folder"])
@pytest.mark.parametrize("index", range(8))
def test_a_special_file_in_place_of_an_input_fails_in_one_line(case, index, kind):
    root, outside = case
    args, target = _inputs(root)[index]
    plant(target, kind, outside)
    before = snapshot(root)
    with deadline():
        r = cli(*args)
    assert_clean_failure(r, root, before)


# ---- outputs that would replace an input or a run's own file -------------------------------------------

@pytest.mark.parametrize("name", ["best.pt", "last.pt", "config.json", "metrics.jsonl"])
def test_eval_never_writes_over_the_run_it_reads(case, name):
    root, _ = case
    run = root / "runs" / "x"
    before = snapshot(root)
    r = cli("eval", run, "--device", "cpu", "--out", run / name)
    assert_clean_failure(r, root, before)
    assert "choose another output path" in r.output


def test_no_command_writes_over_its_input_or_another_run(case):
    root, _ = case
    run = root / "runs" / "x"
    before = snapshot(root)
    for args in (["eval", run, "--device", "cpu", "--data", root / "data.h5", "--out", root / "data.h5"],
                 ["eval", run / "best.pt", "--device", "cpu", "--out", root / "runs" / "x" / ".." / "x" / "best.pt"],
                 ["gen-data", "--out", run / "last.pt", "--tasks", 4, "--n-min", 5, "--n-max", 20, "--force"]):
        r = cli(*args)
        assert_clean_failure(r, root, before)
        assert "choose another output path" in r.output


# ---- a write that fails: EFBIG (ulimit -f) or ENOSPC (a full disk) on every write path -----------------

def _no_temporary_files(root):
    left = [p for p in root.rglob("*.tmp")]
    assert not left, left


# each command once in the default suite, a full disk and a file-size limit in turn; the other pairs slow
@pytest.mark.parametrize(("command", "err"), [
    tiered(command, err, default=(i % 2 == 0) == (err == errno.ENOSPC))
    for i, command in enumerate(("eval", "plot-entropy", "shuffle-variance", "report", "gen-data"))
    for err in (errno.EFBIG, errno.ENOSPC)])
def test_a_failing_write_of_an_output_leaves_nothing(case, command, err):
    root, _ = case
    args, target = _outputs(root)[command]
    if command == "gen-data":  # an old file to keep
        target.parent.mkdir()
        shutil.copyfile(root / "data.h5", target)
    before = snapshot(root)
    with failing_writes(target.name, err) as seen:
        r = cli(*args)
    assert seen["n"] >= 1, "the write was never attempted"
    assert_clean_failure(r, root, before)  # no new folder, file or temporary file; the old file kept
    assert str(target) in r.output and os_cause(err) in r.output


def os_cause(err):
    return {errno.EFBIG: "ulimit -f", errno.ENOSPC: "disk is full"}[err]


def test_a_checkpoint_that_cannot_be_written_keeps_the_previous_one_and_says_how_to_resume(case):
    root, _ = case
    args = ["train", "swarm", *TINY, "--max-epochs", 3, "--data", root / "data.h5", "--runs-dir", root / "runs",
            "--name", "new"]
    with failing_writes("last.pt", errno.ENOSPC, nth=2):  # epoch 0's last.pt is written, epoch 1's is not
        r = cli(*args)
    assert_no_traceback(r, code=1)
    run = root / "runs" / "new"
    assert "last.pt" in r.output and "--resume new" in r.output, r.output
    assert load_checkpoint(run / "last.pt").state.epoch == 1  # the run lost only the epoch in progress
    _no_temporary_files(root)
    r = cli(*args[:1], "swarm", "--resume", "new", "--runs-dir", root / "runs", "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert load_checkpoint(run / "last.pt").state.epoch == 3


def test_a_metrics_line_that_cannot_be_written_leaves_no_partial_line(case):
    root, _ = case
    args = ["train", "swarm", *TINY, "--max-epochs", 3, "--data", root / "data.h5", "--runs-dir", root / "runs",
            "--name", "new"]
    with failing_writes("metrics.jsonl", errno.EFBIG, nth=2):
        r = cli(*args)
    assert_no_traceback(r, code=1)
    assert "metrics.jsonl" in r.output and "--resume new" in r.output
    lines = (root / "runs" / "new" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [0]


def test_curves_that_cannot_be_drawn_after_training_say_the_training_is_saved(case):
    root, _ = case
    args = ["train", "swarm", *TINY, "--max-epochs", 1, "--data", root / "data.h5", "--runs-dir", root / "runs",
            "--name", "new"]
    with failing_writes("curves.png", errno.EFBIG):
        r = cli(*args)
    assert_no_traceback(r, code=1)
    assert "curves.png" in r.output and "training finished" in r.output
    run = root / "runs" / "new"
    assert not (run / "curves.png").exists() and load_checkpoint(run / "last.pt")
    _no_temporary_files(root)


def test_every_write_goes_through_swarmctl_files():
    """The write paths above are all the write paths: no module but swarmctl/files.py opens a file for
    writing (the kernel cache and the image unpacker write temporary files of their own, created
    exclusively, and rename them)."""
    allowed = {"files.py", "_ext.py", "images.py"}
    pattern = re.compile(r"open\([^)]*['\"][wax]b?\+?['\"]|\.write_(text|bytes)\(|savefig\([^)]*(path|tmp)|"
                         r"torch\.save\([^)]*(path|tmp)\)|np\.save[z_compressed]*\((path|tmp)|h5py\.File\((?!fh)[^)]*['\"][wa]")
    package = Path(__file__).resolve().parents[2] / "swarmctl"
    found = [f"{p.relative_to(package)}:{n}" for p in package.rglob("*.py") if p.name not in allowed
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found


# ---- a generated dataset the reader would refuse is never written ---------------------------------------

@pytest.mark.parametrize("option", [("--wishart-df", "1.0000001"), ("--wishart-scale", "1e300"),
                                    ("--wishart-scale", "1e-300")])
def test_gen_data_never_writes_a_file_its_reader_refuses(tmp_path, option):
    before = snapshot(tmp_path)
    r = cli("gen-data", "--out", tmp_path / "d.h5", "--tasks", 20, "--n-min", 20, "--n-max", 50, *option)
    assert_clean_failure(r, tmp_path, before)
    assert "inverse-Wishart" in r.output


@pytest.mark.parametrize("n", [1, 13])
def test_gen_data_mog4_writes_the_tasks_it_says(tmp_path, n):
    r = cli("gen-data", "--kind", "mog4", "--out", tmp_path / "m.h5", "--tasks", n)
    assert r.exit_code == 0 and f"{n} mog4 test tasks" in r.output, r.output
    splits, _ = read_dataset(tmp_path / "m.h5")
    assert len(splits["test"]) == n


@pytest.mark.slow
def test_a_real_file_size_limit_is_one_line_and_keeps_the_old_file(tmp_path):
    """`ulimit -f` in a real process: the OS's EFBIG, not an injected one, ends in one line, with none of the lines
    HDF5's C library prints on a failed write."""
    path = tmp_path / "d.h5"
    assert cli("gen-data", "--out", path, "--tasks", 4, "--n-min", 5, "--n-max", 20).exit_code == 0
    before = snapshot(tmp_path)
    limit = 64 * 1024  # the old file fits, the new one (about 1 MB) does not

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    args = ["gen-data", "--out", str(path), "--tasks", "200", "--force"]
    proc = subprocess.run([sys.executable, "-m", "swarmctl", *args], capture_output=True, text=True, timeout=300,
                          preexec_fn=limited, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and str(path) in err[0] and "ulimit -f" in err[0], proc.stderr
    assert snapshot(tmp_path) == before
