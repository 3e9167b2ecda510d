"""The CPU thread rule (swarmctl/threads.py): --threads, then the user's variables, then the cores free."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmctl import threads
from swarmctl.threads import Threads, choose

REPO = Path(__file__).resolve().parents[1]


def test_threads_idle_machine_uses_every_usable_core():
    assert choose(environ={}, cores=2, load=0.16).count == 2
    assert choose(environ={}, cores=16, load=0.0).count == 16


@pytest.mark.parametrize(("cores", "load", "expected"), [(2, 0.74, 2), (2, 0.75, 1), (2, 1.05, 1), (2, 3.9, 1),
                                                         (8, 2.0, 6), (1, 5.0, 1)])
def test_threads_a_busy_process_takes_a_core_away(cores, load, expected):
    chosen = choose(environ={}, cores=cores, load=load)
    assert chosen.count == expected
    assert (f"load {load:.2f}" in chosen.reason) == (expected < cores or load >= 0.75)


def test_threads_option_wins_over_variables_and_load():
    env = {"SWARMCTL_THREADS": "3", "OMP_NUM_THREADS": "5"}
    assert choose(4, environ=env, cores=2, load=9.0) == Threads(4, "--threads")


def test_threads_user_variables_win_over_the_load_rule():
    assert choose(environ={"SWARMCTL_THREADS": "3", "OMP_NUM_THREADS": "5"}, cores=2, load=1.0).count == 3
    assert choose(environ={"OMP_NUM_THREADS": "5"}, cores=2, load=1.0) == Threads(5, "OMP_NUM_THREADS")


@pytest.mark.parametrize("bad", ["0", "-1", "two", "", "1.5"])
def test_threads_unusable_variables_are_ignored(bad):
    assert choose(environ={"SWARMCTL_THREADS": bad, "OMP_NUM_THREADS": bad}, cores=2, load=1.0).count == 1


def test_threads_value_written_by_a_parent_swarmctl_is_chosen_again():
    env: dict[str, str] = {}
    threads.apply(choose(environ=env, cores=2, load=0.0), environ=env)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "2"
    # a child started later, when another process keeps a core busy, sees the parent's variable
    assert choose(environ=env, cores=2, load=1.0).count == 1
    # a value the user wrote is kept
    env["OMP_NUM_THREADS"] = "2"
    env.pop(threads.SET_BY_SWARMCTL)
    assert choose(environ=env, cores=2, load=1.0).count == 2


def test_threads_user_omp_variable_is_left_as_it_is():
    env = {"OMP_NUM_THREADS": "3"}
    threads.apply(choose(environ=env, cores=2, load=0.0), environ=env)
    assert env == {"OMP_NUM_THREADS": "3"}


def test_threads_usable_cores_follow_the_affinity():
    assert 1 <= threads.usable_cores() <= (os.cpu_count() or 1)
    if hasattr(os, "sched_getaffinity"):
        assert threads.usable_cores() <= len(os.sched_getaffinity(0))


_PROBE = """
import sys
sys.argv = ["swarmctl", *sys.argv[1:]]
from swarmctl.cli import main
try:
    main()
except SystemExit:
    pass
import os, torch
print(os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads(), file=sys.stderr)
"""


def _threads_of(args: list[str], **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                              "SWARMCTL_THREADS", threads.SET_BY_SWARMCTL)}
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, cwd=REPO,
                          env={**clean, **env}, timeout=120)
    variable, count = proc.stderr.strip().splitlines()[-1].split()
    return variable, int(count)


# Each check below is a process of its own (PyTorch takes its thread count once); the default suite runs one
# of each pair, the slow suite the other.
@pytest.mark.parametrize(("option", "variable"), [("1", "2"), pytest.param("2", "1", marks=pytest.mark.slow)])
def test_threads_command_line_option_reaches_pytorch(option, variable):
    assert _threads_of(["--threads", option, "models"], SWARMCTL_THREADS=variable) == (option, int(option))


def test_threads_command_line_default_reaches_pytorch():
    variable, count = _threads_of(["models"])
    assert int(variable) == count >= 1


@pytest.mark.slow
def test_threads_variable_reaches_pytorch():
    assert _threads_of(["models"], SWARMCTL_THREADS="1") == ("1", 1)


def test_threads_option_below_one_is_refused_with_exit_2():
    proc = subprocess.run([sys.executable, "-m", "swarmctl", "--threads", "0", "models"], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert "--threads" in proc.stderr


_HOST = """
import os, sys, torch
torch.set_num_threads(1)  # a host process (a benchmark's runner, a notebook) chose its threads
import swarmctl.threads as rule
rule.usable_cores, rule.load_average = (lambda: 2), (lambda: 0.0)  # the rule's own count: 2, whatever the load
sys.argv = ["swarmctl", *sys.argv[1:]]
from swarmctl.cli import main
try:
    main()
except SystemExit:
    pass
print(torch.get_num_threads(), file=sys.stderr)
"""


@pytest.mark.parametrize(("args", "expected"), [(["models"], "1"),
                                              pytest.param(["--threads", "2", "models"], "2", marks=pytest.mark.slow)])
def test_threads_default_rule_leaves_a_host_process_threads_alone(args, expected):
    """A process that loaded PyTorch and set one thread before calling the CLI kept two after it (the rule's
    count on an idle machine): `mog_vs_authors.py --threads 1` measured swarmctl on two threads. A count asked
    for with --threads is applied."""
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                              "SWARMCTL_THREADS", threads.SET_BY_SWARMCTL)}
    proc = subprocess.run([sys.executable, "-c", _HOST, *args], capture_output=True, text=True, cwd=REPO, env=clean,
                          timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == expected
