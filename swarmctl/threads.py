"""How many CPU threads PyTorch and OpenMP use, by the rule of docs/design.md, "Threads": ``--threads``, else
``SWARMCTL_THREADS`` or ``OMP_NUM_THREADS``, else the usable cores less those other processes kept busy over a short
window (/proc/stat; the one-minute load average where there is none), re-checked during a long run (:func:`adjust`).
Plain standard library: the CLI calls it before PyTorch loads."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ENV = "SWARMCTL_THREADS"
SET_BY_SWARMCTL = "_SWARMCTL_THREADS_CHOSEN"  # marks an OMP_NUM_THREADS that this rule wrote, not the user
BUSY_SLACK = 0.5  # half a core busy elsewhere takes a core away: one busy process beside our two threads on two
# cores gets only two thirds of a core, and must still count as one (else both sides thrash)
LOAD_SLACK = 0.25  # without /proc/stat, a one-minute load of 0.75 takes a core away
WINDOW = 0.1  # seconds: the shortest window the cores' time is measured over at start
RECHECK = 5.0  # seconds between the re-checks of a long run
MAX_COUNT = 2**31 - 1  # PyTorch keeps the count in a C int
STAT = Path("/proc/stat")


@dataclass(frozen=True)
class Threads:
    count: int
    reason: str
    cores: int | None = None  # the usable cores the rule counted; None: a count the user gave


@dataclass(frozen=True)
class CpuTimes:
    """Ticks since boot of the usable cores (every process: busy, and idle with I/O wait) and of this process."""

    cpus: int
    busy: int
    idle: int
    own: float
    at: float  # monotonic seconds


def _affinity() -> set[int] | None:
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None  # None: not Linux


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota."""
    cores = len(_affinity() or ()) or os.cpu_count() or 1
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    return cores


def cpu_times(stat: str | None = None, own: float | None = None, cpus: set[int] | None = None,
              at: float | None = None) -> CpuTimes | None:
    """A reading now of the cores in ``cpus`` (default: the affinity's) from /proc/stat, None where it names none
    or cannot be read; the arguments are for tests (``stat``: its text, ``own``: this process's ticks)."""
    try:
        text = STAT.read_text() if stat is None else stat
    except OSError:
        return None
    cpus = _affinity() if cpus is None else cpus
    busy = idle = found = 0
    for name, *fields in (line.split() for line in text.splitlines()):
        if not (name.startswith("cpu") and name[3:].isdigit()) or (cpus is not None and int(name[3:]) not in cpus):
            continue
        try:  # user nice system idle iowait irq softirq steal (guest time is inside user and nice)
            ticks = [int(f) for f in fields[:8]]
            idle += ticks[3] + ticks[4]
        except (ValueError, IndexError):
            return None
        busy += sum(ticks) - ticks[3] - ticks[4]
        found += 1
    own = sum(os.times()[:2]) * os.sysconf("SC_CLK_TCK") if own is None else own
    return CpuTimes(found, busy, idle, own, time.monotonic() if at is None else at) if found else None


def busy_elsewhere(before: CpuTimes, after: CpuTimes, cores: int | None = None) -> float | None:
    """The cores other processes kept busy between two readings: busy ticks less this process's, per core's tick;
    with a CPU quota of ``cores``, less the cores beyond it, which others fill without taking ours. None: no tick."""
    ticks = (after.busy + after.idle - before.busy - before.idle) / max(after.cpus, 1)
    if ticks <= 0 or after.cpus != before.cpus:
        return None
    others = (after.busy - before.busy) - (after.own - before.own)
    beyond = max(0, after.cpus - cores) if cores is not None else 0
    return min(float(after.cpus - beyond), max(0.0, others / ticks - beyond))


def free_cores(cores: int, busy: float) -> int:
    return max(1, cores - math.floor(busy + BUSY_SLACK))


def measure(since: CpuTimes | None = None, cores: int | None = None) -> float | None:
    """:func:`busy_elsewhere` from ``since`` (default: now) over at least :data:`WINDOW` s; None: no /proc/stat."""
    if (since := since or cpu_times()) is None:
        return None
    time.sleep(max(0.0, WINDOW - (time.monotonic() - since.at)))
    return None if (now := cpu_times()) is None else busy_elsewhere(since, now, cores)


def choose(requested: int | None = None, environ: dict[str, str] | None = None, cores: int | None = None,
           load: float | None = None, busy: float | None = None, since: CpuTimes | None = None) -> Threads:
    """The count by the rule (``requested``: ``--threads``); the other arguments default to this process's
    environment, cores and :func:`measure` (``load`` is used only where that gives None). A variable that is no
    whole number 1..MAX_COUNT in ASCII digits is ignored, as PyTorch and OpenMP ignore it."""
    env = os.environ if environ is None else environ
    if requested is not None:
        return Threads(requested, "--threads")
    for name in (ENV, "OMP_NUM_THREADS"):
        text = (env.get(name) or "").strip()
        ours = name != ENV and env.get(SET_BY_SWARMCTL) == env.get(name)  # a parent swarmctl's: choose again
        if not ours and text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_COUNT:
            return Threads(int(text), name)
    cores = usable_cores() if cores is None else cores
    busy = measure(since, cores) if busy is None and load is None else busy
    if busy is not None:
        count, why = free_cores(cores, busy), f"{busy:.2f} busy elsewhere"
    else:  # no /proc/stat: the load average, which lags a minute behind
        if load is None:
            try:
                load = max(0.0, os.getloadavg()[0])
            except (AttributeError, OSError):
                load = 0.0
        count, why = max(1, cores - math.floor(load + LOAD_SLACK)), f"load {load:.2f}"
    return Threads(count, f"{cores} usable cores" + (f", {why}" if count < cores else ""), cores)


_recheck: tuple[int, CpuTimes] | None = None  # the cores and last reading, where the rule chose the count


def apply(threads: Threads, environ: dict[str, str] | None = None, reading: CpuTimes | None = None) -> None:
    """Set the variables PyTorch and OpenMP read at start-up. A loaded PyTorch (a host process's own count) takes
    only a count the user gave; one the rule chose before PyTorch loaded is re-checked from ``reading`` (or now)."""
    global _recheck
    env = os.environ if environ is None else environ
    if threads.reason != "OMP_NUM_THREADS":
        env.update(dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS", SET_BY_SWARMCTL), str(threads.count)))
    if environ is not None:
        return
    torch = sys.modules.get("torch")
    reading = reading or cpu_times() if threads.cores is not None and torch is None else None
    _recheck = None if reading is None or threads.cores is None else (threads.cores, reading)
    if threads.reason in ("--threads", ENV) and torch is not None and hasattr(torch, "set_num_threads"):
        # at most the usable cores, as OpenMP caps a count read at start-up: PyTorch crashed starting 100,000
        torch.set_num_threads(min(threads.count, usable_cores()))


def adjust(now: CpuTimes | None = None) -> int | None:
    """Between a long run's steps: at most every :data:`RECHECK` s (``now``: at once, for tests), give PyTorch the
    rule's count for the time since the last reading, where the rule chose it; returns it where it changed."""
    global _recheck
    torch = sys.modules.get("torch")
    if _recheck is None or torch is None:
        return None
    cores, before = _recheck
    if now is None and (time.monotonic() - before.at < RECHECK or (now := cpu_times()) is None):
        return None
    _recheck, busy = (cores, now), busy_elsewhere(before, now, cores)
    count = None if busy is None else free_cores(cores, busy)
    if count is None or count == torch.get_num_threads():
        return None
    torch.set_num_threads(count)
    return count
