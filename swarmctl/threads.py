"""The CPU thread count by the rule of docs/design.md, "Threads" (--threads, the user's variables, else the cores
other processes leave free, re-checked during a long run): standard library only, as it runs before PyTorch loads."""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ENV = "SWARMCTL_THREADS"
SET_BY_SWARMCTL = "_SWARMCTL_THREADS_CHOSEN"  # marks an OMP_NUM_THREADS that this rule wrote, not the user
BUSY_SLACK = 0.5  # half a core busy elsewhere takes a core away: one busy process beside our two threads on two
# cores gets only two thirds of a core, and must still count as one (else both sides thrash)
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
    """A reading of the cores ``cpus`` (the affinity's) from /proc/stat, None where there is none; arguments: tests'."""
    cpus = _affinity() if cpus is None else cpus
    try:  # per core: user nice system idle iowait irq softirq steal (guest time is inside user and nice)
        text = STAT.read_text() if stat is None else stat
        ticks = [[int(f) for f in rest.split()[:8]] for n, rest in re.findall(r"^cpu(\d+)\s(.*)$", text, re.M)
                 if cpus is None or int(n) in cpus]
        idle = sum(t[3] + t[4] for t in ticks)
    except (OSError, ValueError, IndexError):
        return None
    own = sum(os.times()[:2]) * os.sysconf("SC_CLK_TCK") if own is None else own
    at = time.monotonic() if at is None else at
    return CpuTimes(len(ticks), sum(map(sum, ticks)) - idle, idle, own, at) if ticks else None


def busy_elsewhere(before: CpuTimes, after: CpuTimes, cores: int | None = None) -> float | None:
    """The cores other processes kept busy between two readings (less those beyond a CPU quota of ``cores``)."""
    ticks = (after.busy + after.idle - before.busy - before.idle) / max(after.cpus, 1)
    if ticks <= 0 or after.cpus != before.cpus:
        return None
    others = (after.busy - before.busy) - (after.own - before.own)
    beyond = max(0, after.cpus - cores) if cores is not None else 0
    return min(float(after.cpus - beyond), max(0.0, others / ticks - beyond))


def free_cores(cores: int, busy: float) -> int:
    return max(1, cores - math.floor(busy + BUSY_SLACK))


def choose(requested: int | None = None, environ: dict[str, str] | None = None, cores: int | None = None,
           load: float | None = None, since: CpuTimes | None = None) -> Threads:
    """The count by the rule; ``load``: the cores busy elsewhere, else measured from ``since`` over WINDOW s (none
    without /proc/stat). "Terminals and environment": a variable not 1..MAX_COUNT in ASCII digits is ignored."""
    env = os.environ if environ is None else environ
    if requested is not None:
        return Threads(requested, "--threads")
    for name in (ENV, "OMP_NUM_THREADS"):
        text = (env.get(name) or "").strip()
        ours = name != ENV and env.get(SET_BY_SWARMCTL) == env.get(name)  # a parent swarmctl's: choose again
        if not ours and text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_COUNT:
            return Threads(int(text), name)
    cores = usable_cores() if cores is None else cores
    if load is None and (since := since or cpu_times()) is not None:
        time.sleep(max(0.0, WINDOW - (time.monotonic() - since.at)))
        load = None if (now := cpu_times()) is None else busy_elsewhere(since, now, cores)
    count = free_cores(cores, load or 0.0)
    return Threads(count, f"{cores} usable cores" + (f", {load:.2f} busy elsewhere" if count < cores else ""), cores)


_recheck: tuple[int, CpuTimes] | None = None  # the cores and last reading, where the rule chose the count


def apply(threads: Threads, environ: dict[str, str] | None = None, reading: CpuTimes | None = None) -> None:
    """Set the variables PyTorch and OpenMP read at start-up; a loaded PyTorch takes only a count the user gave."""
    global _recheck
    env = os.environ if environ is None else environ
    if threads.reason != "OMP_NUM_THREADS":
        env.update(dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS", SET_BY_SWARMCTL), str(threads.count)))
    if environ is not None:
        return
    torch = sys.modules.get("torch")
    reading = reading or cpu_times() if threads.cores is not None and torch is None else None
    _recheck = None if reading is None else (threads.cores, reading)
    if threads.reason in ("--threads", ENV) and torch is not None and hasattr(torch, "set_num_threads"):
        # at most the usable cores, as OpenMP caps a count read at start-up: PyTorch crashed starting 100,000
        torch.set_num_threads(min(threads.count, usable_cores()))


def adjust(now: CpuTimes | None = None) -> int | None:
    """Between a long run's steps, at most every RECHECK s: the rule's count, where it chose it; returned if changed."""
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
