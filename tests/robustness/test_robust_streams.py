"""Generated: standard streams that are closed or full, and odd terminals (COLUMNS 0 and 5, TERM=dumb,
an ASCII locale or output encoding, an unwritable HOME), through every command. The promise: a command
whose output cannot be written ends in one line on stderr with exit 1, no traceback and no file left;
a closed stream is never taken by a file swarmctl opens; odd terminals get readable output."""

from __future__ import annotations

import errno
import io
import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import tiered
from faults import snapshot
from typer.testing import CliRunner

from swarmctl.cli import app
from swarmctl.cli._options import console
from swarmctl.runs import run_path

TINY = ["--hidden", 4, "--iters", 2, "--batch-size", 8, "--device", "cpu", "--max-epochs", 1]


@pytest.fixture
def case(trained_runs, tmp_path):
    """root/: runs/x (a trained run), data.h5, p.csv (60 points)."""
    runs, data = trained_runs
    root = tmp_path / "case"
    shutil.copytree(runs / "swarm", root / "runs" / "x", ignore=shutil.ignore_patterns("cluster"))  # a study's output
    shutil.copyfile(data, root / "data.h5")
    rng = np.random.default_rng(0)
    pts = np.concatenate([rng.normal(0, 1, (30, 2)), rng.normal(6, 1, (30, 2))])
    np.savetxt(root / "p.csv", pts, delimiter=",", header="x,y", comments="")
    return root


def _commands(root):
    """A working command line for every command that prints (and the files it writes)."""
    run = root / "runs" / "x"
    return {
        "models": ["models"],
        "help": ["train", "--help"],
        "cluster": ["cluster", root / "p.csv", run, "--device", "cpu", "--out", root / "o.csv", "--plot",
                    root / "o.png"],
        "eval": ["eval", run, "--device", "cpu", "--data", root / "data.h5", "--out", root / "e.json"],
        "gen-data": ["gen-data", "--out", root / "d.h5", "--tasks", 4, "--n-min", 5, "--n-max", 20],
        "report": ["report", "--runs-dir", root / "runs", "--out", root / "rep"],
        "plot-entropy": ["plot-entropy", run, "--grid", 4, "--clusters", 3, "--size", 10, "--device", "cpu",
                         "--out", root / "ent"],
        "shuffle-variance": ["shuffle-variance", run, "--tasks", 2, "--shuffles", 2, "--device", "cpu", "--out",
                             root / "sv"],
        "train": ["train", "swarm", *TINY, "--data", root / "data.h5", "--runs-dir", root / "runs", "--name", "new"],
    }


class _Full(io.RawIOBase):
    """A standard output on a full disk (/dev/full) or a closed pipe: every write fails with ``err``."""

    def __init__(self, err):
        self.err, self.failing = err, True

    def writable(self):
        return True

    def write(self, b):
        if self.failing:
            raise OSError(self.err, os.strerror(self.err))
        return len(b)


def _invoke_with_stdout(args, err):
    """Run swarmctl in this process with standard output failing as ``err``: (exit code, stderr)."""
    raw = _Full(err)
    out, stderr = io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8"), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, stderr
    try:
        app(args=[str(a) for a in args], prog_name="swarmctl")
        code = 0
    except SystemExit as exc:
        code = exc.code
    finally:
        raw.failing = False  # what is left in the buffers may go now, into this stream: no error when collected
        console.print(end="")  # rich keeps what a failed write held: it would open the next command's output
        sys.stdout, sys.stderr = saved
    return code, stderr.getvalue()


PRINTING = ["models", "help", "cluster", "eval", "gen-data", "report", "plot-entropy", "shuffle-variance", "train"]


# each command once in the default suite, a full disk and a closed pipe in turn; the other pairs in the slow one
@pytest.mark.parametrize(("command", "err"), [
    tiered(command, err, default=(i % 2 == 0) == (err == errno.ENOSPC))
    for i, command in enumerate(PRINTING) for err in (errno.ENOSPC, errno.EPIPE)])
