"""The CPU thread rule (swarmctl/threads.py): --threads, then the user's variables, then the cores free."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmctl import threads
from swarmctl.threads import Threads, choose

REPO = Path(__file__).resolve().parents[1]


def _stat(*cpus: tuple[int, int, int]) -> str:
    """A /proc/stat text: one ``cpuN`` line per (user, idle, iowait) ticks given, and the summary line."""
    lines = [f"cpu{n} {user} 0 0 {idle} {iowait} 0 0 0 0 0" for n, (user, idle, iowait) in enumerate(cpus)]
    return "\n".join(["cpu  1 2 3 4 5 6 7 8 0 0", *lines, "intr 1 2 3", "procs_running 3"]) + "\n"


def _window(before: tuple, after: tuple, own: float = 0.0, cpus: set[int] | None = None) -> float | None:
    """The cores other processes kept busy between two /proc/stat texts, this process having used ``own``
    ticks between them."""
    a = threads.cpu_times(_stat(*before), own=100.0, cpus=cpus or {0, 1}, at=0.0)
    b = threads.cpu_times(_stat(*after), own=100.0 + own, cpus=cpus or {0, 1}, at=0.2)
    return threads.busy_elsewhere(a, b)


# ticks of two cores over a 0.2 s window (20 ticks each): (user, idle, iowait) before and after
IDLE = ((1000, 5000, 10), (1000, 5000, 10)), ((1000, 5020, 10), (1000, 5018, 12))
ONE_BUSY = ((1000, 5000, 10), (2000, 4000, 0)), ((1000, 5020, 10), (2020, 4000, 0))


def test_threads_read_the_usable_cores_busy_and_idle_time_from_proc_stat():
    reading = threads.cpu_times(_stat((7, 100, 3), (5, 50, 1), (9, 9, 9)), own=4.0, cpus={0, 2}, at=1.0)
    assert reading == threads.CpuTimes(cpus=2, busy=16, idle=121, own=4.0, at=1.0)  # cpu1 is not usable
    assert threads.cpu_times("intr 1 2 3\n", own=0.0) is None  # no core lines: no reading, every core counts as free
    assert threads.cpu_times(_stat((1, 2, 3)), own=0.0, cpus={5}) is None


def test_threads_right_after_another_job_ends_every_core_is_free():
    """The one-minute load average is still near 2 when a 2-core job has just ended: the window sees idle
    cores, and the command gets both."""
    assert _window(*IDLE) == 0.0
    assert choose(environ={}, cores=2, load=_window(*IDLE)) == Threads(2, "2 usable cores", cores=2)


def test_threads_a_busy_process_takes_a_core_away():
    assert _window(*ONE_BUSY) == 1.0
    assert choose(environ={}, cores=2, load=_window(*ONE_BUSY)) == Threads(1, "2 usable cores, 1.00 busy elsewhere", 2)
    assert choose(environ={}, cores=8, load=2.0).count == 6
    assert choose(environ={}, cores=1, load=1.0).count == 1  # never fewer than one


def test_threads_beside_a_busy_process_our_two_threads_would_thrash():
    """Two threads on two cores beside one busy process leave it two thirds of a core, which still takes a
    core away (two threads there took 0.79 s a step against 54 ms with one)."""
    before, after = ((0, 0, 0), (0, 0, 0)), ((14, 0, 0), (26, 0, 0))  # 40 ticks on 2 cores, busy throughout
    assert abs(_window(before, after, own=26.7) - 0.665) < 0.01  # our threads took the other 26.7 ticks
    assert choose(environ={}, cores=2, load=_window(before, after, own=26.7)).count == 1


def test_threads_this_process_own_time_is_not_another_process():
    before, after = ((0, 100, 0), (0, 100, 0)), ((20, 100, 0), (0, 120, 0))  # one core busy: this process
    assert _window(before, after, own=20.0) == 0.0
    assert choose(environ={}, cores=2, load=_window(before, after, own=20.0)).count == 2


def test_threads_under_a_cpu_quota_only_the_cores_beyond_it_are_free_to_others():
    """4 cores' quota on 8 cores read: others may take 4 of them without taking ours; a fifth takes one."""
    before = tuple((0, 0, 0) for _ in range(8))
    four = tuple((20, 0, 0) if n < 4 else (0, 20, 0) for n in range(8))
    five = tuple((20, 0, 0) if n < 5 else (0, 20, 0) for n in range(8))
    reading = [threads.cpu_times(_stat(*cpus), own=0.0, cpus=set(range(8)), at=0.0) for cpus in (before, four, five)]
    assert threads.busy_elsewhere(reading[0], reading[1], cores=4) == 0.0
    assert threads.busy_elsewhere(reading[0], reading[2], cores=4) == 1.0
    assert threads.busy_elsewhere(reading[0], reading[2]) == 5.0  # no quota: all eight are ours


@pytest.mark.parametrize(("busy", "expected"), [(0.0, 2), (0.49, 2), (0.5, 1), (1.4, 1), (2.0, 1)])
def test_threads_half_a_core_taken_elsewhere_takes_a_core_away(busy, expected):
    assert choose(environ={}, cores=2, load=busy).count == expected


def test_threads_without_proc_stat_every_usable_core_is_used(monkeypatch):
    monkeypatch.setattr(threads, "STAT", threads.Path("/proc/no-such-stat"))
    assert threads.cpu_times() is None and choose(environ={}, cores=3) == Threads(3, "3 usable cores", cores=3)


