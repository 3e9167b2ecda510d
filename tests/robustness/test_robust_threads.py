"""Thread counts from the command line and the environment, wrongly given: a variable PyTorch could not use
is ignored without a word (as PyTorch ignores one), a --threads beyond what PyTorch takes is refused with
exit 2; never a traceback or a C library's warning on stderr."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiered

from swarmctl import threads

REPO = Path(__file__).resolve().parents[2]
VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", threads.ENV, threads.SET_BY_SWARMCTL)


def _swarmctl(tmp_path, *args, **env):
    clean = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    return subprocess.run([sys.executable, "-m", "swarmctl", *args], capture_output=True, text=True, cwd=tmp_path,
                          env={**clean, "PYTHONPATH": str(REPO), "COLUMNS": "200", **env}, timeout=120)


# digits Python's int() reads or refuses but no C library does (a superscript two, an Arabic-Indic three),
# and counts past the C int PyTorch keeps and the unsigned long OpenMP reads
UNUSABLE = ["\u00b2", "\u0663", "2147483648", "99999999999999999999"]


@pytest.mark.parametrize("value", UNUSABLE)
@pytest.mark.parametrize("variable", [threads.ENV, "OMP_NUM_THREADS"])
def test_an_unusable_thread_variable_counts_as_none(variable, value):
    assert threads.choose(environ={variable: value}, cores=2, load=0.0) == threads.choose(environ={}, cores=2,
                                                                                          load=0.0)


# In a real process (OpenMP reads its variable itself, and would complain of a digit it cannot read): that
# case in the default suite, every other pair in the slow one.
@pytest.mark.parametrize(("variable", "value"), [
    tiered(variable, value, default=(variable, value) == ("OMP_NUM_THREADS", "\u00b2"))
    for variable in (threads.ENV, "OMP_NUM_THREADS") for value in UNUSABLE])
def test_an_unusable_thread_variable_is_ignored_quietly(tmp_path, variable, value):
    proc = _swarmctl(tmp_path, "models", **{variable: value})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr


# a process each: one past PyTorch's C int in the default suite, one past any C integer slow
@pytest.mark.parametrize("value", [tiered("2147483648", default=True), tiered("99999999999999999999", default=False)])
def test_a_thread_count_pytorch_cannot_take_is_refused_with_exit_2(tmp_path, value):
    proc = _swarmctl(tmp_path, "--threads", value, "models")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "--threads" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert not proc.stdout


def test_a_huge_thread_count_in_a_process_that_loaded_pytorch_is_capped_at_the_cores(cli, monkeypatch):
    """This process loaded PyTorch before it calls the CLI: `--threads 100000` ends normally with at most the
    usable cores (PyTorch takes a count as given, and crashed starting that many threads)."""
    import torch

    for variable in VARIABLES:  # as they were after the test, whatever the command sets
        monkeypatch.setenv(variable, "1")
        monkeypatch.delenv(variable)
    before = torch.get_num_threads()
    try:
        r = cli("--threads", 100000, "models")
        count = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert r.exit_code == 0, r.output
    assert 1 <= count <= min(os.cpu_count() or 1, threads.usable_cores()), count