def test_an_output_that_cannot_be_printed_is_one_line_and_leaves_no_file(case, monkeypatch, command, err):
    monkeypatch.setenv("COLUMNS", "200")
    before = snapshot(case)
    code, stderr = _invoke_with_stdout(_commands(case)[command], err)
    assert code == 1, stderr
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "standard output" in lines[-1] and "Traceback" not in stderr, stderr
    if command == "train":  # training keeps what it made (the README): here, nothing was trained yet
        return
    after = snapshot(case)
    assert sorted(after) == sorted(before) and all(after[k] == before[k] for k in before), set(after) ^ set(before)


# ---- real processes: /dev/full, closed streams, encodings, locales -------------------------------------------

def _swarmctl(args, *, env=None, **kwargs):
    return subprocess.run([sys.executable, "-m", "swarmctl", *map(str, args)], capture_output=kwargs.pop(
        "capture_output", True), text=True, timeout=180, env={**os.environ, "COLUMNS": "200", **(env or {})},
        **kwargs)


# a process each: the help (which loads no PyTorch) in the default suite, a command that loads it and one that
# computes first in the slow one
@pytest.mark.parametrize("command", [tiered("help", default=True), tiered("models", default=False),
                                     tiered("cluster", default=False)])
def test_a_command_on_dev_full(case, command):
    """A real full device as standard output, what is left in the buffers at exit included (every command, in
    process: test_an_output_that_cannot_be_printed_is_one_line_and_leaves_no_file)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    before = snapshot(case)
    with open("/dev/full", "w") as full:
        proc = _swarmctl(_commands(case)[command], stdout=full, capture_output=False, stderr=subprocess.PIPE)
    err = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 1 and len(err) == 1 and "standard output" in err[0], proc.stderr
    assert snapshot(case) == before


_CHECK_FDS = """
import atexit, os, sys
REPORT = sys.argv[1]
def report():
    with open(REPORT, "w") as fh:
        fh.write(" ".join(os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else "closed"
                          for fd in (0, 1, 2)))
