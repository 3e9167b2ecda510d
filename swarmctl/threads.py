"""How many CPU threads a command's PyTorch and OpenMP work use: the cores free to this process, by the rule
of docs/design.md, "Threads" (``--threads``, else ``SWARMCTL_THREADS`` or ``OMP_NUM_THREADS``, else the usable
cores less those the load keeps busy). Plain standard library: the CLI calls it before anything heavy loads.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ENV = "SWARMCTL_THREADS"
SET_BY_SWARMCTL = "_SWARMCTL_THREADS_CHOSEN"  # marks an OMP_NUM_THREADS that this rule wrote, not the user
LOAD_SLACK = 0.25  # a load of 0.75 (one process busy three quarters of the last minute) takes a core away
MAX_COUNT = 2**31 - 1  # PyTorch keeps the count in a C int (torch.set_num_threads refuses more)


@dataclass(frozen=True)
class Threads:
    """The thread count chosen and why (for a log line and the tests)."""

    count: int
    reason: str


def _positive_int(text: str | None) -> int | None:
    """``text`` as a whole number 1..MAX_COUNT in ASCII digits, else None (an unusable variable is ignored,
    like PyTorch does; digits only Python reads, such as a superscript or Arabic-Indic digit, are unusable to
    OpenMP, which warns on stderr about such a value or one past its own range)."""
    if text is None or not (text.strip().isascii() and text.strip().isdigit()):
        return None
    value = int(text.strip())
    return value if 1 <= value <= MAX_COUNT else None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.floor(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def load_average() -> float:
    """The one-minute load average (0 where the system has none)."""
    try:
        return max(0.0, os.getloadavg()[0])
    except (AttributeError, OSError):
        return 0.0


def choose(requested: int | None = None, environ: dict[str, str] | None = None, cores: int | None = None,
           load: float | None = None) -> Threads:
    """The thread count by the module's rule. ``requested`` is ``--threads``; the other arguments default
    to this process's environment, cores and load (tests pass their own)."""
    env = os.environ if environ is None else environ
    if requested is not None:
        return Threads(requested, "--threads")
    for name in (ENV, "OMP_NUM_THREADS"):
        if name == "OMP_NUM_THREADS" and env.get(SET_BY_SWARMCTL) == env.get(name):
            continue  # written by this rule in a parent swarmctl process: choose again here
        value = _positive_int(env.get(name))
        if value is not None:
            return Threads(value, name)
    cores = usable_cores() if cores is None else cores
    load = load_average() if load is None else load
    busy = math.floor(load + LOAD_SLACK)
    count = max(1, cores - busy)
    reason = f"{cores} usable cores" + (f", load {load:.2f}" if busy else "")
    return Threads(count, reason)


def apply(threads: Threads, environ: dict[str, str] | None = None) -> None:
    """Use ``threads``: the variables PyTorch and OpenMP read at start-up, and PyTorch itself if already
    loaded, but then only for a count the user asked for (``--threads``, ``SWARMCTL_THREADS``): a process that
    loaded PyTorch and set its threads before calling the CLI keeps them against the default rule."""
    env = os.environ if environ is None else environ
    value = str(threads.count)
    if threads.reason != "OMP_NUM_THREADS":
        env["OMP_NUM_THREADS"] = value
        env["MKL_NUM_THREADS"] = value
        env[SET_BY_SWARMCTL] = value
    torch = sys.modules.get("torch")
    asked = threads.reason in ("--threads", ENV)
    if asked and torch is not None and environ is None and hasattr(torch, "set_num_threads"):
        # capped at the usable cores, as OpenMP caps a count read at start-up: a loaded PyTorch takes any
        # count and crashed (a segmentation fault) starting 100,000 threads
        torch.set_num_threads(min(threads.count, usable_cores()))
