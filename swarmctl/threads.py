"""How many CPU threads a command's PyTorch and OpenMP work use: the cores free to this process now, by the
rule of docs/design.md, "Threads" (``--threads``, else ``SWARMCTL_THREADS`` or ``OMP_NUM_THREADS``, else the
usable cores less those other processes kept busy over a short window, re-checked during a long run by
:func:`adjust`). Plain standard library: the CLI calls it before anything heavy loads.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ENV = "SWARMCTL_THREADS"
SET_BY_SWARMCTL = "_SWARMCTL_THREADS_CHOSEN"  # marks an OMP_NUM_THREADS that this rule wrote, not the user
BUSY_SLACK = 0.5  # other processes that took half a core or more over the window take a core away: one busy
# process beside our two threads on two cores gets only two thirds of a core, and must still count as one
LOAD_SLACK = 0.25  # without /proc/stat, a one-minute load of 0.75 takes a core away
WINDOW = 0.1  # seconds: the shortest window the cores' time is measured over at start
RECHECK = 5.0  # seconds between the re-checks of a long run (:func:`adjust`)
MAX_COUNT = 2**31 - 1  # PyTorch keeps the count in a C int (torch.set_num_threads refuses more)
STAT = Path("/proc/stat")


@dataclass(frozen=True)
class Threads:
    """The thread count chosen and why (for a log line and the tests); ``cores``: the usable cores the rule
    counted, where the count is the rule's (None: the user's)."""

    count: int
    reason: str
    cores: int | None = None


@dataclass(frozen=True)
class CpuTimes:
    """One reading of the usable cores' time since boot (clock ticks, every process: busy, and idle with
    I/O wait) and of this process's own CPU time (ticks), at ``at`` (monotonic seconds)."""

    cpus: int
    busy: int
    idle: int
    own: float
    at: float


def _positive_int(text: str | None) -> int | None:
    """``text`` as a whole number 1..MAX_COUNT in ASCII digits, else None (an unusable variable is ignored,
    like PyTorch does; digits only Python reads, such as a superscript or Arabic-Indic digit, are unusable to
    OpenMP, which warns on stderr about such a value or one past its own range)."""
    if text is None or not (text.strip().isascii() and text.strip().isdigit()):
        return None
    value = int(text.strip())
    return value if 1 <= value <= MAX_COUNT else None


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota."""
    affinity = _affinity()
    cores = len(affinity) if affinity else os.cpu_count() or 1
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


def cpu_times(stat: str | None = None, own: float | None = None, cpus: set[int] | None = None,
              at: float | None = None) -> CpuTimes | None:
    """A reading of the cores in ``cpus`` (default: this process's affinity) from /proc/stat (``stat``: its
    text) and of this process's CPU time in ticks (``own``); None where there is no /proc/stat or it names
    none of those cores. The arguments are for tests; by default all is read now."""
    try:
        text = STAT.read_text() if stat is None else stat
    except OSError:
        return None
    cpus = _affinity() if cpus is None else cpus
    busy = idle = found = 0
    for line in text.splitlines():
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()) or (cpus is not None and int(name[3:]) not in cpus):
            continue
        try:  # user nice system idle iowait irq softirq steal (guest time is inside user and nice)
            ticks = [int(f) for f in fields[:8]]
        except ValueError:
            return None
        if len(ticks) < 5:
            return None
        found += 1
        idle += ticks[3] + ticks[4]
        busy += sum(ticks) - ticks[3] - ticks[4]
    if not found:
        return None
    if own is None:
        mine = os.times()
        own = (mine.user + mine.system) * os.sysconf("SC_CLK_TCK")
    return CpuTimes(found, busy, idle, own, time.monotonic() if at is None else at)


def busy_elsewhere(before: CpuTimes, after: CpuTimes, cores: int | None = None) -> float | None:
    """How many of the usable cores other processes kept busy between two readings (0.0 to the cores): their
    busy time less this process's own, per tick that passed on one core; with ``cores`` (a CPU quota below
    the cores read), less the cores beyond the quota, which others may fill without taking ours. None when
    no tick passed."""
    ticks = (after.busy + after.idle - before.busy - before.idle) / max(after.cpus, 1)
    if ticks <= 0 or after.cpus != before.cpus:
        return None
    others = (after.busy - before.busy) - (after.own - before.own)
    beyond = max(0, after.cpus - cores) if cores is not None else 0
    return min(float(after.cpus - beyond), max(0.0, others / ticks - beyond))


def free_cores(cores: int, busy: float) -> int:
    """The thread count beside other processes that kept ``busy`` cores busy: ``cores`` less
    ``floor(busy + BUSY_SLACK)``, never fewer than one."""
    return max(1, cores - math.floor(busy + BUSY_SLACK))


def measure(since: CpuTimes | None = None, cores: int | None = None) -> float | None:
    """The cores other processes kept busy since the reading ``since`` (default: one taken now), over at
    least :data:`WINDOW` seconds (the rest is waited), as :func:`busy_elsewhere` counts them; None where
    /proc/stat cannot be read."""
    since = since or cpu_times()
    if since is None:
        return None
    time.sleep(max(0.0, WINDOW - (time.monotonic() - since.at)))
    now = cpu_times()
    return None if now is None else busy_elsewhere(since, now, cores)


def choose(requested: int | None = None, environ: dict[str, str] | None = None, cores: int | None = None,
           load: float | None = None, busy: float | None = None, since: CpuTimes | None = None) -> Threads:
    """The thread count by the module's rule. ``requested`` is ``--threads``; ``busy`` the cores other
    processes keep busy (default: measured since the reading ``since``, :func:`measure`); ``load`` the
    one-minute load average, used only where there is no /proc/stat. The other arguments default to this
    process's environment and cores (tests pass their own)."""
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
    if busy is None and load is None:
        busy = measure(since, cores)
    if busy is None:  # no /proc/stat: the load average, which lags a minute behind
        load = load_average() if load is None else load
        taken = math.floor(load + LOAD_SLACK)
        return Threads(max(1, cores - taken), f"{cores} usable cores" + (f", load {load:.2f}" if taken else ""),
                       cores)
    count = free_cores(cores, busy)
    return Threads(count, f"{cores} usable cores" + (f", {busy:.2f} busy elsewhere" if count < cores else ""),
                   cores)