atexit.register(report)
sys.argv = ["swarmctl", *sys.argv[2:]]
from swarmctl.cli import main
main()
"""


def test_closed_standard_streams_are_never_taken_by_a_file(case):
    """With 0, 1 and 2 closed, the files swarmctl opens would get those numbers (and whatever writes to
    stdout or stderr would write into them): they are reopened on /dev/null first, and the CSV is whole."""
    report = case / "fds.txt"
    args = ["cluster", case / "p.csv", case / "runs" / "x", "--device", "cpu", "--out", case / "o.csv"]  # no figure
    proc = subprocess.run([sys.executable, "-c", _CHECK_FDS, str(report), *map(str, args)], timeout=180,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          preexec_fn=lambda: [os.close(fd) for fd in (0, 1, 2)])
    assert proc.returncode == 0
    assert report.read_text() == "/dev/null /dev/null /dev/null"
    back = np.loadtxt(case / "o.csv", delimiter=",", skiprows=2)  # the comment line, the header
    assert back.shape == (60, 5)


# the default suite: test_closed_standard_streams_are_never_taken_by_a_file (one start-up with 0, 1 and 2 closed)
@pytest.mark.slow
def test_a_closed_standard_input_is_named(case):
    proc = _swarmctl(["cluster", "-", case / "runs" / "x", "--device", "cpu"], cwd=case, stdin=subprocess.DEVNULL,
                     preexec_fn=lambda: os.close(0))
    err = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 1 and len(err) == 1 and "standard input is closed" in err[0], proc.stderr
    assert not (case / "runs" / "x" / "cluster").exists()


ASCII_TERMINALS = {"PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
                   "C locale": {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}}


# a process each (both commands in process: test_an_ascii_output_encoding_in_process)
@pytest.mark.slow  # the default suite: test_cluster_in_a_hostile_terminal
@pytest.mark.parametrize("terminal", ASCII_TERMINALS)
@pytest.mark.parametrize("command", ["cluster", "train"])
def test_non_ascii_names_in_an_ascii_terminal(case, command, terminal):
    env = ASCII_TERMINALS[terminal]
    if command == "cluster":
        pts = case / "pé ☃.csv"
        shutil.copyfile(case / "p.csv", pts)
        proc = _swarmctl(["cluster", pts, case / "runs" / "x", "--device", "cpu"], env=env)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert (case / "runs" / "x" / "cluster" / "pé ☃-clusters.csv").is_file()  # the run's folder, as studies
    else:
        proc = _swarmctl(["train", "swarm", *TINY, "--data", case / "data.h5", "--runs-dir", case / "runs",
                          "--name", "é"], env=env)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert (case / "runs" / "é" / "best.pt").is_file()


def test_run_names_decoded_in_an_ascii_locale_stay_valid():
    """Bytes a C locale cannot decode arrive as lone surrogates (PEP 383): they are part of a name."""
    assert run_path("\udcc3\udca9", Path("runs")) == Path("runs") / "\udcc3\udca9"
    with pytest.raises(Exception, match="must stay inside"):
        run_path("a/\x00b", Path("runs"))


def test_an_ascii_output_encoding_in_process(case):
    pts = case / "pé.csv"
    shutil.copyfile(case / "p.csv", pts)
    r = CliRunner(charset="ascii").invoke(app, ["cluster", str(pts), str(case / "runs" / "x"), "--device", "cpu"],
                                          env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.output, r.exception)
    assert "p\\xe9.csv" in r.output
    r = CliRunner(charset="ascii").invoke(app, ["train", "swarm", *map(str, TINY), "--data", str(case / "data.h5"),
                                                "--runs-dir", str(case / "runs"), "--name", "é"],
                                          env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.output, r.exception)
    assert (case / "runs" / "é" / "best.pt").is_file() and "\\xe9" in r.output


@pytest.mark.slow  # the default suite: test_cluster_in_a_hostile_terminal
def test_an_unwritable_home_prints_no_matplotlib_warning(case):
    env = {"HOME": "/dev/null", "MPLCONFIGDIR": "", "XDG_CONFIG_HOME": "", "XDG_CACHE_HOME": ""}
    proc = _swarmctl(_commands(case)["cluster"], env=env)
    # swarmctl's own one-line warnings about the set (it is smaller than the model's training sets) may appear
    assert proc.returncode == 0 and "atplotlib" not in proc.stderr, proc.stderr
    assert all(line.startswith("warning: ") and "trained on" in line for line in proc.stderr.splitlines()), proc.stderr
    assert (case / "o.png").read_bytes()[:4] == b"\x89PNG"


# ---- odd terminals --------------------------------------------------------------------------------------------

@pytest.mark.slow  # the default suite: test_cluster_in_a_hostile_terminal
@pytest.mark.parametrize("config", ["/proc/no-such", "{file}"])
def test_an_unwritable_mplconfigdir_prints_no_matplotlib_warning(case, config):
    """$MPLCONFIGDIR set to a folder that cannot be made or written (or a file): replaced by the private one."""
    (case / "a-file").write_text("not a folder\n")
    env = {"MPLCONFIGDIR": config.format(file=case / "a-file")}
    proc = _swarmctl(_commands(case)["cluster"], env=env)
    assert proc.returncode == 0 and "atplotlib" not in proc.stderr, proc.stderr
    assert (case / "o.png").read_bytes()[:4] == b"\x89PNG"


# each value once in the default suite, the help and `models` in turn, and `cluster`, which computes first, with
# one (COLUMNS=0 in the default suite's hostile terminal); every other pair slow
COLUMNS_VALUES = ("0", "5", "-3", "abc", "")


@pytest.mark.parametrize(("command", "columns"), [
    tiered(command, columns, default=(command, i % 2) in (("help", 0), ("models", 1)) or (command, columns) == (
        "cluster", "abc")) for command in ("cluster", "help", "models") for i, columns in enumerate(COLUMNS_VALUES)])
def test_an_odd_columns_value_still_prints_readable_lines(case, command, columns):
    args = [str(a) for a in _commands(case)[command]]
    r = CliRunner().invoke(app, args, env={"COLUMNS": columns})
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert lines, "nothing printed"
    words = {"cluster": "clustered in", "help": "--max-epochs", "models": "swarm"}[command]
    assert any(words in x for x in lines), r.output
    assert max(len(x) for x in lines) >= 40  # not folded into a column a few characters wide


@pytest.mark.slow  # the default suite: test_cluster_in_a_hostile_terminal
@pytest.mark.parametrize("columns", ["0", "5"])
def test_an_odd_columns_value_in_a_real_process(case, columns):
    """COLUMNS is read when the console is made, at start-up: in a process of its own."""
    for args, words in ((_commands(case)["cluster"], "clustered in"), (["train", "--help"], "--max-epochs")):
        proc = _swarmctl(args, env={"COLUMNS": columns})
        lines = [x for x in proc.stdout.splitlines() if x.strip()]
        assert proc.returncode == 0 and lines and any(words in x for x in lines), proc.stdout + proc.stderr
        assert max(len(x) for x in lines) >= 40, proc.stdout
        (case / "o.csv").unlink(missing_ok=True)
        (case / "o.png").unlink(missing_ok=True)


def _on_a_terminal(args, env):
    """Run swarmctl with stdout and stderr on a pseudo-terminal: (exit code, everything it showed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "swarmctl", *map(str, args)], stdout=slave, stderr=slave,
                            stdin=subprocess.DEVNULL, env={**os.environ, **env})
    os.close(slave)
    shown = b""
    while True:
        ready, _, _ = select.select([master], [], [], 180)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    return proc.wait(timeout=60), shown.decode(errors="replace")