@pytest.fixture
def torch_threads(monkeypatch):
    """PyTorch's count and the thread variables restored after the test; PyTorch as not loaded yet while
    the test applies a count (as the CLI applies it)."""
    import torch

    before = torch.get_num_threads()
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", threads.SET_BY_SWARMCTL):
        monkeypatch.setenv(name, "1")
    monkeypatch.delitem(sys.modules, "torch")
    yield torch
    sys.modules["torch"] = torch
    threads.apply(Threads(1, "--threads"), reading=None)  # no re-check left behind
    torch.set_num_threads(before)


def test_threads_a_long_run_takes_the_cores_freed_or_taken_since_its_last_reading(torch_threads):
    """The re-check of a run (threads.adjust between steps) on the readings of three windows: another job
    busy (1 thread), then ended (2), then back (1)."""
    readings = [threads.cpu_times(_stat(*cores), own=own, cpus={0, 1}, at=t) for t, own, cores in [
        (0, 0, ((0, 0, 0), (0, 0, 0))),
        (5, 500, ((500, 0, 0), (500, 0, 0))),  # this process: one core; another: the other one
        (10, 1500, ((1000, 0, 0), (1000, 0, 0))),  # this process on both cores: the other job has ended
        (15, 2000, ((1500, 0, 0), (1500, 0, 0)))]]  # this process on one core, another on the other one
    threads.apply(Threads(2, "2 usable cores", cores=2), reading=readings[0])
    sys.modules["torch"] = torch_threads
    torch_threads.set_num_threads(2)
    counts = []
    for reading in readings[1:]:
        threads.adjust(reading)
        counts.append(torch_threads.get_num_threads())
    assert counts == [1, 2, 1]


def test_threads_adjust_gives_pytorch_the_count_of_the_rule_only(torch_threads):
    start = threads.cpu_times(_stat((0, 0, 0), (0, 0, 0)), own=0.0, cpus={0, 1}, at=0.0)
    freed = threads.cpu_times(_stat((500, 0, 0), (500, 0, 0)), own=1000.0, cpus={0, 1}, at=5.0)
    busy = threads.cpu_times(_stat((1000, 0, 0), (1000, 0, 0)), own=1500.0, cpus={0, 1}, at=10.0)
    threads.apply(Threads(1, "2 usable cores, 1.00 busy elsewhere", cores=2), reading=start)
    sys.modules["torch"] = torch_threads
    torch_threads.set_num_threads(1)
    assert threads.adjust(freed) == 2 and torch_threads.get_num_threads() == 2
    assert threads.adjust(busy) == 1 and torch_threads.get_num_threads() == 1
    for reason in ("--threads", threads.ENV, "OMP_NUM_THREADS"):  # a count the user gave is never changed
        del sys.modules["torch"]
        threads.apply(Threads(1, reason), reading=start)
        sys.modules["torch"] = torch_threads
        assert threads.adjust(freed) is None and torch_threads.get_num_threads() == 1
    threads.apply(Threads(1, "2 usable cores", cores=2), reading=start)  # PyTorch loaded: a host process's own count
    assert threads.adjust(freed) is None and torch_threads.get_num_threads() == 1


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


# Each check below is a process of its own (PyTorch takes its thread count once): the default suite starts one,
# test_threads_command_line_default_reaches_pytorch (the rule's count, written before PyTorch loads, is PyTorch's);
# the option's precedence is test_threads_option_wins_over_variables_and_load, and an option applied to a loaded
# PyTorch test_threads_a_host_process_keeps_its_threads_unless_the_option_asks.
@pytest.mark.slow
@pytest.mark.parametrize(("option", "variable"), [("1", "2"), ("2", "1")])
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
rule.usable_cores, rule.cpu_times = (lambda: 2), (lambda: None)  # the rule's own count: 2, whatever runs
sys.argv = ["swarmctl", *sys.argv[1:]]
from swarmctl.cli import main
try:
    main()
except SystemExit:
    pass
print(torch.get_num_threads(), file=sys.stderr)
"""


@pytest.mark.parametrize(("args", "expected"), [(["models"], 1), (["--threads", "2", "models"], 2)])
def test_threads_a_host_process_keeps_its_threads_unless_the_option_asks(args, expected, monkeypatch):
    """This process loaded PyTorch and chose one thread before calling the program's entry, as a host process does
    (a benchmark's runner, a notebook): the rule's own count (2 cores, idle) leaves it alone; --threads is applied.
    In a process started for it: test_threads_default_rule_leaves_a_host_process_threads_alone."""
    import signal

    import torch

    from swarmctl.cli import main

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "SWARMCTL_THREADS", threads.SET_BY_SWARMCTL):
        monkeypatch.setenv(name, "1")
        monkeypatch.delenv(name)  # unset while the command runs, as they were after the test
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "cpu_times", lambda *args, **kwargs: None)
    monkeypatch.setattr(sys, "argv", ["swarmctl", *args])
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}  # main() ignores them at its end
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.raises(SystemExit) as end:
            main()
        assert end.value.code == 0
        assert torch.get_num_threads() == expected
    finally:
        torch.set_num_threads(before)
        for s, h in handlers.items():
            signal.signal(s, h)


@pytest.mark.slow  # the default suite: test_threads_a_host_process_keeps_its_threads_unless_the_option_asks
@pytest.mark.parametrize(("args", "expected"), [(["models"], "1"), (["--threads", "2", "models"], "2")])
def test_threads_default_rule_leaves_a_host_process_threads_alone(args, expected):
    """A process that loaded PyTorch and set one thread before calling the CLI kept two after it (the rule's
    count on an idle machine): `mog_vs_authors.py --threads 1` measured swarmctl on two threads. A count asked
    for with --threads is applied."""
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                              "SWARMCTL_THREADS", threads.SET_BY_SWARMCTL)}
    proc = subprocess.run([sys.executable, "-c", _HOST, *args], capture_output=True, text=True, cwd=REPO, env=clean,
                          timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == expected
