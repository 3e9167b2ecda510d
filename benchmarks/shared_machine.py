"""Commands on a shared machine: each alone, then beside one busy process, with the thread rule of
swarmctl/threads.py and with every core's thread (PyTorch's own default, what swarmctl did before).

Target (issue "hostile inputs, round 4"): beside one busy process, each command at most 3x its idle time.

    python benchmarks/shared_machine.py [--repeat 3] [--out DIR]

Prints one markdown table: the command, its median wall seconds idle and beside the busy process, for
the rule and for all cores, and the ratios. The busy process is a plain Python loop (one core).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLEAN = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "SWARMCTL_THREADS", "_SWARMCTL_THREADS_CHOSEN")


def commands(work: Path) -> dict[str, list[str]]:
    """The commands timed: each a few seconds alone on two cores, using the shipped models."""
    return {
        "sample --dataset mnist (20 images)": ["sample", "--dataset", "mnist", "--out", str(work / "s.png"),
                                               "--runs-dir", str(work / "runs")],
        "train swarm-mog 64-5-1, 20 steps": ["train", "swarm-mog", "--hidden", "64", "--iters", "5",
                                             "--steps-per-epoch", "20", "--val-batches", "2", "--max-epochs", "1",
                                             "--runs-dir", str(work / "runs"), "--device", "cpu"],
        "cluster docs/iris.csv": ["cluster", str(REPO / "docs" / "iris.csv"), "--columns", "2,3",
                                  "--out", str(work / "c.csv"), "--runs-dir", str(work / "runs")],
    }


def timed(args: list[str], threads: str | None, work: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    if threads is not None:
        env["SWARMCTL_THREADS"] = threads
    for stale in (work / "runs", work / "s.png", work / "s.npy", work / "c.csv"):
        subprocess.run(["rm", "-rf", str(stale)], check=True)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "swarmctl", *args], cwd=REPO, env=env, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return seconds


def busy() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="scratch folder [default: a temporary one]")
    a = ap.parse_args()
    work = a.out or Path(tempfile.mkdtemp(prefix="swarmctl-shared-"))
    work.mkdir(parents=True, exist_ok=True)
    cores = str(len(os.sched_getaffinity(0)))
    rows = []
    for label, args in commands(work).items():
        timed(args, None, work)  # warm caches (the fused kernels' build, the page cache)
        found: dict[tuple[str, bool], float] = {}
        for setting, threads in (("rule", None), ("all cores", cores)):
            found[setting, False] = statistics.median(timed(args, threads, work) for _ in range(a.repeat))
            hog = busy()
            try:
                time.sleep(65 if setting == "rule" else 1)  # the load average must see the busy process
                found[setting, True] = statistics.median(timed(args, threads, work) for _ in range(a.repeat))
            finally:
                hog.kill()
                hog.wait()
            time.sleep(65 if setting == "rule" else 1)  # and forget it before the next idle timing
        rows.append((label, found))
    print(f"{platform.processor() or platform.machine()}, {cores} usable cores, python {platform.python_version()}, "
          f"median of {a.repeat}\n")
    print("| command | rule: idle s | rule: busy s | rule: ratio | all cores: idle s | all cores: busy s | "
          "all cores: ratio |")
    print("|---|---|---|---|---|---|---|")
    for label, f in rows:
        print(f"| {label} | {f['rule', False]:.2f} | {f['rule', True]:.2f} | {f['rule', True] / f['rule', False]:.1f}x"
              f" | {f['all cores', False]:.2f} | {f['all cores', True]:.2f} | "
              f"{f['all cores', True] / f['all cores', False]:.1f}x |")


if __name__ == "__main__":
    main()