def test_cluster_in_a_hostile_terminal(case):
    """One real process under every start-up condition the slow suite tries one at a time: a dumb terminal,
    COLUMNS=0, an ASCII-only output encoding, a home and matplotlib folder that cannot be written, and a file
    name that is not ASCII. It clusters, draws, says so in readable lines, and prints nothing else."""
    pts = case / "pé ☃.csv"
    shutil.copyfile(case / "p.csv", pts)
    env = {"TERM": "dumb", "COLUMNS": "0", "PYTHONIOENCODING": "ascii", "HOME": "/dev/null", "MPLCONFIGDIR": "",
           "XDG_CONFIG_HOME": "", "XDG_CACHE_HOME": ""}
    code, shown = _on_a_terminal(["cluster", pts, case / "runs" / "x", "--device", "cpu", "--plot", case / "o.png"],
                                 env)
    lines = [x for x in shown.splitlines() if x.strip()]
    assert code == 0 and "Traceback" not in shown, shown
    assert "\x1b" not in shown and "atplotlib" not in shown, repr(shown[:500])
    assert any("clustered in" in x for x in lines) and max(len(x) for x in lines) >= 40, shown
    assert all("trained on" in x for x in lines if x.startswith("warning: ")), shown
    assert (case / "runs" / "x" / "cluster" / "pé ☃-clusters.csv").is_file()
    assert (case / "o.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # the default suite: test_cluster_in_a_hostile_terminal
@pytest.mark.parametrize("columns", ["0", "5"])
def test_a_dumb_terminal_gets_no_escape_sequences(case, columns):
    code, shown = _on_a_terminal(_commands(case)["cluster"], {"TERM": "dumb", "COLUMNS": columns})
    assert code == 0, shown
    assert "\x1b" not in shown, repr(shown[:500])
    assert "clustered in" in shown


@pytest.mark.slow
def test_a_dumb_terminal_gets_its_error_line_without_escape_sequences(case):
    code, shown = _on_a_terminal(["cluster", case / "missing.csv", case / "runs" / "x"], {"TERM": "dumb"})
    assert code == 1 and "\x1b" not in shown and "does not exist" in shown, repr(shown)


@pytest.mark.slow
def test_compiled_training_on_the_cpu_prints_nothing_of_pytorchs_cuda_toolkit_lookup(tiny_h5, tmp_path):
    """`train --step compile` on the CPU: inductor's C++ path finds a CUDA toolkit (CUDA_HOME here) and PyTorch logs
    "No CUDA runtime is found" on stderr; a CPU run has nothing to do with CUDA and says nothing of it."""
    (tmp_path / "cuda").mkdir()
    env = {**os.environ, "CUDA_HOME": str(tmp_path / "cuda"), "CUDA_VISIBLE_DEVICES": "",
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    proc = subprocess.run([sys.executable, "-m", "swarmctl", "train", "swarm", "--hidden", "8", "--iters", "2",
                           "--max-epochs", "1", "--batch-size", "8", "--data", str(tiny_h5), "--device", "cpu",
                           "--step", "compile", "--runs-dir", str(tmp_path / "runs")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
