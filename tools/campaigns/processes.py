"""The processes of a campaign job: its deadline, the swarmctl commands it runs (each logged to a file and
stopped in time), and the signals that stop it gracefully.

Every command runs as a user would run it (``python -m swarmctl ...``) in the current folder, with the
swarmctl this process imported first on its path. What the job says goes to the ``tools.campaigns``
logger (`python -m tools.campaigns run` prints it, one time-stamped line per message: its log on standard
output, what went wrong and the signal that stopped it, :func:`warn`, on standard error). Once a signal
came, no command starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import swarmctl
from swarmctl import threads
from swarmctl.files import read_metrics
from swarmctl.rundir import RunDir
from tools.campaigns.files import open_log_file

PY = sys.executable
SOURCE = Path(swarmctl.__file__).resolve().parents[1]  # the folder holding this swarmctl
GPU_TESTS = Path("tests") / "gpu"  # the repository's GPU tests: run when the job runs in a checkout
LOG = logging.getLogger("tools.campaigns")

STOPPING: list[str] = []  # the signal that asked the job to stop, once one did
LIVE: set[subprocess.Popen] = set()  # the commands started and not yet waited for
GRACE_S = 30.0  # seconds a command stopped for its time has, after SIGTERM, before SIGKILL
PR_SET_PDEATHSIG = 1  # Linux's prctl option: a signal for the calling process when its parent dies
_prctl = None
if sys.platform.startswith("linux"):
    with contextlib.suppress(OSError, AttributeError):
        _prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child may not load a library


def log(msg: str) -> None:
    LOG.info(msg)


def warn(msg: str) -> None:
    """What went wrong, or the signal that stops the job (standard error, where the job's log is printed)."""
    LOG.warning(msg)


class Deadline:
    """Seconds left of the call's wall budget, counted from construction; none once the job was asked to
    stop (:func:`stop_on_signals`)."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return 0.0 if STOPPING else self.end - time.monotonic()


def stop_on_signals() -> None:
    """SIGTERM or SIGINT (a batch scheduler's notice, a preemption) stops the job the graceful way: every
    running command gets SIGTERM (a trainer then saves its last.pt), every deadline reads zero, and the
    job goes on through its quick steps (copies, packing, the record) with nothing left to wait for."""

    def handle(signum: int, frame: object) -> None:
        STOPPING.append(signal.Signals(signum).name)
        warn(f"{STOPPING[0]}: stopping; the running commands get SIGTERM, no other command starts")
        for proc in list(LIVE):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handle)


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every command: this swarmctl first on the path, no downloads, no kernel builds."""
    e = {**os.environ, "PYTHONPATH": str(SOURCE) + os.pathsep + os.environ.get("PYTHONPATH", ""),
         "PYTHONUNBUFFERED": "1", "SWARMCTL_NO_DOWNLOAD": "1", "SWARMCTL_NO_EXT": "1", "COLUMNS": "120"}
    if threads.SET_BY_SWARMCTL in e and e.get(threads.SET_BY_SWARMCTL) == e.get("OMP_NUM_THREADS"):
        del e["OMP_NUM_THREADS"], e[threads.SET_BY_SWARMCTL]  # the job's own rule, not the user's: 4 below
    e.setdefault("OMP_NUM_THREADS", "4")  # several trainings share the host's cores
    return {**e, **(extra or {})}


def launch(cmd: list[str], logfile: Path, extra_env: dict[str, str] | None = None,
           cpus: frozenset[int] | None = None) -> subprocess.Popen | None:
    """Start ``cmd`` with its output appended to ``logfile``, held to ``cpus`` when given (its threads too); None,
    and nothing started, once a signal came."""
    if STOPPING:
        return None
    with open_log_file(logfile) as fh:
        proc = subprocess.Popen(cmd, env=env(extra_env), stdout=fh, stderr=subprocess.STDOUT,
                                preexec_fn=_in_child(cpus, os.getpid()))
    LIVE.add(proc)
    return proc


def _in_child(cpus: frozenset[int] | None, job: int) -> Callable[[], None] | None:
    """What a command's process does before it runs: hold itself to ``cpus`` (when given) and, on Linux, ask for
    SIGTERM when the job dies, however (a SIGKILL leaves no training running unattended, holding its run's lock
    against the next job; it saves its last.pt instead)."""
    if _prctl is None and cpus is None:
        return None

    def setup() -> None:
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != job:  # the job died before that: nobody would tell, so the command does not start
                os._exit(1)
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    return setup


def start(args: list[str], logfile: Path, extra_env: dict[str, str] | None = None,
          cpus: frozenset[int] | None = None) -> subprocess.Popen | None:
    """Start ``python -m swarmctl ARGS`` (or a script when args[0] ends in .py), output to ``logfile``, with
    :func:`env` and ``extra_env``, held to ``cpus`` when given; None, and nothing started, once a signal came."""
    cmd = [PY, *args] if args[0].endswith(".py") or args[0] == "-m" else [PY, "-m", "swarmctl", *args]
    if STOPPING:
        log(f"not started ({STOPPING[0]} came): {' '.join(cmd[1:])}")
        return None
    held = f"  (CPUs {','.join(map(str, sorted(cpus)))})" if cpus else ""
    log(" ".join(cmd[1:]) + f"  > {logfile.name}{held}")
    return launch(cmd, logfile, extra_env, cpus)


def finish(proc: subprocess.Popen | None, timeout: float, grace: float | None = None) -> int | None:
    """Wait for ``proc``; past ``timeout`` send SIGTERM (a trainer then saves last.pt), then SIGKILL ``grace``
    seconds later (:data:`GRACE_S` by default). None for a command that was not started (a signal came first)."""
    if proc is None:
        return None
    grace = GRACE_S if grace is None else grace
    LIVE.add(proc)
    if STOPPING:  # asked to stop before this wait began
        timeout = min(timeout, 1.0)
    try:
        try:
            return proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            log(f"pid {proc.pid}: out of time, SIGTERM")
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait()
    finally:
        LIVE.discard(proc)


def gpu_tests(out: Path, timeout: float = 180.0) -> int | None:
    """``pytest -m gpu`` (CPU against CUDA, CUDA graphs against eager steps, no host sync in a step) ->
    ``out``/gpu-tests.txt, killed at ``timeout`` seconds (its exit then 124); every test skipped where no CUDA.
    None where the job does not run in the repository's checkout (no tests/gpu here)."""
    if not GPU_TESTS.is_dir():
        log(f"no {GPU_TESTS} here (not the repository's checkout): the GPU tests are not run")
        return None
    logfile = out / "gpu-tests.txt"
    log(f"pytest -m gpu (cap {timeout:.0f} s)")
    proc = launch([PY, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", str(GPU_TESTS)], logfile)
    rc = finish(proc, timeout, grace=5)
    if rc is None:
        return None
    rc = 124 if rc < 0 else rc
    tail = logfile.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
    log(f"gpu tests exit {rc}: {tail[0]}")
    return rc


def summary(run_dir: Path) -> dict:
    """Epochs, best validation loss and seconds per epoch read from a run's metrics."""
    path = RunDir(run_dir).metrics
    if not path.is_file():
        return {"run": run_dir.name, "epochs": 0}
    rows = read_metrics(path)
    net = [r["net_seconds"] for r in rows]
    per_epoch = [b - a for a, b in zip([0.0] + net, net, strict=False)]
    return {"run": run_dir.name, "epochs": len(rows), "best_val": rows[-1]["best_val"] if rows else None,
            "net_seconds": net[-1] if net else 0.0,
            "first_epoch_s": per_epoch[0] if per_epoch else None,
            "median_epoch_s": sorted(per_epoch)[len(per_epoch) // 2] if per_epoch else None}
