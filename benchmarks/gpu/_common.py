"""Shared pieces of the prepared GPU calls: a deadline, logged commands, the card, exports.

Every script runs swarmctl as a user would (``python -m swarmctl ...``) from the repository root, writes
into a work folder, and copies what is worth keeping into the output folder named on its command line.
``--smoke`` shrinks every size so the whole script runs on a CPU in seconds (tests/benchmarks run it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


STOPPING: list[str] = []  # the signal that asked the job to stop, once one did
LIVE: set[subprocess.Popen] = set()  # the commands started and not yet waited for


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
    script goes on through its quick steps (copies, packing, the record) with nothing left to wait for."""

    def handle(signum: int, frame: object) -> None:
        STOPPING.append(signal.Signals(signum).name)
        log(f"{STOPPING[0]}: stopping; the running commands get SIGTERM")
        for proc in list(LIVE):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handle)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def env() -> dict[str, str]:
    e = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
         "PYTHONUNBUFFERED": "1", "SWARMCTL_NO_DOWNLOAD": "1", "SWARMCTL_NO_EXT": "1", "COLUMNS": "120"}
    e.setdefault("OMP_NUM_THREADS", "4")  # several trainings share the host's cores
    return e


def start(args: list[str], logfile: Path) -> subprocess.Popen:
    """Start ``python -m swarmctl ARGS`` (or a script when args[0] ends in .py), output to ``logfile``."""
    cmd = [PY, *args] if args[0].endswith(".py") or args[0] == "-m" else [PY, "-m", "swarmctl", *args]
    log(" ".join(cmd[1:]) + f"  > {logfile.name}")
    fh = open(logfile, "a")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=fh, stderr=subprocess.STDOUT)
    LIVE.add(proc)
    return proc


def finish(proc: subprocess.Popen, timeout: float, grace: float = 30.0) -> int:
    """Wait for ``proc``; past ``timeout`` send SIGTERM (a trainer then saves last.pt), then SIGKILL."""
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


def run(args: list[str], logfile: Path, timeout: float) -> int:
    rc = finish(start(args, logfile), timeout)
    log(f"exit {rc}: {' '.join(args[:3])}")
    return rc


def parser(doc: str, name: str, wall: float = 540.0) -> argparse.ArgumentParser:
    """The options every experiment script takes: OUT, --wall, --skip-tests, --work, --smoke."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--wall", type=float, default=wall, help="seconds for the whole script")
    ap.add_argument("--skip-tests", action="store_true", help="do not run pytest -m gpu first")
    ap.add_argument("--work", type=Path, default=REPO / ".gpu-work" / name)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: the whole script in seconds on a CPU")
    return ap


def begin(a: argparse.Namespace, fresh: Path) -> tuple[Deadline, dict]:
    """Start the clock, make OUT, empty ``fresh`` (inside the work folder), print the card and run the GPU
    tests unless skipped; returns the deadline and the facts for summary.json."""
    deadline = Deadline(a.wall)
    a.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    facts = {"card": card()}
    if not a.skip_tests:
        facts["gpu_tests_exit"] = gpu_tests(a.out)
    return deadline, facts


def card() -> str:
    """The accelerator (or 'cpu') and the software versions, printed and returned."""
    import torch

    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        what = f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"
    else:
        what = "cpu (no CUDA)"
    line = f"device: {what}; torch {torch.__version__}; python {sys.version.split()[0]}"
    log(line)
    return line


def gpu_tests(out: Path, timeout: float = 180.0) -> int:
    """``pytest -m gpu`` (CPU against CUDA, CUDA graphs against eager steps, no host sync in a step) ->
    OUT/gpu-tests.txt, killed at ``timeout`` seconds (its exit then 124); every test skipped where no CUDA."""
    logfile = out / "gpu-tests.txt"
    cmd = [PY, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/gpu"]
    log(f"pytest -m gpu (cap {timeout:.0f} s)")
    with open(logfile, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=fh, stderr=subprocess.STDOUT)
        rc = finish(proc, timeout, grace=5)
    rc = 124 if rc < 0 else rc
    tail = logfile.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
    log(f"gpu tests exit {rc}: {tail[0]}")
    return rc


def export_run(run_dir: Path, dest: Path, weights_name: str | None = None) -> None:
    """Copy a run's small files to ``dest``; with ``weights_name`` also its best weights (no optimizer)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "metrics.jsonl", "curves.png"):
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, dest / name)
    for path in run_dir.glob("eval-*.json"):
        shutil.copy2(path, dest / path.name)
    if weights_name and (run_dir / "best.pt").is_file():
        sys.path.insert(0, str(REPO))
        from swarmctl.runs import export_weights

        export_weights(run_dir / "best.pt", dest / weights_name)


def summary(run_dir: Path) -> dict:
    """Epochs, best validation loss and seconds per epoch read from a run's metrics.jsonl."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return {"run": run_dir.name, "epochs": 0}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    net = [r["net_seconds"] for r in rows]
    per_epoch = [b - a for a, b in zip([0.0] + net, net, strict=False)]
    return {"run": run_dir.name, "epochs": len(rows), "best_val": rows[-1]["best_val"] if rows else None,
            "net_seconds": net[-1] if net else 0.0,
            "first_epoch_s": per_epoch[0] if per_epoch else None,
            "median_epoch_s": sorted(per_epoch)[len(per_epoch) // 2] if per_epoch else None}


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
    log(f"{path.name}: {json.dumps(data)}")