class Recheck:
    """The re-check of a count the rule chose, over a long run: :meth:`count` is the rule's count for the
    time since the last reading (``cores`` less what other processes took then), and that reading moves on."""

    def __init__(self, cores: int, reading: CpuTimes) -> None:
        self.cores, self.reading = cores, reading

    def count(self, now: CpuTimes) -> int | None:
        busy = busy_elsewhere(self.reading, now, self.cores)
        self.reading = now
        return None if busy is None else free_cores(self.cores, busy)


_RECHECK: list[Recheck] = []  # this process's re-check, where its count is the rule's (at most one)


def apply(threads: Threads, environ: dict[str, str] | None = None, reading: CpuTimes | None = None) -> None:
    """Use ``threads``: the variables PyTorch and OpenMP read at start-up, and PyTorch itself if already
    loaded, but then only for a count the user asked for (``--threads``, ``SWARMCTL_THREADS``): a process that
    loaded PyTorch and set its threads before calling the CLI keeps them against the default rule. A count the
    rule chose in this process before PyTorch loaded is re-checked from now (``reading``: the /proc/stat
    reading to start from, default one taken now) by :func:`adjust`."""
    env = os.environ if environ is None else environ
    value = str(threads.count)
    if threads.reason != "OMP_NUM_THREADS":
        env["OMP_NUM_THREADS"] = value
        env["MKL_NUM_THREADS"] = value
        env[SET_BY_SWARMCTL] = value
    if environ is not None:
        return
    torch = sys.modules.get("torch")
    _RECHECK.clear()
    reading = reading or cpu_times()
    if threads.cores is not None and torch is None and reading is not None:
        _RECHECK.append(Recheck(threads.cores, reading))
    if threads.reason in ("--threads", ENV) and torch is not None and hasattr(torch, "set_num_threads"):
        # capped at the usable cores, as OpenMP caps a count read at start-up: a loaded PyTorch takes any
        # count and crashed (a segmentation fault) starting 100,000 threads
        torch.set_num_threads(min(threads.count, usable_cores()))


def adjust(now: CpuTimes | None = None) -> int | None:
    """During a long run (the trainer calls it between steps): where the rule chose this process's count,
    choose again from what other processes took since the last reading, at most every :data:`RECHECK`
    seconds (``now``: the reading to use at once, for tests), and give PyTorch the new count. Returns the
    count set when it changed, else None. A count the user gave (``--threads``, a variable) and a host
    process's own are never changed."""
    torch = sys.modules.get("torch")
    if not _RECHECK or torch is None:
        return None
    if now is None:
        if time.monotonic() - _RECHECK[0].reading.at < RECHECK:
            return None
        now = cpu_times()
        if now is None:
            return None
    count = _RECHECK[0].count(now)
    if count is None or count == torch.get_num_threads():
        return None
    torch.set_num_threads(count)
    return count
